"""A run's HF checkpoints on disk: the complete `global_stepN_hf` directories (what the monitor's STOP waits for and
`spare.py watch` evaluates), and the guarded clean-up of stray full-weight shards next to a LoRA adapter."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

FULL_WEIGHT_FILE = re.compile(r"^(pytorch_model|model)(-\d{5}-of-\d{5})?\.(bin|safetensors)(\.index\.json)?$")
"""Hugging Face full-model weight files (single or sharded) and their index; never matches adapter_*."""
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def has_adapter(directory: str | Path) -> bool:
    """True if the directory holds a non-empty adapter_model.* and an adapter_config.json."""
    d = Path(directory)
    weights = any((d / name).is_file() and (d / name).stat().st_size > 0 for name in ADAPTER_FILES)
    return weights and (d / "adapter_config.json").is_file()


def remove_full_weight_shards(directory: str | Path, lora_rank: int) -> list[str]:
    """Delete HF full-weight shards from a LoRA save dir (top level only); returns the names removed.

    A safety net only: it does nothing unless `lora_rank > 0` and a complete adapter is present there, and it
    can only ever match `model*.safetensors` / `pytorch_model*.bin` (+ index), never an adapter file.
    """
    d = Path(directory)
    if lora_rank <= 0 or not d.is_dir() or not has_adapter(d):
        return []
    removed = []
    for path in sorted(d.iterdir()):
        if path.is_file() and not path.is_symlink() and FULL_WEIGHT_FILE.match(path.name):
            if path.name.startswith("adapter"):  # unreachable by the pattern; kept as a hard guard
                continue
            path.unlink()
            removed.append(path.name)
    return removed


def adapter_param_names(model) -> list[str]:
    """Names of a PEFT model's LoRA parameters (`lora_` in the name): what a LoRA save keeps of the model."""
    return [n for n, _ in model.named_parameters() if "lora_" in n]


def gather_adapter_state(model, rank0: bool) -> dict:
    """{name: full tensor on CPU} of the LoRA parameters of a ZeRO-3 partitioned PEFT model, on rank 0 only.

    All ranks must call it (the gather is a collective). Only the adapter's parameters are gathered, so rank 0's
    host RAM holds the adapter, not the frozen base that `_consolidated_16bit_state_dict` would copy.
    """
    import deepspeed

    names = set(adapter_param_names(model))
    named = [(n, p) for n, p in model.named_parameters() if n in names]
    with deepspeed.zero.GatheredParameters([p for _, p in named], modifier_rank=None):
        return {n: p.detach().cpu().clone() for n, p in named} if rank0 else {}


CKPT_RE = re.compile(r"^global_step(\d+)_hf$")
WEIGHT_FILES = (*ADAPTER_FILES, "model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class Checkpoint:
    """One HF checkpoint (a LoRA adapter or a full model) of the run."""

    step: int
    path: Path

    @property
    def name(self) -> str:
        """The directory name, `global_stepN_hf`."""
        return self.path.name

    @property
    def label(self) -> str:
        """Its short name, `stepN` (the model name its evaluation reports)."""
        return f"step{self.step}"


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Where a run keeps its checkpoints: RUN_DIR itself (a CKPT_PATH) and RUN_DIR/ckpt (the small/CPU layout)."""
    return [d for d in (run_dir, run_dir / "ckpt") if d.is_dir()]


def is_complete(path: Path) -> bool:
    """A checkpoint directory holding a config and weights (adapter or full model)."""
    has_config = (path / "adapter_config.json").is_file() or (path / "config.json").is_file()
    has_weights = any((path / f).is_file() for f in WEIGHT_FILES) or any(path.glob("model-*.safetensors"))
    return has_config and has_weights


def newest_mtime(path: Path) -> float:
    """The newest modification time of the directory's files."""
    return max((f.stat().st_mtime for f in path.rglob("*") if f.is_file()), default=path.stat().st_mtime)


def find_checkpoints(run_dir: Path, settle_s: float = 0.0, now: float | None = None) -> list[Checkpoint]:
    """Complete checkpoints whose files have not changed for `settle_s` seconds, by step."""
    now = time.time() if now is None else now
    found: dict[int, Checkpoint] = {}
    for d in checkpoint_dirs(run_dir):
        for p in d.iterdir():
            m = CKPT_RE.match(p.name)
            if m and p.is_dir() and is_complete(p) and now - newest_mtime(p) >= settle_s:
                found.setdefault(int(m.group(1)), Checkpoint(int(m.group(1)), p.resolve()))
    return [found[s] for s in sorted(found)]
