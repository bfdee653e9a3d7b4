"""One reading of "a number" for every value a reward function or a trainer status hands us."""

from __future__ import annotations

import math
from typing import Any

import torch


def scalar(value: Any) -> float | int | None:
    """The single number in `value` (a one-element tensor or list, bool, int, float, numpy scalar or numeric
    string); bools and ints stay ints, NaN and inf are returned as they are; None when it is not one number."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            return None
        value = value.item()
    elif isinstance(value, (list, tuple)):
        return scalar(value[0]) if len(value) == 1 else None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return None


def finite(value: Any) -> float | None:
    """`scalar(value)` as a float when it is finite, else None."""
    number = scalar(value)
    return float(number) if number is not None and math.isfinite(number) else None
