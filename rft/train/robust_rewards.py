"""Reward and `extra_logs` sanitising for the patched OpenRLHF experience maker, plus batch reward statistics.

A reward function may return a string, None, a list or a NaN; upstream 0.9.3 then crashes (or drops the
sample, or crashes later when a key exists for some samples only). Here every such value becomes a numeric
default that is counted (`reward_defaulted`, `extra_logs_defaulted` per sample), and every sample of a
batch carries the same info keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

DEFAULT_VALUE = 0.0
CORRECTNESS_KEY = "correctness"
"""extra_logs key (0/1) the rft reward function always returns; drives `reward_high_but_wrong`."""
HIGH_REWARD = 0.5
"""A reward at or above this with correctness 0 counts as high-reward-but-wrong."""
COUNTER_KEYS = ("reward_defaulted", "extra_logs_defaulted")


def to_number(value: Any) -> float | None:
    """The value as a finite float, or None if it is not a single finite number (bools count as 0/1)."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 0:
            return None
        value = value.flatten()[0].item()
    elif isinstance(value, (list, tuple)):
        if len(value) != 1:
            return None
        return to_number(value[0])
    elif isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def sanitize_reward(value: Any, default: float = DEFAULT_VALUE) -> tuple[float, bool]:
    """(reward as float, True) when numeric, else (default, False)."""
    number = to_number(value)
    return (default, False) if number is None else (number, True)


def sanitize_extra_logs(extra_logs: Any, default: float = DEFAULT_VALUE) -> tuple[dict[str, float], int]:
    """Every value of extra_logs as a float (non-numeric ones replaced by default) and the replacement count."""
    if extra_logs is None:
        return {}, 0
    if not isinstance(extra_logs, Mapping):
        return {}, 1
    clean: dict[str, float] = {}
    replaced = 0
    for key, value in extra_logs.items():
        number = to_number(value)
        if number is None:
            number, replaced = default, replaced + 1
        clean[str(key)] = number
    return clean, replaced


def unify_info_keys(infos: Iterable[dict], default: float = DEFAULT_VALUE) -> int:
    """Give every info dict the union of all keys (missing ones get [default]); returns how many were added.

    Added entries are counted in each dict's `extra_logs_defaulted` (created if absent).
    """
    infos = list(infos)
    all_keys: dict[str, None] = {}
    for info in infos:
        all_keys.update(dict.fromkeys(info))
    added_total = 0
    for info in infos:
        missing = [k for k in all_keys if k not in info]
        for key in missing:
            info[key] = torch.tensor([default], dtype=torch.float32)
        added = len([k for k in missing if k not in COUNTER_KEYS])
        if added:
            prev = to_number(info.get("extra_logs_defaulted", 0.0)) or 0.0
            info["extra_logs_defaulted"] = torch.tensor([prev + added], dtype=torch.float32)
        added_total += added
    return added_total


def batch_reward_stats(rewards: torch.Tensor, correctness: torch.Tensor | None = None) -> dict[str, float]:
    """reward_mean/std/min/max/p90 over the whole batch (+ reward_high_but_wrong if correctness is given)."""
    r = rewards.detach().float().reshape(-1)
    if r.numel() == 0:
        return {}
    stats = {
        "reward_mean": r.mean().item(),
        "reward_std": r.std(unbiased=False).item(),
        "reward_min": r.min().item(),
        "reward_max": r.max().item(),
        "reward_p90": torch.quantile(r, 0.9).item(),
    }
    if correctness is not None:
        c = correctness.detach().float().reshape(-1)
        if c.numel() == r.numel():
            stats["reward_high_but_wrong"] = ((r >= HIGH_REWARD) & (c < 0.5)).float().mean().item()
    return stats
