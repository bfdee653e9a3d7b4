"""Hooks of `openrlhf/utils/deepspeed/deepspeed_utils.py` (deepspeed.patch)."""

from __future__ import annotations

from typing import Any


def non_empty_groups(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The optimizer's parameter groups less the empty ones. With LoRA no trainable name is in the no-decay list;
    ZeRO-3 skips the empty group while the LR scheduler counts it, and torch >= 2.10's scheduler then fails at the
    first step ("zip() argument 2 is longer than argument 1")."""
    return [group for group in groups if group["params"]]
