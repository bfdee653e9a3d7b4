"""rft.eval.passk: Chen's pass@k against the closed form, majority vote rules, agreement, bootstrap CIs."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from rft.eval.passk import (
    answers_agree,
    bootstrap_ci,
    distinct_answers,
    maj_correct,
    majority_answer,
    mean_at_n,
    paired_bootstrap_ci,
    pass_at_k,
    ratio_ci,
)


def closed_form(n: int, c: int, k: int) -> float:
    return 1.0 - comb(n - c, k) / comb(n, k)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (8, 0, 1, 0.0),
        (8, 8, 8, 1.0),
        (8, 1, 1, 1 / 8),
        (8, 1, 8, 1.0),  # k = n: "any sample correct"
        (8, 2, 4, 1 - 15 / 70),  # 1 - C(6,4)/C(8,4)
        (16, 3, 8, 1 - 1287 / 12870),  # 1 - C(13,8)/C(16,8)
        (5, 4, 2, 1.0),  # n - c < k: every k-subset holds a correct sample
    ],
)
def test_pass_at_k_hand_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_closed_form_everywhere():
    for n in range(1, 21):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(closed_form(n, c, k), abs=1e-9), (n, c, k)


def test_pass_at_1_is_mean_and_pass_at_k_grows_with_k():
    assert pass_at_k(8, 3, 1) == pytest.approx(mean_at_n([1, 1, 1, 0, 0, 0, 0, 0]))
    values = [pass_at_k(8, 2, k) for k in range(1, 9)]
    assert values == sorted(values) and values[0] < values[-1] == 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(8, 9, 1), (8, -1, 1), (8, 2, 9), (8, 2, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_majority_vote_abstains_and_breaks_ties_by_first_seen():
    assert majority_answer(["3", None, "5", "5", "3", None, None]) == "3"  # 3 and 5 tie; 3 came first
    assert majority_answer([None, "7", None, None]) == "7"  # no-answer never wins
    assert majority_answer([None, None]) is None
    assert majority_answer(["2", "9", "9"]) == "9"


def test_maj_correct_scores_the_winning_answer():
    answers = ["12", "12", "7", None, "12"]
    assert maj_correct(answers, [True, True, False, False, True])
    assert not maj_correct(answers, [False, False, True, False, False])  # the right answer lost the vote
    assert not maj_correct([None, None], [False, False])
    with pytest.raises(ValueError, match="^maj_correct needs one correctness flag per answer$"):
        maj_correct(["1"], [True, False])


def test_agreement_and_distinct_answers():
    assert answers_agree(["4"] * 8) and distinct_answers(["4"] * 8) == 1
    assert not answers_agree(["4"] * 7 + [None])
    assert distinct_answers(["4", "5", None, "5"]) == 3


def test_bootstrap_ci_properties():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2, size=18).astype(float)
    lo, hi = bootstrap_ci(values, seed=1)
    assert lo <= values.mean() <= hi and hi - lo > 0.2  # 18 problems: wide
    assert bootstrap_ci(values, seed=1) == (lo, hi)  # seeded: reproducible
    big = rng.integers(0, 2, size=400).astype(float)
    blo, bhi = bootstrap_ci(big, seed=1)
    assert bhi - blo < (hi - lo) / 2  # more problems, narrower interval
    assert bootstrap_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert all(np.isnan(bootstrap_ci([])))


def test_ratio_ci_of_two_independent_samples():
    assert ratio_ci([3.0, 3.0], [2.0, 2.0, 2.0]) == (1.5, 1.5, 1.5)  # no spread: the ratio itself
    assert all(np.isnan(ratio_ci([], [1.0])))
    a, b = [1800.0, 2400.0, 2100.0, 3900.0, 2000.0], [1600.0, 2100.0, 2000.0, 2300.0, 1700.0]
    r, lo, hi = ratio_ci(a, b, seed=3)
    assert r == pytest.approx(np.mean(a) / np.mean(b)) and lo < r < hi
    assert ratio_ci(a, b, seed=3) == (r, lo, hi)  # seeded: reproducible


def test_ratio_ci_covers_the_true_ratio_about_95_percent_of_the_time():
    """5 draws per arm from arms whose means are 1.5:1 (sd 20%): the interval holds 1.5 in most trials (a
    percentile bootstrap on 5 values undercovers somewhat: 0.88 measured here)."""
    rng = np.random.default_rng(0)
    hits = 0
    for trial in range(300):
        a, b = rng.normal(3000, 600, 5), rng.normal(2000, 400, 5)
        _, lo, hi = ratio_ci(a, b, n_boot=1000, seed=trial)
        hits += lo <= 1.5 <= hi
    assert 0.85 <= hits / 300 <= 0.99, hits / 300


def test_paired_bootstrap_ci():
    a = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert paired_bootstrap_ci(a, a) == (0.0, 0.0)
    lo, hi = paired_bootstrap_ci([1.0] * 6, [0.0] * 6)
    assert lo == hi == 1.0
    with pytest.raises(ValueError, match="^paired bootstrap needs the same problems on both sides$"):
        paired_bootstrap_ci([1.0], [1.0, 0.0])


def exact_bootstrap_means(values: list[int]) -> np.ndarray:
    """Every one of the n**n equally likely resamples of `values`, as the sum of its draws (mean * n)."""
    n = len(values)
    idx = np.indices((n,) * n).reshape(n, -1)
    return np.asarray(values)[idx].sum(axis=0)


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_bootstrap_ci_has_its_level_under_the_exact_bootstrap_distribution(level):
    """A small case enumerated in full (6 problems: 46656 resamples): the interval's ends sit at the
    (1-level)/2 and (1+level)/2 quantiles of the exact distribution of the resampled mean."""
    values = [0, 1, 2, 4, 8, 16]
    sums = exact_bootstrap_means(values)
    lo, hi = bootstrap_ci([float(v) for v in values], n_boot=40_000, seed=3, level=level)
    alpha, tol = (1 - level) / 2, 0.006
    below = lambda x: float(np.mean(sums < x * len(values) - 1e-9))  # noqa: E731
    at_most = lambda x: float(np.mean(sums <= x * len(values) + 1e-9))  # noqa: E731
    assert below(lo) <= alpha + tol and at_most(lo) >= alpha - tol, (lo, below(lo), at_most(lo))
    assert below(hi) <= 1 - alpha + tol and at_most(hi) >= 1 - alpha - tol, (hi, below(hi), at_most(hi))


def test_bootstrap_ci_width_matches_the_normal_interval():
    """400 problems from a known distribution: the mean's bootstrap interval is mean +- z * s / sqrt(n)
    (z = 1.960 at 95%, 1.645 at 90%) to within a few percent."""
    values = np.random.default_rng(7).normal(3.0, 2.0, size=400)
    se = values.std() / np.sqrt(values.size)
    for level, z in ((0.95, 1.959964), (0.9, 1.644854)):
        lo, hi = bootstrap_ci(values, n_boot=20_000, seed=5, level=level)
        assert (hi - lo) / 2 == pytest.approx(z * se, rel=0.04), level
        assert (lo + hi) / 2 == pytest.approx(values.mean(), abs=0.1 * se)


def test_paired_bootstrap_ci_is_the_interval_of_the_differences():
    rng = np.random.default_rng(11)
    a, b = rng.random(30), rng.random(30)  # continuous: every resample has its own mean, so seeds show
    for level in (0.95, 0.8):
        got = paired_bootstrap_ci(a, b, n_boot=3000, seed=4, level=level)
        assert got == bootstrap_ci(a - b, n_boot=3000, seed=4, level=level)
    assert paired_bootstrap_ci(a, b, level=0.8) != paired_bootstrap_ci(a, b)


def test_bootstrap_ci_is_seeded_and_the_seed_matters():
    values = np.random.default_rng(2).random(25)  # continuous per-problem values: no ties between resamples
    assert bootstrap_ci(values, seed=9) == bootstrap_ci(values, seed=9)
    assert bootstrap_ci(values, seed=9) != bootstrap_ci(values, seed=10)
    assert paired_bootstrap_ci(values, values[::-1], seed=9) == paired_bootstrap_ci(values, values[::-1], seed=9)


def test_bootstrap_ci_of_one_problem_is_that_value():
    assert bootstrap_ci([0.75]) == (0.75, 0.75)
    assert paired_bootstrap_ci([1.0], [0.25]) == (0.75, 0.75)


def test_mean_at_n_needs_a_sample():
    with pytest.raises(ValueError, match="^mean_at_n needs at least one sample$"):
        mean_at_n([])
