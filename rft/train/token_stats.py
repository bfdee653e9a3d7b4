"""Advantage and token-entropy statistics of one `ppo_train` call, over every action token of every rank.

Used by the patched `openrlhf.trainer.ray.ppo_actor` (ppo_actor.patch). Keys, in `KNOWN_KEYS`:
`advantage_mean`, `advantage_std` (population std), `advantage_max`, `advantage_min` over the action tokens
the loss sees; `entropy_mean`, `entropy_p10`, `entropy_p90` of the per-token entropy of the policy (nats; logged
when OpenRLHF computes entropy, i.e. with `--entropy_loss_coef`, 0 = log only).

Cross-rank reduction: counts, sums and sums of squares (float64) with sum, maxima with max (minima as
max of the negation), and the entropy percentiles from a fixed histogram summed over ranks (bin width
ENTROPY_MAX / ENTROPY_BINS = 0.01 nats, linear inside the bin), so no rank ever ships its tokens.
"""

from __future__ import annotations

import math

import torch

ENTROPY_MAX = 16.0  # nats; log(vocab) of any tokenizer below 8.8M entries is under it
ENTROPY_BINS = 1600
KEYS = (
    "advantage_mean",
    "advantage_std",
    "advantage_max",
    "advantage_min",
    "entropy_mean",
    "entropy_p10",
    "entropy_p90",
)


def _masked(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The finite values where `mask` is true, flattened, as float64 on the CPU."""
    v = values.detach()
    if mask is not None:
        v = v[mask.to(torch.bool).expand_as(v)]
    v = v.reshape(-1).to(device="cpu", dtype=torch.float64)
    return v[torch.isfinite(v)]


def histogram_quantile(hist: torch.Tensor, q: float, upper: float = ENTROPY_MAX) -> float:
    """The q-quantile of values binned in `hist` (equal bins over [0, upper)), linear within the bin."""
    total = float(hist.sum())
    if total <= 0:
        return math.nan
    cum = torch.cumsum(hist.to(torch.float64), 0)
    target = q * total
    i = int(torch.searchsorted(cum, torch.tensor([target], dtype=torch.float64)).item())
    i = min(i, len(hist) - 1)
    before = float(cum[i - 1]) if i else 0.0
    inside = float(hist[i])
    frac = (target - before) / inside if inside else 0.0
    width = upper / len(hist)
    return (i + min(max(frac, 0.0), 1.0)) * width


class TokenStats:
    """Accumulates one rank's advantage and entropy tokens over micro-batches; `reduce` combines the ranks."""

    def __init__(self) -> None:
        self.adv_n = 0.0
        self.adv_sum = 0.0
        self.adv_sumsq = 0.0
        self.adv_max = -math.inf
        self.adv_min = math.inf
        self.ent_n = 0.0
        self.ent_sum = 0.0
        self.ent_hist = torch.zeros(ENTROPY_BINS, dtype=torch.float64)

    def add(
        self,
        advantages: torch.Tensor | None,
        action_mask: torch.Tensor | None,
        entropy: torch.Tensor | None = None,
    ) -> None:
        """Fold in one micro-batch: advantages and per-token entropy, both shaped like `action_mask`."""
        if advantages is not None:
            a = _masked(advantages, action_mask)
            if a.numel():
                self.adv_n += a.numel()
                self.adv_sum += float(a.sum())
                self.adv_sumsq += float((a * a).sum())
                self.adv_max = max(self.adv_max, float(a.max()))
                self.adv_min = min(self.adv_min, float(a.min()))
        if entropy is not None:
            e = _masked(entropy, action_mask)
            if e.numel():
                self.ent_n += e.numel()
                self.ent_sum += float(e.sum())
                idx = (e.clamp(min=0.0) / ENTROPY_MAX * ENTROPY_BINS).long().clamp(max=ENTROPY_BINS - 1)
                self.ent_hist += torch.bincount(idx, minlength=ENTROPY_BINS).to(torch.float64)

    def reduce(self, all_reduce) -> dict[str, float]:
        """The step's statistics over all ranks; `all_reduce(dict, op)` is OpenRLHF's `strategy.all_reduce`
        (op sum/max). Collective: every rank calls it and sends the same keys, even with no tokens."""
        sums = all_reduce(
            {
                "adv_n": torch.tensor([self.adv_n], dtype=torch.float64),
                "adv_sum": torch.tensor([self.adv_sum], dtype=torch.float64),
                "adv_sumsq": torch.tensor([self.adv_sumsq], dtype=torch.float64),
                "ent_n": torch.tensor([self.ent_n], dtype=torch.float64),
                "ent_sum": torch.tensor([self.ent_sum], dtype=torch.float64),
                "ent_hist": self.ent_hist.clone(),
            },
            "sum",
        )
        maxima = all_reduce(
            {
                "adv_max": torch.tensor([self.adv_max], dtype=torch.float64),
                "neg_adv_min": torch.tensor([-self.adv_min], dtype=torch.float64),
            },
            "max",
        )
        out: dict[str, float] = {}
        n = float(sums["adv_n"].sum())
        if n > 0:
            mean = float(sums["adv_sum"].sum()) / n
            var = max(float(sums["adv_sumsq"].sum()) / n - mean * mean, 0.0)
            out.update(
                advantage_mean=mean,
                advantage_std=math.sqrt(var),
                advantage_max=float(maxima["adv_max"].max()),
                advantage_min=-float(maxima["neg_adv_min"].max()),
            )
        ent_n = float(sums["ent_n"].sum())
        if ent_n > 0:
            hist = sums["ent_hist"].reshape(-1).to("cpu", torch.float64)
            out.update(
                entropy_mean=float(sums["ent_sum"].sum()) / ent_n,
                entropy_p10=histogram_quantile(hist, 0.1),
                entropy_p90=histogram_quantile(hist, 0.9),
            )
        return out
