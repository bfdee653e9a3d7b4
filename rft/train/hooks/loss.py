"""Hooks of `openrlhf/models/loss.py` (loss.patch): `PolicyLoss` with clamped exponents, its log-ratio diagnostics
(rft.train.loss_diag) and `--loss_aggregation` (rft.train.loss_aggregation)."""

from __future__ import annotations

from typing import Any

import torch

from rft.train.loss_aggregation import aggregate
from rft.train.loss_diag import clamp_log_ratio, ratio_diagnostics

__all__ = ["clamp_log_ratio", "ratio_diagnostics", "token_loss"]


def token_loss(loss_fn: Any, loss: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """The token-level loss of one micro-batch: its masked sum times the factor the actor trainer set for it
    (`token_sum_scale`, --loss_aggregation token_mean / dr_grpo_constant), else 0.9.3's masked mean."""
    from openrlhf.models.utils import masked_mean

    scale = getattr(loss_fn, "token_sum_scale", None)
    return masked_mean(loss, action_mask, dim=None) if scale is None else aggregate(loss, action_mask, scale)
