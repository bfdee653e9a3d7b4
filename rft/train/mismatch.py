"""The rollout/trainer gap of one `ppo_train` call over every action token of every rank (ppo_actor.patch).

With d = trainer log-prob - vLLM log-prob of the sampled token and r = exp(d), the per-step keys (in `KNOWN_KEYS`):

- `mismatch_kl`: mean of k3 = r - 1 - d >= 0, an estimate of KL(rollout || trainer) that cannot cancel (0.9.3's
  `vllm_kl` is the mean of -d: gaps of both signs average out);
- `mismatch_out_of_band`: share of tokens with r outside [0.9, 1.1] (TRL's measure);
- `mismatch_is_clipped`: share of tokens whose IS weight the configured truncation changes: outside
  `--vllm_is_truncated_threshold` for tis (clamped) and icepop (zeroed), in a sequence mis drops for mis;
  computed from the configured type whether or not `--enable_vllm_is_correction` is on;
- `mismatch_abs_max`: the largest |d|;
- `mismatch_kl_pos0_512`, `mismatch_kl_pos512_2048`, `mismatch_kl_pos2048_`: the k3 mean over the action tokens
  at those response positions (0-based, counted over the action mask), each only when it holds tokens: numerics
  that drift with length show up in the late bins first (docs/attention.md).

Cross-rank reduction: counts and sums (float64) with sum, the maximum with max; every rank always sends the same keys.
"""

from __future__ import annotations

import math

import torch

BAND = (0.9, 1.1)
POSITION_BINS = ((0, 512), (512, 2048), (2048, None))
"""Response-position bins [start, end) of the binned mismatch KL; None: to the end."""


def bin_key(start: int, end: int | None) -> str:
    """The metric key of one position bin: `mismatch_kl_pos512_2048`, `mismatch_kl_pos2048_`."""
    return f"mismatch_kl_pos{start}_{'' if end is None else end}"


BIN_KEYS = tuple(bin_key(a, b) for a, b in POSITION_BINS)
KEYS = ("mismatch_kl", "mismatch_out_of_band", "mismatch_is_clipped", "mismatch_abs_max")
"""The keys of every step with rollout log-probs (BIN_KEYS: those of the bins that hold tokens)."""
LOG_RATIO_CLAMP = 20.0  # as rft.train.loss_diag: exp() never overflows


def is_clipped(log_ratio: torch.Tensor, action_mask: torch.Tensor, correction_type: str,
               threshold: tuple[float, float]) -> torch.Tensor:
    """Bool tensor like `log_ratio`: the action tokens whose IS weight the truncation of `correction_type` changes."""
    low, high = threshold
    mask = action_mask.to(torch.bool)
    ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    if correction_type == "mis":
        d = log_ratio.masked_fill(~mask, 0.0)
        seq = (d.sum(-1) / mask.sum(-1).clamp(min=1)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        dropped = (seq < low) | (seq > high)
        return dropped.unsqueeze(-1).expand_as(mask) & mask
    if correction_type in ("tis", "icepop"):
        return ((ratio < low) | (ratio > high)) & mask
    raise ValueError(f"unknown vllm_is_correction_type {correction_type!r} (tis, icepop, mis)")


class MismatchStats:
    """Accumulates one rank's trainer/rollout log-prob gap over micro-batches; `reduce` combines the ranks."""

    def __init__(self, correction_type: str = "tis", threshold: tuple[float, float] = (0.5, 5.0)) -> None:
        self.correction_type = correction_type
        self.threshold = (float(threshold[0]), float(threshold[1]))
        self.n = 0.0
        self.k3_sum = 0.0
        self.out_of_band = 0.0
        self.clipped = 0.0
        self.abs_max = -math.inf
        self.bin_n = [0.0] * len(POSITION_BINS)
        self.bin_k3 = [0.0] * len(POSITION_BINS)

    def add(self, trainer_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor | None,
            action_mask: torch.Tensor) -> None:
        """Fold in one micro-batch (no-op without rollout log-probs, i.e. without a vLLM engine)."""
        if rollout_log_probs is None:
            return
        mask = action_mask.detach().to("cpu", torch.bool)
        d = (trainer_log_probs.detach().to("cpu", torch.float64)
             - rollout_log_probs.detach().to("cpu", torch.float64))
        d = d.masked_fill(~mask, 0.0)
        finite = torch.isfinite(d)
        mask = mask & finite
        d = torch.where(finite, d, torch.zeros_like(d))
        if not bool(mask.any()):
            return
        tokens = d[mask]
        ratio = tokens.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        k3 = ratio - 1.0 - tokens
        self.n += tokens.numel()
        self.k3_sum += float(k3.sum())
        position = (action_mask.detach().to("cpu", torch.long).cumsum(-1) - 1)[mask]
        for i, (start, end) in enumerate(POSITION_BINS):
            inside = (position >= start) & (position < end if end is not None else True)
            self.bin_n[i] += float(inside.sum())
            self.bin_k3[i] += float(k3[inside].sum())
        self.out_of_band += float(((ratio < BAND[0]) | (ratio > BAND[1])).sum())
        self.clipped += float(is_clipped(d, mask, self.correction_type, self.threshold).sum())
        self.abs_max = max(self.abs_max, float(tokens.abs().max()))

    def reduce(self, all_reduce) -> dict[str, float]:
        """The call's gap over all ranks; `all_reduce(dict, op)` is OpenRLHF's `strategy.all_reduce` (sum/max).
        Collective: every rank calls it, even with no tokens; empty when no rank had rollout log-probs."""
        sums = all_reduce(
            {k: torch.tensor([v], dtype=torch.float64)
             for k, v in (("n", self.n), ("k3", self.k3_sum), ("oob", self.out_of_band), ("clip", self.clipped))}
            | {"bin_n": torch.tensor(self.bin_n, dtype=torch.float64), "bin_k3": torch.tensor(self.bin_k3, dtype=torch.float64)},
            "sum",
        )
        top = all_reduce({"abs_max": torch.tensor([self.abs_max], dtype=torch.float64)}, "max")
        n = float(sums["n"].sum())
        if n <= 0:
            return {}
        out = {
            "mismatch_kl": float(sums["k3"].sum()) / n,
            "mismatch_out_of_band": float(sums["oob"].sum()) / n,
            "mismatch_is_clipped": float(sums["clip"].sum()) / n,
            "mismatch_abs_max": float(top["abs_max"].max()),
        }
        bins = zip(BIN_KEYS, sums["bin_n"].reshape(-1).tolist(), sums["bin_k3"].reshape(-1).tolist(), strict=True)
        out.update({key: k3 / count for key, count, k3 in bins if count > 0})
        return out
