"""The LoRA sync payload: what crosses Ray from the PEFT/DeepSpeed trainer to the vLLM engines, and its checks.

Only the adapter travels (A, B and scaling per target module, keyed by HF base weight name, as plain Python:
every tensor is ``{"dtype": str, "shape": list[int], "data": bytes}``), so the payload survives pickle, Ray's
object store and vLLM's msgpack ``collective_rpc`` hop (a torch tensor in ``collective_rpc`` args arrives as a
list or not at all). Both engine-side modes read it: ``rft.train.lora_merge`` writes W0 + scaling * B @ A into
vLLM's weights, ``rft.train.lora_native`` serves it as a vLLM LoRA adapter.

Trainer, ``ActorPPOTrainer`` (all ranks gather, rank 0 builds; ppo_actor.patch)::

    named = lora_parameters(model)                       # [(peft_name, param)] of lora_A/lora_B
    with deepspeed.zero.GatheredParameters([p for _, p in named], enabled=zero_stage == 3):
        if rank == 0:
            payload = build_payload({n: p.data for n, p in named}, model.peft_config["default"],
                                    version=global_step)
    ref = ray.put(payload)                               # rank 0; a top-level ObjectRef arg is resolved
    results = ray.get([e.apply_lora_update.remote(ref) for e in vllm_engines])
    check_apply_results(results, payload)                # raises LoraSyncError on any mismatch
    raise_if_failed_on_any_rank(failure)                 # every rank: any rank's failure stops them all

Engine side: ``decode_payload`` (validated A, B and scaling per module), ``check_same_targets`` (a later sync
targets the first one's modules). Also ``encode_tensor`` / ``decode_tensor``, ``payload_nbytes``,
``hf_base_name`` (PEFT name -> HF base weight name). Every failure is a ``LoraSyncError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch

PAYLOAD_FORMAT = "rft-lora-sync/1"
_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
_LORA_RE = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])\.(?P<adapter>[^.]+)\.weight$")
_PEFT_PREFIX = "base_model.model."


class LoraSyncError(RuntimeError):
    """A LoRA sync that would leave vLLM generating from a policy other than the trainer's."""


def raise_if_failed_on_any_rank(failure: BaseException | None) -> None:
    """Collective: every rank's sync outcome in one all-gather; any failure raises a LoraSyncError on every rank.

    Rank 0 talks to the engines, every rank gathers: without this a rank that failed would stop alone and the
    others wait on the next collective until its timeout (60 minutes), or carry on. The message names the first
    failing rank and its error. Outside torch.distributed it just re-raises locally.
    """
    mine = f"{type(failure).__name__}: {failure}" if failure is not None else None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        outcomes: list[str | None] = [None] * dist.get_world_size()
        dist.all_gather_object(outcomes, mine)
    else:
        outcomes = [mine]
    failed = [(r, m) for r, m in enumerate(outcomes) if m is not None]
    if failed:
        first, message = failed[0]
        others = f" (also rank(s) {', '.join(str(r) for r, _ in failed[1:])})" if len(failed) > 1 else ""
        raise LoraSyncError(
            f"LoRA sync to vLLM failed on rank {first}{others}, stopping every rank: {message}"
        ) from failure


# ----------------------------------------------------------------------------------------------------------
# Tensor <-> plain Python


def encode_tensor(t: torch.Tensor) -> dict[str, Any]:
    """A tensor as ``{"dtype", "shape", "data": raw bytes}`` (CPU copy, C order)."""
    name = str(t.dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise LoraSyncError(f"cannot encode tensor of dtype {t.dtype}")
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return {"dtype": name, "shape": list(t.shape), "data": flat.view(torch.uint8).numpy().tobytes()}


def decode_tensor(enc: Mapping[str, Any]) -> torch.Tensor:
    """Inverse of :func:`encode_tensor`; validates dtype and byte count."""
    try:
        dtype = _DTYPES[enc["dtype"]]
        shape = [int(s) for s in enc["shape"]]
        data = enc["data"]
    except (KeyError, TypeError) as e:
        raise LoraSyncError(f"malformed encoded tensor: {e!r}") from e
    if not isinstance(data, bytes | bytearray | memoryview):
        raise LoraSyncError(f"encoded tensor data is {type(data).__name__}, expected bytes")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) != math.prod(shape) * itemsize:
        raise LoraSyncError(
            f"encoded tensor has {len(data)} bytes, shape {shape} {enc['dtype']} needs "
            f"{math.prod(shape) * itemsize}"
        )
    if math.prod(shape) == 0:  # no bytes to view (a 0-d tensor has one element and goes below)
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)


def payload_nbytes(payload: Mapping[str, Any]) -> int:
    """Bytes of tensor data in a payload (what the object store carries, give or take a few KB)."""
    return sum(len(m[k]["data"]) for m in payload["modules"] for k in ("A", "B"))


# ----------------------------------------------------------------------------------------------------------
# Trainer side


def hf_base_name(peft_module: str) -> str:
    """``base_model.model.model.layers.0.self_attn.q_proj`` -> ``model.layers.0.self_attn.q_proj.weight``."""
    return peft_module.removeprefix(_PEFT_PREFIX) + ".weight"


def lora_parameters(model: torch.nn.Module, adapter: str = "default") -> list[tuple[str, torch.nn.Parameter]]:
    """Every LoRA parameter of one adapter, in ``named_parameters`` order.

    Besides ``lora_A``/``lora_B`` weights this keeps any other kind (``lora_embedding_A`` of a targeted
    embedding, ``lora_magnitude_vector``, ...): ``build_payload`` refuses those, where skipping them would
    leave vLLM on a policy other than the trainer's without a word.
    """
    other = re.compile(rf"\.lora_\w+\.{re.escape(adapter)}(?:\.|$)")
    out = []
    for name, p in model.named_parameters():
        m = _LORA_RE.match(name)
        if (m and m["adapter"] == adapter) or (m is None and other.search(name)):
            out.append((name, p))
    return out


def _cfg(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def _pattern_value(patterns: Mapping[str, Any] | None, module_key: str, default: Any) -> Any:
    """PEFT's rank/alpha_pattern lookup: the first key matching a dotted suffix of the module key."""
    for key in patterns or {}:
        if re.match(rf"(.*\.)?({key})$", module_key):
            return patterns[key]
    return default


def _check_config(config: Any) -> None:
    problems = []
    if _cfg(config, "use_dora", False):
        problems.append("use_dora=True (magnitude vectors are not merged)")
    if _cfg(config, "fan_in_fan_out", False):
        problems.append("fan_in_fan_out=True (Conv1D layout)")
    if _cfg(config, "bias", "none") not in (None, "none"):
        problems.append(f"bias={_cfg(config, 'bias')!r} (trained biases are not synced)")
    if _cfg(config, "modules_to_save", None):
        problems.append("modules_to_save (full modules are not synced)")
    if _cfg(config, "target_parameters", None):
        problems.append("target_parameters (parameter-level LoRA on experts)")
    if problems:
        raise LoraSyncError("LoRA config not supported by the merge sync: " + "; ".join(problems))


def build_payload(
    named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
    lora_config: Any,
    *,
    adapter: str = "default",
    version: int = 0,
    wire_dtype: torch.dtype | None = None,
) -> dict[str, Any]:
    """Plain-Python payload of every target module's A, B and scaling, keyed by HF base weight name.

    ``named_tensors`` are PEFT names (``…q_proj.lora_A.default.weight``) of gathered (full) tensors;
    ``lora_config`` is the ``LoraConfig`` (or its dict). ``wire_dtype`` None keeps the trainer's dtype.
    """
    _check_config(lora_config)
    items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in items:
        m = _LORA_RE.match(name)
        if m is None:
            if "lora_" in name:
                raise LoraSyncError(f"unsupported LoRA parameter {name!r} (only lora_A/lora_B weights)")
            continue
        if m["adapter"] != adapter:
            continue
        pairs.setdefault(m["module"], {})[m["which"]] = t
    if not pairs:
        raise LoraSyncError(f"no lora_A/lora_B parameters of adapter {adapter!r} in the given tensors")
    r_default = int(_cfg(lora_config, "r"))
    alpha_default = float(_cfg(lora_config, "lora_alpha"))
    rslora = bool(_cfg(lora_config, "use_rslora", False))
    modules = []
    for module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise LoraSyncError(f"{module}: has lora_{'A' if 'A' in ab else 'B'} but not its partner")
        a, b = ab["A"], ab["B"]
        key = module.removeprefix(_PEFT_PREFIX)
        r = int(_pattern_value(_cfg(lora_config, "rank_pattern"), key, r_default))
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r:
            raise LoraSyncError(
                f"{module}: lora_A {tuple(a.shape)} / lora_B {tuple(b.shape)} do not match r={r}; "
                "under ZeRO-3 gather them first (deepspeed.zero.GatheredParameters)"
            )
        alpha = float(_pattern_value(_cfg(lora_config, "alpha_pattern"), key, alpha_default))
        scaling = alpha / math.sqrt(r) if rslora else alpha / r
        if wire_dtype is not None:
            a, b = a.to(wire_dtype), b.to(wire_dtype)
        modules.append(
            {"name": hf_base_name(module), "scaling": scaling, "A": encode_tensor(a), "B": encode_tensor(b)}
        )
    return {
        "format": PAYLOAD_FORMAT,
        "version": int(version),
        "adapter": adapter,
        "num_modules": len(modules),
        "modules": modules,
    }


def check_apply_results(results: Any, payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Flatten per-engine/per-worker reports and raise unless every worker applied every module."""
    flat: list[dict[str, Any]] = []

    def walk(x: Any) -> None:
        if isinstance(x, Mapping):
            flat.append(dict(x))
        elif isinstance(x, list | tuple):
            for y in x:
                walk(y)
        else:
            raise LoraSyncError(f"unexpected apply result {x!r}")

    walk(results)
    if not flat:
        raise LoraSyncError("no vLLM worker reported a LoRA sync")
    want = int(payload["num_modules"])
    for i, rep in enumerate(flat):
        if rep.get("modules") != want or rep.get("version") != payload["version"]:
            raise LoraSyncError(
                f"vLLM worker {i} applied {rep.get('modules')} modules of version {rep.get('version')}, "
                f"expected {want} of version {payload['version']}"
            )
    return flat


def check_same_targets(first: Iterable[str], now: Iterable[str]) -> None:
    """Raise unless a later sync targets exactly the modules of the first one (names the differences)."""
    first, now = set(first), set(now)
    unknown, missing = sorted(now - first), sorted(first - now)
    if unknown or missing:
        raise LoraSyncError(
            f"payload targets differ from the first sync: unknown {unknown[:5]}, "
            f"missing {missing[:5]} ({len(unknown)} unknown, {len(missing)} missing)"
        )


# ----------------------------------------------------------------------------------------------------------
# Engine side


def decode_payload(payload: Mapping[str, Any]) -> dict[str, tuple[float, torch.Tensor, torch.Tensor]]:
    """HF base weight name -> (scaling, A, B) of every module; checks format, module count, names and shapes."""
    if payload.get("format") != PAYLOAD_FORMAT:
        raise LoraSyncError(f"payload format {payload.get('format')!r}, expected {PAYLOAD_FORMAT!r}")
    modules = payload["modules"]
    if len(modules) != payload.get("num_modules"):
        raise LoraSyncError(
            f"payload carries {len(modules)} modules but declares {payload.get('num_modules')}"
        )
    out: dict[str, tuple[float, torch.Tensor, torch.Tensor]] = {}
    for mod in modules:
        name = mod["name"]
        if name in out:
            raise LoraSyncError(f"payload names {name!r} twice")
        a, b = decode_tensor(mod["A"]), decode_tensor(mod["B"])
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
            raise LoraSyncError(f"{name}: A {tuple(a.shape)} and B {tuple(b.shape)} do not chain")
        out[name] = (float(mod["scaling"]), a, b)
    return out
