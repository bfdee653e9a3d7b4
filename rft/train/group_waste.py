"""Rollouts that teach nothing: prompt groups whose rewards are all equal, measured per step.

In GRPO a group whose samples all get the same reward has zero advantage everywhere: its rollout tokens cost
full generation time and move nothing. These keys go into the step metrics (via the experience maker's
`reward_stats`) and drive the monitor's "uniform groups" verdict.
"""

from __future__ import annotations

import torch

UNIFORM_TOL = 1e-6
"""Rewards closer than this count as equal (a group's advantage is then zero up to float noise)."""

WASTE_KEYS = (
    "uniform_group_share",
    "uniform_group_tokens",
    "uniform_group_token_share",
    "nonzero_adv_samples",
    "nonzero_adv_share",
    "groups_all_correct",
    "groups_all_wrong",
)
"""Keys group_waste may write: share of uniform-reward groups, response tokens they cost (count, share of the
batch's), samples whose reward differs from their group mean (count, share), and with correctness the shares
of groups all right / all wrong."""


def group_waste(
    rewards: torch.Tensor,
    response_lengths: torch.Tensor | None,
    group_size: int,
    correctness: torch.Tensor | None = None,
) -> dict[str, float]:
    """Waste of one batch in prompt-group order (consecutive `group_size` samples share a prompt); {} without
    groups. A sample carries a non-zero advantage when its reward differs from its group's mean."""
    r = rewards.detach().float().reshape(-1)
    if group_size < 2 or r.numel() == 0 or r.numel() % group_size:
        return {}
    groups = r.reshape(-1, group_size)
    uniform = (groups.max(-1).values - groups.min(-1).values) <= UNIFORM_TOL
    moving = (groups - groups.mean(-1, keepdim=True)).abs() > UNIFORM_TOL
    out = {
        "uniform_group_share": uniform.float().mean().item(),
        "nonzero_adv_samples": float(moving.sum().item()),
        "nonzero_adv_share": moving.float().mean().item(),
    }
    if response_lengths is not None and response_lengths.numel() == r.numel():
        tokens = response_lengths.detach().float().reshape(-1, group_size).sum(-1)
        wasted = tokens[uniform].sum().item()
        out["uniform_group_tokens"] = wasted
        out["uniform_group_token_share"] = wasted / tokens.sum().item() if tokens.sum() > 0 else 0.0
    if correctness is not None and correctness.numel() == r.numel():
        right = correctness.detach().float().reshape(-1, group_size) >= 0.5
        out["groups_all_correct"] = right.all(-1).float().mean().item()
        out["groups_all_wrong"] = (~right).all(-1).float().mean().item()
    return out


def group_waste_of(experiences: list, group_size: int) -> dict[str, float]:
    """group_waste over OpenRLHF Experience micro-batches, put back in prompt-group order by their sample index."""
    if not experiences or any(getattr(e, "index", None) is None for e in experiences):
        return {}
    order = torch.tensor(sum((list(e.index) for e in experiences), []), dtype=torch.long)
    if sorted(order.tolist()) != list(range(len(order))):
        return {}  # no usable sample indices: no groups

    def in_order(values: list) -> torch.Tensor | None:
        if any(v is None for v in values):
            return None
        flat = torch.cat([torch.as_tensor(v).reshape(-1).float() for v in values])
        if flat.numel() != order.numel():
            return None
        out = torch.empty_like(flat)
        out[order] = flat
        return out

    rewards = in_order([e.rewards for e in experiences])
    if rewards is None:
        return {}
    return group_waste(
        rewards,
        in_order([e.info.get("response_length") for e in experiences]),
        group_size,
        in_order([e.info.get("correctness") for e in experiences]),
    )
