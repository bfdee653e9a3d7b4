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
    with pytest.raises(ValueError):
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


def test_paired_bootstrap_ci():
    a = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert paired_bootstrap_ci(a, a) == (0.0, 0.0)
    lo, hi = paired_bootstrap_ci([1.0] * 6, [0.0] * 6)
    assert lo == hi == 1.0
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1.0], [1.0, 0.0])
