"""Native vLLM LoRA sync: the engines serve base + adapter (``enable_lora``) instead of merged weights.

The trainer sends the same payload as the merge sync (``rft.train.lora_payload.build_payload``: A, B and scaling
per module, plain Python). Each engine writes it as a PEFT adapter directory on tmpfs under a fresh adapter id,
has vLLM load it (``add_lora``), makes it the adapter of every later ``generate`` and drops the previous one.
Nothing is rounded into the base weights, so a small update is not swallowed by bf16 (see
``benchmarks/bench_lora_sync.py``); the price is the LoRA kernels in every forward.

Engine actor (``LLMRayActor.load_lora_adapter(self, payload)``, patched)::

    slot = self._rft_lora_slot = getattr(self, "_rft_lora_slot", None) or NativeLoraSlot()
    staged = slot.stage(payload)                        # checks, writes the adapter dir, picks the next id
    await self.llm.add_lora(LoRARequest(staged.name, staged.lora_int_id, staged.path))
    ...                                                 # generate(..., lora_request=that request) from now on
    slot.retire(previous)                               # remove_lora(previous id) first

Every failure is a ``LoraSyncError`` naming the module.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rft.io import pid_alive
from rft.plan.train_options import served_lora_rank
from rft.train.lora_payload import LoraSyncError, check_same_targets, decode_payload

_TMPFS = Path("/dev/shm")


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds an adapter of rank ``rank`` (LoraSyncError otherwise)."""
    try:
        return served_lora_rank(rank)
    except ValueError as e:
        raise LoraSyncError(str(e)) from None


GPT_OSS_CUDAGRAPH_MODE = "PIECEWISE"
"""Native LoRA on gpt-oss: vLLM's compilation_config cudagraph_mode (see docs/lora-sync.md, "CUDA graphs")."""


def native_engine_kwargs(lora_rank: int, model: str) -> dict[str, Any]:
    """vLLM engine arguments that make an engine serve base + one LoRA adapter of rank `lora_rank`.

    gpt-oss also gets piecewise CUDA graphs (attention eager between captured pieces) instead of vLLM's full
    decode graphs: with `enable_lora` vLLM runs the MXFP4 MoE on its LoRA-capable backends, a combination not run
    on a GPU here; docs/lora-sync.md says why and what it costs.
    """
    from rft.launch.rules import is_gpt_oss

    kwargs: dict[str, Any] = {"enable_lora": True, "max_lora_rank": vllm_max_lora_rank(lora_rank), "max_loras": 1}
    if is_gpt_oss(model):
        kwargs["compilation_config"] = {"cudagraph_mode": GPT_OSS_CUDAGRAPH_MODE}
    return kwargs


def adapter_tensors(payload: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """PEFT-format tensors of a payload: ``base_model.model.<module>.lora_A.weight`` and ``...lora_B.weight``.

    The module's scaling is folded into B in fp32 (vLLM folds it the same way when it loads an adapter), so the
    adapter config can say ``lora_alpha = r`` (scaling 1) whatever each module's own alpha or rank was.
    """
    out: dict[str, torch.Tensor] = {}
    for name, (scaling, a, b) in decode_payload(payload).items():
        if not name.endswith(".weight"):
            raise LoraSyncError(f"{name}: a LoRA target must be a weight name (…proj.weight)")
        key = "base_model.model." + name.removesuffix(".weight")
        out[key + ".lora_A.weight"] = a.float().contiguous()
        out[key + ".lora_B.weight"] = (b.float() * scaling).contiguous()
    return out


def write_peft_adapter(payload: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write the payload as a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors)."""
    from safetensors.torch import save_file

    tensors = adapter_tensors(payload)
    ranks = {t.shape[0] for k, t in tensors.items() if k.endswith(".lora_A.weight")}
    rank = max(ranks)
    targets = sorted({k.removesuffix(".lora_A.weight").rsplit(".", 1)[-1] for k in tensors if ".lora_A." in k})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": rank,  # scaling 1: each module's scaling is already in its B
        "target_modules": targets,
        "bias": "none",
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
        "lora_dropout": 0.0,
        "rft_payload_version": int(payload.get("version", 0)),
    }
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return out


def _shapes(payload: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Module name -> (A shape, B shape) as the payload declares them."""
    return {str(m["name"]): (tuple(m["A"]["shape"]), tuple(m["B"]["shape"])) for m in payload["modules"]}


@dataclass(frozen=True)
class StagedAdapter:
    """One synced adapter as vLLM knows it: LoRARequest(name, lora_int_id, path)."""

    name: str
    lora_int_id: int
    path: str
    version: int
    modules: int


def sweep_dead_slots(base: Path) -> list[Path]:
    """Delete `rft-lora-PID-*` directories under `base` whose engine process is gone (killed runs leave them on
    /dev/shm, which is RAM); returns those removed."""
    removed = []
    for d in base.glob("rft-lora-*-*"):
        pid = d.name.split("-")[2]
        if d.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class NativeLoraSlot:
    """Engine side of the native mode: every payload becomes a fresh adapter directory and adapter id.

    The first payload fixes the set of target modules and their shapes; a later payload with a module missing,
    an unknown module or a different shape is refused (``LoraSyncError`` naming it) before anything is written.
    Directories live under ``root`` (default: /dev/shm when present, else the temp dir).
    """

    def __init__(self, root: str | Path | None = None):
        base = Path(root) if root else (_TMPFS if _TMPFS.is_dir() and os.access(_TMPFS, os.W_OK) else None)
        if base is not None:
            base.mkdir(parents=True, exist_ok=True)
        sweep_dead_slots(Path(base) if base is not None else Path(tempfile.gettempdir()))
        self.root = Path(tempfile.mkdtemp(prefix=f"rft-lora-{os.getpid()}-", dir=base))
        atexit.register(self.close)  # a normal exit; a killed engine's directory goes at the next start
        self.shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self.next_id = 1

    def check(self, payload: Mapping[str, Any]) -> None:
        """Refuse a payload whose modules or shapes differ from the first one's."""
        shapes = _shapes(payload)
        if not self.shapes:
            return
        check_same_targets(self.shapes, shapes)
        for name, shape in shapes.items():
            if shape != self.shapes[name]:
                raise LoraSyncError(f"{name}: A/B shapes {shape}, the first sync had {self.shapes[name]}")

    def stage(self, payload: Mapping[str, Any]) -> StagedAdapter:
        """Check the payload, write it under a new id; returns what the LoRARequest needs."""
        self.check(payload)
        lora_id = self.next_id
        path = write_peft_adapter(payload, self.root / f"v{lora_id}")
        self.next_id += 1
        if not self.shapes:
            self.shapes = _shapes(payload)
        version = int(payload.get("version", 0))
        return StagedAdapter(f"rft-lora-{lora_id}", lora_id, str(path), version, len(payload["modules"]))

    def retire(self, staged: StagedAdapter | None) -> None:
        """Delete a staged adapter's directory (after vLLM dropped it)."""
        if staged is not None:
            shutil.rmtree(staged.path, ignore_errors=True)

    def close(self) -> None:
        """Delete every staged directory."""
        shutil.rmtree(self.root, ignore_errors=True)


def loaded_lora_modules(model_runner: Any, lora_int_id: int) -> int:
    """Worker side: how many LoRA target modules vLLM holds for adapter ``lora_int_id`` (q/k/v packed into
    ``qkv_proj`` count as their parts). Reads vLLM 0.15's LoRA manager; no adapter there is a LoraSyncError."""
    manager = getattr(model_runner, "lora_manager", None)
    if manager is None:
        raise LoraSyncError("native LoRA sync, but this vLLM engine was started without enable_lora")
    lora_model = manager._adapter_manager.get_adapter(lora_int_id)  # vLLM 0.15: LoRAModelManager
    if lora_model is None:
        raise LoraSyncError(f"LoRA adapter id {lora_int_id} is not loaded on this vLLM worker")
    count = 0
    for weights in lora_model.loras.values():
        parts = weights.lora_a if isinstance(weights.lora_a, list) else [weights.lora_a]
        count += sum(p is not None for p in parts)
    return count
