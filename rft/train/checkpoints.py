"""Checkpoint hygiene for LoRA runs: the guarded clean-up of stray full-weight shards next to an adapter."""

from __future__ import annotations

import re
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
