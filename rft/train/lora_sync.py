"""LoRA weight sync from the PEFT/DeepSpeed trainer into vLLM engines by merging W0 + ΔW into the base weights.

Only the adapter crosses the wire (A, B and scaling per target module, as plain Python: every tensor is
``{"dtype": str, "shape": list[int], "data": bytes}``), so the payload survives pickle, Ray's object store
and vLLM's msgpack ``collective_rpc`` hop (a torch tensor in ``collective_rpc`` args arrives as a list or
not at all). Each vLLM worker keeps a pristine copy of every base parameter it touches (taken on the first
sync) and writes ``round(W0 + scaling * B @ A)`` with the product formed in fp32 and rounded once, so
successive syncs never accumulate. Placement inside vLLM's fused / tensor-parallel parameters is learned
once from the model's own ``load_weights`` (probe tensors through the real loaders), so fused ``qkv_proj``
/ ``gate_up_proj``, GQA head splits and row/column-parallel narrowing are exactly vLLM's.

Public API (stable; the OpenRLHF patches call these):

Trainer, ``ActorPPOTrainer`` (all ranks gather, rank 0 builds)::

    named = lora_parameters(model)                       # [(peft_name, param)] of lora_A/lora_B
    with deepspeed.zero.GatheredParameters([p for _, p in named], enabled=zero_stage == 3):
        if rank == 0:
            payload = build_payload({n: p.data for n, p in named}, model.peft_config["default"],
                                    version=global_step)
    ref = ray.put(payload)                               # rank 0; a top-level ObjectRef arg is resolved
    results = ray.get([e.apply_lora_update.remote(ref) for e in vllm_engines])
    check_apply_results(results, payload)                # raises LoraSyncError on any mismatch

vLLM engine actor (``LLMRayActor.apply_lora_update(self, payload)``)::

    return await self.llm.collective_rpc("apply_lora_update", args=(payload,))

vLLM worker (``WorkerWrap.apply_lora_update(self, payload)``)::

    applier = getattr(self, "_rft_lora_applier", None) or LoraMergeApplier(self.model_runner.model)
    self._rft_lora_applier = applier
    return applier.apply(payload)                       # plain dict report, see LoraMergeApplier.apply

Notes: the first ``apply`` probes each target through ``load_weights`` (the touched weights are briefly
overwritten, then restored), so no generation may run during a sync; call ``reset_prefix_cache`` after it.
W0 copies cost the touched weights once more per GPU (``snapshot_device="cpu"`` moves them to host).

Also: ``encode_tensor`` / ``decode_tensor``, ``payload_nbytes``, ``hf_base_name`` (PEFT name -> HF base
weight name), ``bf16_rounding_report`` (how much of ΔW survives rounding into a bf16 W0). Every failure
is a ``LoraSyncError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

PAYLOAD_FORMAT = "rft-lora-sync/1"
_PROBE_BASE = 256  # integers 1..256 are exact in bf16, fp16 and fp32
_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
_LORA_RE = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])\.(?P<adapter>[^.]+)\.weight$")
_PEFT_PREFIX = "base_model.model."
_LAYER_RE = re.compile(r"\.(?:layers|block|h)\.(\d+)\.")


class LoraSyncError(RuntimeError):
    """A LoRA sync that would leave vLLM generating from a policy other than the trainer's."""


def raise_if_failed_on_rank0(failure: BaseException | None) -> None:
    """Collective: broadcast rank 0's sync failure (or None) so that every rank raises the same LoraSyncError.

    Only rank 0 talks to the engines; without this the other ranks would wait on the next barrier until the
    collective timeout (60 minutes) after rank 0 died. Outside torch.distributed it just re-raises locally.
    """
    message = [f"{type(failure).__name__}: {failure}" if failure is not None else None]
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(message, src=0)
    if message[0] is not None:
        raise LoraSyncError(f"LoRA sync to vLLM failed on rank 0, stopping every rank: {message[0]}") from failure


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
    if not shape or math.prod(shape) == 0:
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
# vLLM worker side

Index = slice | torch.Tensor


@dataclass
class _Placement:
    """Where one HF weight lands: ``param[dst_rows, dst_cols] = full[src_rows, src_cols]``."""

    param: str
    dst_rows: Index
    dst_cols: Index
    src_rows: Index
    src_cols: Index
    shape: tuple[int, int]  # full (unsharded) HF shape


def _as_index(idx: torch.Tensor) -> Index:
    """A contiguous ascending index as a slice (cheap views), otherwise the index tensor itself."""
    if idx.numel() and bool((idx[1:] - idx[:-1] == 1).all()):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def _region(t: torch.Tensor, rows: Index, cols: Index) -> tuple:
    if isinstance(rows, slice) and isinstance(cols, slice):
        return (rows, cols)
    r = torch.arange(t.shape[0], device=t.device)[rows] if isinstance(rows, slice) else rows.to(t.device)
    c = torch.arange(t.shape[1], device=t.device)[cols] if isinstance(cols, slice) else cols.to(t.device)
    return (r.unsqueeze(1), c.unsqueeze(0))


def _take(t: torch.Tensor, dim: int, idx: Index) -> torch.Tensor:
    if isinstance(idx, slice):
        return t.narrow(dim, idx.start, idx.stop - idx.start)
    return t.index_select(dim, idx.to(t.device))


class LoraMergeApplier:
    """Writes ``W0 + scaling * B @ A`` into a vLLM model's (fused, TP-sharded) base weights.

    ``model`` needs ``named_parameters()`` and vLLM's ``load_weights(iterable of (hf_name, full tensor))``
    returning the set of vLLM parameter names it loaded. ``snapshot_device`` holds W0 (default: the
    parameter's own device). ``tp_size``: the engine's tensor-parallel size; a rank must use at least 1/tp_size
    of every dimension of an adapter's weight, so a too-large adapter cannot be silently cut to fit.
    """

    def __init__(
        self, model: torch.nn.Module, *, snapshot_device: str | torch.device | None = None, tp_size: int = 1
    ):
        self.model = model
        self.tp_size = tp_size
        self.snapshot_device = snapshot_device
        self.params: dict[str, torch.nn.Parameter] = dict(model.named_parameters())
        self.placements: dict[str, _Placement] = {}
        self.pristine: dict[str, torch.Tensor] = {}

    # -- probing -------------------------------------------------------------------------------------------
    def _load(self, name: str, full: torch.Tensor) -> set[str]:
        """vLLM's own loader on one full HF tensor; a loader that refuses it (shape) is a LoraSyncError."""
        try:
            loaded = self.model.load_weights(weights=[(name, full)])
        except LoraSyncError:
            raise
        except Exception as e:  # noqa: BLE001  (vLLM loaders assert, raise ValueError, KeyError, ...)
            raise LoraSyncError(
                f"{name}: vLLM's load_weights refused a {tuple(full.shape)} tensor ({type(e).__name__}: {e}); "
                "the adapter does not fit the served model"
            ) from e
        return set(loaded or ())

    def _candidates(self, hf_name: str) -> list[str]:
        """Parameters a probe for ``hf_name`` may land in: 2-D float params of the same layer."""
        m = _LAYER_RE.search(hf_name)
        tok = re.compile(rf"\.{m.group(1)}\.") if m else None
        return [
            n
            for n, p in self.params.items()
            if p.dim() == 2 and p.is_floating_point() and (tok is None or tok.search(n))
        ]

    def _probe(self, hf_name: str, shape: tuple[int, int], snap: dict[str, torch.Tensor]) -> _Placement:
        """Learn where vLLM's own loader puts each element of ``hf_name`` (integer-coded probes, then a check)."""
        out_f, in_f = shape
        if max(out_f, in_f) > _PROBE_BASE * _PROBE_BASE:
            raise LoraSyncError(f"{hf_name}: dimension {max(shape)} too large to probe")
        some = next(iter(snap.values()))
        dtype, device = some.dtype, some.device
        rows = torch.arange(out_f, device=device)
        cols = torch.arange(in_f, device=device)

        def probe(codes: torch.Tensor, along_rows: bool) -> torch.Tensor:
            col = codes.to(dtype).unsqueeze(1 if along_rows else 0)
            return col.expand(out_f, in_f).contiguous()

        digits = [
            (rows % _PROBE_BASE + 1, True),
            (rows // _PROBE_BASE + 1, True),
            (cols % _PROBE_BASE + 1, False),
            (cols // _PROBE_BASE + 1, False),
        ]
        first = probe(*digits[0])
        loaded = self._load(hf_name, first)
        hit = [n for n in loaded if n in self.params]
        if not hit:
            raise LoraSyncError(
                f"vLLM's load_weights did not load {hf_name!r} (unknown name, silently skipped)"
            )
        if len(hit) != 1 or hit[0] not in snap:
            raise LoraSyncError(f"{hf_name!r} loaded into {sorted(loaded)}, expected one weight of its layer; "
                                "weights outside that layer may now be corrupt: restart the engine")
        pname = hit[0]
        param = self.params[pname]
        decoded, mask = [], None
        for codes, along_rows in digits:
            param.data.zero_()
            self._load(hf_name, probe(codes, along_rows))
            got = param.data.float().clone()
            m = got != 0
            if mask is None:
                mask = m
            elif not torch.equal(mask, m):
                raise LoraSyncError(f"{hf_name}: vLLM loader wrote different regions for different probes")
            decoded.append(got)
        row_hit, col_hit = mask.any(1), mask.any(0)
        if not row_hit.any() or not torch.equal(mask, row_hit.unsqueeze(1) & col_hit.unsqueeze(0)):
            raise LoraSyncError(f"{hf_name}: vLLM loader did not write a row x column block of {pname}")
        dst_r = row_hit.nonzero().squeeze(1)
        dst_c = col_hit.nonzero().squeeze(1)
        blocks = [d[dst_r][:, dst_c] for d in decoded]
        src_r_grid = (blocks[0] - 1) + _PROBE_BASE * (blocks[1] - 1)
        src_c_grid = (blocks[2] - 1) + _PROBE_BASE * (blocks[3] - 1)
        src_r, src_c = src_r_grid[:, 0], src_c_grid[0, :]
        if not (
            torch.equal(src_r_grid, src_r.unsqueeze(1).expand_as(src_r_grid))
            and torch.equal(src_c_grid, src_c.unsqueeze(0).expand_as(src_c_grid))
        ):
            raise LoraSyncError(f"{hf_name}: vLLM loader is not a plain row/column narrowing (cannot merge)")
        src_r, src_c = src_r.long(), src_c.long()
        for used, full, what in ((len(src_r), out_f, "rows"), (len(src_c), in_f, "columns")):
            if used * self.tp_size < full:
                raise LoraSyncError(
                    f"{hf_name}: vLLM's loader keeps {used} of the adapter weight's {full} {what} "
                    f"(tensor parallel {self.tp_size}): the adapter does not fit the served model"
                )
        if int(src_r.min()) < 0 or int(src_c.min()) < 0 or int(src_r.max()) >= out_f or int(src_c.max()) >= in_f:
            raise LoraSyncError(f"{hf_name}: vLLM loader is not a plain row/column narrowing (index out of range)")
        # final check with random values: the loader must be exactly param[dst] = full[src], nothing else
        gen = torch.Generator(device=device).manual_seed(0)  # leave the engine's global RNG alone
        rnd = torch.randn(out_f, in_f, device=device, generator=gen).to(dtype)
        param.data.zero_()
        self._load(hf_name, rnd)
        expect = torch.zeros_like(param.data)
        expect[dst_r.unsqueeze(1), dst_c.unsqueeze(0)] = rnd[src_r][:, src_c].to(expect.dtype)
        if not torch.equal(param.data, expect):
            raise LoraSyncError(f"{hf_name}: vLLM loader is not a plain row/column narrowing (cannot merge)")
        return _Placement(
            pname,
            _as_index(dst_r.cpu()),
            _as_index(dst_c.cpu()),
            _as_index(src_r.cpu()),
            _as_index(src_c.cpu()),
            (out_f, in_f),
        )

    def _discover(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        """First sync: probe every target (layer by layer) and keep W0 of each parameter touched."""
        by_layer: dict[str, list[str]] = {}
        for name in shapes:
            m = _LAYER_RE.search(name)
            by_layer.setdefault(m.group(1) if m else "", []).append(name)
        placements: dict[str, _Placement] = {}
        pristine: dict[str, torch.Tensor] = {}
        for names in by_layer.values():
            snap = {n: self.params[n].data.clone() for n in self._candidates(names[0])}
            if not snap:
                raise LoraSyncError(f"no 2-D float parameter in the vLLM model could hold {names[0]!r}")
            try:
                for name in names:
                    placements[name] = self._probe(name, shapes[name], snap)
            finally:
                for n, w in snap.items():
                    self.params[n].data.copy_(w)
            for pl in placements.values():
                if pl.param in snap and pl.param not in pristine:
                    pristine[pl.param] = snap[pl.param].to(self.snapshot_device or snap[pl.param].device)
        self._check_disjoint(placements)
        self.placements, self.pristine = placements, pristine

    @staticmethod
    def _check_disjoint(placements: Mapping[str, _Placement]) -> None:
        seen: dict[str, torch.Tensor] = {}
        for name, pl in placements.items():
            rows = (
                torch.arange(pl.dst_rows.stop)[pl.dst_rows] if isinstance(pl.dst_rows, slice) else pl.dst_rows
            )
            prev = seen.get(pl.param)
            if prev is not None and bool(torch.isin(rows, prev).any()):
                raise LoraSyncError(f"{name}: overlaps another target in {pl.param}")
            seen[pl.param] = rows if prev is None else torch.cat([prev, rows])

    # -- applying ------------------------------------------------------------------------------------------
    def _decode_modules(
        self, payload: Mapping[str, Any]
    ) -> dict[str, tuple[float, torch.Tensor, torch.Tensor]]:
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

    @torch.no_grad()
    def apply(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Write W0 + ΔW for every module; returns ``{"version", "modules", "params", "elements", "max_abs_delta"}``."""
        mods = self._decode_modules(payload)
        shapes = {n: (b.shape[0], a.shape[1]) for n, (_, a, b) in mods.items()}
        if not self.placements:
            self._discover(shapes)
        check_same_targets(self.placements, mods)
        for name, shape in shapes.items():
            if shape != self.placements[name].shape:
                raise LoraSyncError(
                    f"{name}: adapter implies weight {shape}, vLLM holds {self.placements[name].shape}"
                )
        by_param: dict[str, list[str]] = {}
        for name in mods:
            by_param.setdefault(self.placements[name].param, []).append(name)
        written, elements, max_abs = 0, 0, 0.0
        for pname, names in by_param.items():
            param = self.params[pname]
            acc = self.pristine[pname].to(param.device, torch.float32, copy=True)
            for name in names:
                scaling, a, b = mods[name]
                pl = self.placements[name]
                b_loc = _take(b.to(param.device), 0, pl.src_rows).float()
                a_loc = _take(a.to(param.device), 1, pl.src_cols).float()
                delta = (b_loc @ a_loc).mul_(scaling)
                acc[_region(acc, pl.dst_rows, pl.dst_cols)] += delta
                elements += delta.numel()
                max_abs = max(max_abs, float(delta.abs().max()) if delta.numel() else 0.0)
                written += 1
            param.data.copy_(acc.to(param.dtype))
        if written != payload["num_modules"]:
            raise LoraSyncError(f"updated {written} modules, payload declares {payload['num_modules']}")
        return {
            "version": payload["version"],
            "modules": written,
            "params": len(by_param),
            "elements": elements,
            "max_abs_delta": max_abs,
        }


# ----------------------------------------------------------------------------------------------------------
# bf16 rounding


def bf16_rounding_report(w0: torch.Tensor, delta: torch.Tensor) -> dict[str, float]:
    """How much of ``delta`` survives ``round_to(w0.dtype)(w0 + delta)``, over elements with delta != 0.

    ``swallowed``: fraction where the rounded weight equals W0; ``realized_norm_ratio``:
    ||round(W0+ΔW) - W0|| / ||ΔW||; ``rel_error``: ||(round(W0+ΔW) - W0) - ΔW|| / ||ΔW||.
    """
    w0f = w0.float()
    d = delta.float()
    merged = (w0f + d).to(w0.dtype)
    realized = merged.float() - w0f
    nz = d != 0
    n = int(nz.sum())
    if n == 0:
        return {
            "swallowed": float("nan"),
            "realized_norm_ratio": float("nan"),
            "rel_error": float("nan"),
            "elements": 0,
        }
    dn = float(d[nz].norm())
    return {
        "swallowed": float((merged[nz] == w0[nz]).float().mean()),
        "realized_norm_ratio": float(realized[nz].norm()) / dn,
        "rel_error": float((realized[nz] - d[nz]).norm()) / dn,
        "elements": n,
    }
