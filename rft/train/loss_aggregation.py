"""How the token losses of one optimizer step are combined (`--loss_aggregation`, loss.patch and ppo_actor.patch).

DeepSpeed divides each micro-batch's loss by the gradient-accumulation count G and averages the gradients of the W
data-parallel ranks, so the step's gradient is the plain mean of the G x W micro-batch gradients. The modes:

- `microbatch_mean`: OpenRLHF 0.9.3's loss, a token mean per micro-batch; with micro-batches of one sample every
  response weighs the same whatever its length (the response-level length bias Dr. GRPO removes).
- `token_mean`: one mean over every action token of the step on all ranks (upstream OpenRLHF #1249).
- `dr_grpo_constant`: the step's token sum divided by a constant, `--generate_max_len` x the step's samples
  (Dr. GRPO's normaliser); the default with `--advantage_estimator dr_grpo`.

The two window modes give each micro-batch the loss `sum(token losses) * G * W / D`, with D the window's token count
(or generation budget) summed over ranks: after DeepSpeed's 1/G and 1/W the step's gradient is that of
`sum over the window / D`, whatever the split into micro-batches and ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

# The option itself (modes, default, validation, the dry run's wording) is decided where the launch checks it too.
from rft.launch.train_options import (  # noqa: E402,F401  (the names the patches import from here)
    MODES,
    aggregation_in_force,
    default_aggregation,
    describe,
    validate,
    window_capable,
)


def window_loss_scales(
    action_masks: Sequence[torch.Tensor],
    accumulation: int,
    data_parallel: int,
    mode: str,
    generate_max_len: int,
    all_reduce_sum: Callable[[torch.Tensor], torch.Tensor],
) -> list[float | None]:
    """Per micro-batch of one rank's epoch, the factor its token-loss sum is multiplied by (None: 0.9.3's mean).

    Micro-batches are grouped in consecutive windows of `accumulation` (the optimizer steps); `all_reduce_sum`
    sums a float64 tensor over the ranks (collective: every rank calls it once, with as many windows)."""
    if mode == "microbatch_mean":
        return [None] * len(action_masks)
    if accumulation < 1 or data_parallel < 1:
        raise ValueError(f"accumulation {accumulation} and data_parallel {data_parallel} must be >= 1")
    n_windows = -(-len(action_masks) // accumulation)
    local = torch.zeros(n_windows, dtype=torch.float64)
    for i, mask in enumerate(action_masks):
        if mode == "token_mean":
            local[i // accumulation] += float(mask.sum())
        else:
            local[i // accumulation] += float(mask.shape[0]) * generate_max_len
    totals = all_reduce_sum(local)
    scales: list[float | None] = []
    for i in range(len(action_masks)):
        denominator = float(totals[i // accumulation])
        scales.append(accumulation * data_parallel / denominator if denominator > 0 else 0.0)
    return scales


def aggregate(token_loss: torch.Tensor, action_mask: torch.Tensor, scale: float) -> torch.Tensor:
    """A micro-batch's share of the window loss: the masked token sum times `scale` (from window_loss_scales)."""
    return (token_loss * action_mask).sum() * scale
