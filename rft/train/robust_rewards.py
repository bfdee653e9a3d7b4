"""Reward and `extra_logs` sanitising for the patched OpenRLHF experience maker, plus batch reward statistics.

A reward function may return a string, None, a list or a NaN; upstream 0.9.3 then crashes (or drops the
sample, or crashes later when a key exists for some samples only). Here every such value becomes a numeric
default that is counted (`reward_defaulted`, `extra_logs_defaulted` per sample), and every sample of a
batch carries the same info keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from rft.train.numbers import finite

DEFAULT_VALUE = 0.0
CORRECTNESS_KEY = "correctness"
"""extra_logs key (0/1) the rft reward function always returns; drives `reward_high_but_wrong`."""
HIGH_REWARD = 0.5
"""Without prompt groups, a reward at or above this with correctness 0 counts as high-reward-but-wrong."""
COUNTER_KEYS = ("reward_defaulted", "extra_logs_defaulted")
JUDGE_ASKED_KEY = "judge_asked"
JUDGE_SUM_KEYS = (JUDGE_ASKED_KEY, "judge_ok", "judge_cost_usd")
BATCH_KEYS = (
    "reward_mean",
    "reward_std",
    "reward_min",
    "reward_max",
    "reward_p90",
    "reward_high_but_wrong",
    "reward_mean_wrong",
    "judge_cost_step_usd",
    "judge_asked_step",
    "judge_fail_rate",
)
"""Keys batch_reward_stats_of may write into the step's metrics."""


def sanitize_reward(value: Any, default: float = DEFAULT_VALUE) -> tuple[float, bool]:
    """(reward as float, True) when numeric, else (default, False)."""
    number = finite(value)
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
        number = finite(value)
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
            prev = finite(info.get("extra_logs_defaulted", 0.0)) or 0.0
            info["extra_logs_defaulted"] = torch.tensor([prev + added], dtype=torch.float32)
        added_total += added
    return added_total


def batch_reward_stats(
    rewards: torch.Tensor, correctness: torch.Tensor | None = None, group_size: int = 1
) -> dict[str, float]:
    """reward_mean/std/min/max/p90 over the whole batch; with correctness also reward_high_but_wrong and
    reward_mean_wrong. Rewards must be in prompt-group order when group_size > 1."""
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
            wrong = c < 0.5
            stats["reward_high_but_wrong"] = (high_rewards(r, group_size) & wrong).float().mean().item()
            if wrong.any():
                stats["reward_mean_wrong"] = r[wrong].mean().item()
    return stats


def high_rewards(r: torch.Tensor, group_size: int) -> torch.Tensor:
    """Samples the reward pays well: above their prompt group's mean (a positive GRPO advantage, so the update
    reinforces them), or >= HIGH_REWARD without groups."""
    if group_size > 1 and r.numel() % group_size == 0:
        groups = r.reshape(-1, group_size)
        return (groups > groups.mean(-1, keepdim=True) + 1e-6).reshape(-1)
    return r >= HIGH_REWARD


def judge_stats(infos: list[dict]) -> dict[str, float]:
    """The step's judge cost (USD, summed over the batch) and failure rate (failed / asked); {} without a judge."""
    if not infos or any(JUDGE_ASKED_KEY not in i for i in infos):
        return {}
    total = {k: sum(float(torch.as_tensor(i[k]).float().sum()) for i in infos) for k in JUDGE_SUM_KEYS}
    asked = total[JUDGE_ASKED_KEY]
    return {
        "judge_cost_step_usd": total["judge_cost_usd"],
        "judge_asked_step": asked,
        "judge_fail_rate": (asked - total["judge_ok"]) / asked if asked else 0.0,
    }


def batch_reward_stats_of(experiences: list, group_size: int) -> dict[str, float]:
    """batch_reward_stats + judge_stats over OpenRLHF Experience micro-batches, put back in prompt-group order."""
    order = torch.tensor(sum((list(e.index) for e in experiences), []))
    if sorted(order.tolist()) != list(range(len(order))):
        order, group_size = torch.arange(len(order)), 1  # no usable sample indices: no groups

    def in_order(values: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([v.reshape(-1).float() for v in values])
        out = torch.empty_like(flat)
        out[order] = flat
        return out

    correctness = [e.info.get(CORRECTNESS_KEY) for e in experiences]
    stats = batch_reward_stats(
        in_order([e.rewards for e in experiences]),
        in_order(correctness) if all(c is not None for c in correctness) else None,
        group_size,
    )
    return {**stats, **judge_stats([e.info for e in experiences])}


def repair_rollout_log_probs(
    rollout: torch.Tensor, trainer: torch.Tensor, action_mask: torch.Tensor | None
) -> torch.Tensor:
    """Replace non-finite vLLM log-probs (in place) by the trainer's; per sample, how many action tokens were.

    One NaN or -inf there makes the vLLM IS weight and `vllm_kl` NaN (NaN * 0 is NaN, so padding too), and after
    one optimizer step every weight. A repaired token gets IS weight 1 and no share of `vllm_kl`.
    """
    bad = ~torch.isfinite(rollout)
    if bad.any():
        rollout[bad] = trainer.to(rollout.dtype)[bad]
    counted = bad & action_mask.bool() if action_mask is not None else bad
    return counted.sum(dim=-1).float()
