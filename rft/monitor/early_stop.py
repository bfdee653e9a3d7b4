"""Noise-aware early stopping on the OOD probe: stop after two consecutive drops, each beyond noise.

On a 202-problem probe one eval's standard error is ~3.4 pp, so "two drops in a row" of any size
fires on pure noise in most runs. A drop counts only if it exceeds `z` standard errors of a
proportion over the probe size (at the mean of the two scores).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_Z = 2.0
DEFAULT_PROBE_SIZE = 202  # data/probe_set_200_ood.jsonl: 170 MATH + 32 Apex


@dataclass(frozen=True)
class StopDecision:
    """Outcome of the rule on an eval history; `fired_at` indexes the eval that completed two drops."""

    stop: bool
    fired_at: int | None
    best_index: int | None
    drops: tuple[tuple[int, float, float], ...]  # (eval index, drop, threshold) of the firing drops


def drop_threshold(prev: float, cur: float, probe_size: int, z: float = DEFAULT_Z) -> float:
    """z standard errors of a proportion at the mean of two scores over `probe_size` problems."""
    p = min(max((prev + cur) / 2, 0.0), 1.0)
    return z * math.sqrt(max(p * (1 - p), 1.0 / probe_size) / probe_size)


def decide(
    scores: Sequence[float], probe_size: int = DEFAULT_PROBE_SIZE, z: float = DEFAULT_Z
) -> StopDecision:
    """Apply the rule to scores in eval order; the first firing wins, best = max score so far."""
    best = max(range(len(scores)), key=lambda i: scores[i]) if scores else None
    previous_drop: tuple[int, float, float] | None = None
    for i in range(1, len(scores)):
        drop = scores[i - 1] - scores[i]
        threshold = drop_threshold(scores[i - 1], scores[i], probe_size, z)
        if drop > threshold:
            if previous_drop is not None:
                best_before = max(range(i + 1), key=lambda j: scores[j])
                return StopDecision(True, i, best_before, (previous_drop, (i, drop, threshold)))
            previous_drop = (i, drop, threshold)
        else:
            previous_drop = None
    return StopDecision(False, None, best, ())


def simulate_stop_rate(
    true_p: Sequence[float],
    *,
    runs: int = 2000,
    probe_size: int = DEFAULT_PROBE_SIZE,
    z: float = DEFAULT_Z,
    seed: int = 0,
) -> tuple[float, list[int | None]]:
    """Fraction of simulated runs (binomial evals at `true_p`) where `decide` stops, and each run's firing index."""
    rng = np.random.default_rng(seed)
    draws = rng.binomial(probe_size, np.asarray(true_p, dtype=float), size=(runs, len(true_p))) / probe_size
    fired = [decide(row.tolist(), probe_size, z).fired_at for row in draws]
    return sum(f is not None for f in fired) / runs, fired


def exact_stop_probability(
    true_p: Sequence[float], probe_size: int = DEFAULT_PROBE_SIZE, z: float = DEFAULT_Z
) -> float:
    """Exact probability that the rule fires on independent binomial evals at `true_p` (dynamic programme)."""
    n = probe_size
    k = np.arange(n + 1)
    scores = k / n
    pmfs = [_binom_pmf(n, p) for p in true_p]
    # state[d, k]: probability of no stop yet, last score k/n, d = 1 if the last eval was a drop.
    state = np.zeros((2, n + 1))
    state[0] = pmfs[0]
    prev, cur = np.meshgrid(scores, scores, indexing="ij")
    mean = np.clip((prev + cur) / 2, 0, 1)
    thresholds = z * np.sqrt(np.maximum(mean * (1 - mean), 1.0 / n) / n)
    is_drop = (prev - cur) > thresholds  # [k_prev, k_cur]
    stopped = 0.0
    for pmf in pmfs[1:]:
        joint0 = state[0][:, None] * pmf[None, :]
        joint1 = state[1][:, None] * pmf[None, :]
        stopped += float((joint1 * is_drop).sum())
        new = np.zeros_like(state)
        new[1] = (joint0 * is_drop).sum(axis=0)
        new[0] = (joint0 * ~is_drop).sum(axis=0) + (joint1 * ~is_drop).sum(axis=0)
        state = new
    return stopped


def _binom_pmf(n: int, p: float) -> np.ndarray:
    """Binomial(n, p) probabilities of 0..n, computed in log space."""
    k = np.arange(n + 1)
    log_comb = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in k])
    if p <= 0:
        return (k == 0).astype(float)
    if p >= 1:
        return (k == n).astype(float)
    return np.exp(log_comb + k * math.log(p) + (n - k) * math.log1p(-p))
