"""Estimators for sampled evaluation: unbiased pass@k, mean@k, maj@k, answer agreement, bootstrap CIs.

pass@k is Chen et al. (2021): per problem with n samples of which c are correct,
1 - C(n-c, k) / C(n, k), averaged over problems. mean@n = c/n is the unbiased pass@1.
maj@k votes over extracted answers (samples without an answer abstain; ties go to the answer seen
first) and scores the winner by the correctness of its first sample. Every figure gets a percentile
bootstrap interval over problems: problems, not samples, are the unit that varies between evals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem (n samples, c correct); numerically stable product form."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_at_n(correct: Sequence[bool]) -> float:
    """Fraction of a problem's samples that are correct (the unbiased pass@1 estimate)."""
    if not correct:
        raise ValueError("mean_at_n needs at least one sample")
    return sum(bool(x) for x in correct) / len(correct)


def majority_answer(answers: Sequence[str | None]) -> str | None:
    """Most frequent non-None answer; ties go to the one that appears first; None if all abstain."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def maj_correct(answers: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """Whether the majority answer is correct (judged by the first sample carrying it)."""
    if len(answers) != len(correct):
        raise ValueError("maj_correct needs one correctness flag per answer")
    winner = majority_answer(answers)
    if winner is None:
        return False
    return bool(correct[list(answers).index(winner)])


def answers_agree(answers: Sequence[str | None]) -> bool:
    """True when every sample gave the same extracted answer (None counts as an answer here)."""
    return len(set(answers)) <= 1


def distinct_answers(answers: Sequence[str | None]) -> int:
    """Number of different extracted answers among the samples (None counts as one)."""
    return len(set(answers))


def bootstrap_ci(
    values: Sequence[float], *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-problem `values`, resampling problems."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    means = arr[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1.0 - alpha)))


def ratio_ci(
    numer: Sequence[float], denom: Sequence[float], *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """mean(numer) / mean(denom) and its percentile bootstrap interval, each side resampled on its own (two
    independent samples, e.g. one run per seed in each arm of an A/B)."""
    a, b = np.asarray(numer, dtype=float), np.asarray(denom, dtype=float)
    if a.size == 0 or b.size == 0:
        return (float("nan"), float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    ratios = a[rng.integers(0, a.size, size=(n_boot, a.size))].mean(axis=1) / b[
        rng.integers(0, b.size, size=(n_boot, b.size))].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    return (float(a.mean() / b.mean()), float(np.quantile(ratios, alpha)), float(np.quantile(ratios, 1.0 - alpha)))


def paired_bootstrap_ci(
    values: Sequence[float],
    baseline: Sequence[float],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Bootstrap interval of mean(values - baseline) over the same problems (a paired difference)."""
    if len(values) != len(baseline):
        raise ValueError("paired bootstrap needs the same problems on both sides")
    diff = np.asarray(values, dtype=float) - np.asarray(baseline, dtype=float)
    return bootstrap_ci(diff, n_boot=n_boot, seed=seed, level=level)
