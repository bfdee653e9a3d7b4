"""Policy log-ratio clamp and masked ratio diagnostics, used by the patched `openrlhf.models.loss.PolicyLoss`.

Diagnostic keys (floats; also listed in `rft.train.metrics.KNOWN_KEYS`):
`logratio_raw_max` (max before the clamp), `logratio_max`, `logratio_min` (after the clamp), `ratio_max`
(exp of the clamped max), `logratio_abs_p99` (nearest-rank 99th percentile of |raw log-ratio|), `logratio_tokens`
(number of action tokens) and `logratio_clamped_frac` (share of action tokens the clamp changed).
Every statistic is taken over the positions where `action_mask` is true only.
"""

from __future__ import annotations

import math

import torch

LOGRATIO_CLAMP = 20.0
"""|log pi_new/pi_old| above this is clamped before exp(): exp(20) ~ 4.9e8 still fits fp32/bf16."""

DIAG_KEYS = (
    "logratio_raw_max",
    "logratio_max",
    "logratio_min",
    "ratio_max",
    "logratio_abs_p99",
    "logratio_tokens",
    "logratio_clamped_frac",
)
MAX_REDUCED_KEYS = ("logratio_raw_max", "logratio_max", "ratio_max", "logratio_abs_p99")
"""Diagnostics whose cross-rank / cross-micro-batch reduction is a max, not a mean."""


def clamp_log_ratio(log_ratio: torch.Tensor, bound: float = LOGRATIO_CLAMP) -> torch.Tensor:
    """Clamp a log-ratio to [-bound, bound] (gradient flows inside the bounds, none outside)."""
    return log_ratio.clamp(min=-bound, max=bound)


def ratio_diagnostics(
    raw_log_ratio: torch.Tensor, action_mask: torch.Tensor | None, bound: float = LOGRATIO_CLAMP
) -> dict[str, float]:
    """Masked statistics of the policy log-ratio before and after the clamp, as plain floats."""
    raw = raw_log_ratio.detach().float()
    if action_mask is None:
        values = raw.reshape(-1)
    else:
        values = raw[action_mask.to(torch.bool).expand_as(raw)]
    values = values[~torch.isnan(values)]
    n = int(values.numel())
    if n == 0:
        return {k: 0.0 for k in DIAG_KEYS}
    clamped = values.clamp(min=-bound, max=bound)
    # nearest-rank 99th percentile (torch.quantile refuses inputs above 2**24 elements)
    p99 = values.abs().kthvalue(max(1, math.ceil(0.99 * n))).values.item()
    return {
        "logratio_raw_max": float(values.max().item()),
        "logratio_max": float(clamped.max().item()),
        "logratio_min": float(clamped.min().item()),
        "ratio_max": float(math.exp(clamped.max().item())),
        "logratio_abs_p99": float(p99),
        "logratio_tokens": float(n),
        "logratio_clamped_frac": float((values.abs() > bound).float().mean().item()),
    }


class StepDiagnostics:
    """Ratio statistics of every micro-batch and grad norms of every optimizer step in one `ppo_train` call.

    `reduce` combines them across ranks the right way: maxima with max, minima with min, token counts with
    sum, the clamped share weighted by tokens; `grad_norm` is the largest norm of the call (DeepSpeed's
    global norm, already identical on every rank) and `grad_norm_steps` the number of optimizer steps.
    """

    def __init__(self) -> None:
        self.maxima: dict[str, float] = {}
        self.minimum: float | None = None
        self.tokens = 0.0
        self.clamped_tokens = 0.0
        self.grad_norms: list[float] = []

    def add_ratio_stats(self, stats: dict[str, float]) -> None:
        """Fold in one micro-batch's `ratio_diagnostics` (an empty dict is ignored)."""
        if not stats or not stats.get("logratio_tokens"):
            return
        for key in MAX_REDUCED_KEYS:
            self.maxima[key] = max(self.maxima.get(key, -math.inf), stats[key])
        self.minimum = (
            stats["logratio_min"] if self.minimum is None else min(self.minimum, stats["logratio_min"])
        )
        self.tokens += stats["logratio_tokens"]
        self.clamped_tokens += stats["logratio_clamped_frac"] * stats["logratio_tokens"]

    def add_grad_norm(self, value) -> None:
        """Record the grad norm of an optimizer step (None, i.e. before the first step, is ignored)."""
        if value is not None:
            self.grad_norms.append(float(value))

    def local(self) -> dict[str, float]:
        """This rank's values, keyed like the logged metrics (before any cross-rank reduction)."""
        out = dict(self.maxima)
        if self.minimum is not None:
            out["logratio_min"] = self.minimum
            out["logratio_tokens"] = self.tokens
            out["logratio_clamped_frac"] = self.clamped_tokens / self.tokens if self.tokens else 0.0
        if self.grad_norms:
            out["grad_norm"] = max(self.grad_norms)
            out["grad_norm_steps"] = float(len(self.grad_norms))
        return out

    def reduce(self, all_reduce) -> dict[str, float]:
        """Cross-rank values; `all_reduce(dict, op)` is OpenRLHF's `strategy.all_reduce` (op: mean/max/sum).

        Every rank must call this (it is collective). Every rank sends the same keys, -inf where it has no
        value (e.g. no action tokens): a key sent by some ranks only would pair different collectives and hang.
        """
        loc = self.local()
        out: dict[str, float] = {}
        max_part = {k: loc.get(k, -math.inf) for k in (*MAX_REDUCED_KEYS, "grad_norm")}
        max_part["neg_logratio_min"] = -loc["logratio_min"] if "logratio_min" in loc else -math.inf
        reduced = {k: float(v) for k, v in all_reduce(max_part, "max").items()}
        neg_min = reduced.pop("neg_logratio_min")
        if neg_min != -math.inf:
            out["logratio_min"] = -neg_min
        out.update({k: v for k, v in reduced.items() if v != -math.inf})
        sums = all_reduce({"tokens": self.tokens, "clamped": self.clamped_tokens}, "sum")
        if float(sums["tokens"]):
            out["logratio_tokens"] = float(sums["tokens"])
            out["logratio_clamped_frac"] = float(sums["clamped"]) / float(sums["tokens"])
        if "grad_norm_steps" in loc:
            out["grad_norm_steps"] = loc["grad_norm_steps"]
        return out
