"""Noise-aware early stopping: unit cases, simulated false-stop rate on flat runs, power on a real decline."""

from __future__ import annotations

import itertools
import math

import pytest

from rft.monitor.early_stop import decide, drop_threshold, exact_stop_probability, simulate_stop_rate

FLAT = [0.4] * 20  # 20 evals of a run that is not changing, probe of 202 problems
DECLINE = [0.45] * 5 + [0.37, 0.29, 0.21, 0.13]  # 8 pp per eval after the fifth eval


def test_threshold_is_two_standard_errors_of_a_proportion():
    assert math.isclose(drop_threshold(0.4, 0.4, 202), 2 * math.sqrt(0.4 * 0.6 / 202))
    assert 0.068 < drop_threshold(0.4, 0.4, 202) < 0.070  # ~6.9 pp on the OOD probe
    assert drop_threshold(0.0, 0.0, 202) > 0  # never zero, even at a degenerate score


def test_two_consecutive_significant_drops_stop_and_name_the_best_eval():
    d = decide([0.40, 0.47, 0.46, 0.38, 0.30, 0.31], probe_size=202)
    assert d.stop and d.fired_at == 4 and d.best_index == 1
    assert [i for i, _, _ in d.drops] == [3, 4]


def test_small_or_interrupted_drops_do_not_stop():
    assert not decide([0.45, 0.43, 0.41, 0.39, 0.37, 0.35], probe_size=202).stop  # 2 pp drops: noise
    assert not decide([0.47, 0.38, 0.40, 0.31], probe_size=202).stop  # big drops, not consecutive
    assert not decide([0.5, 0.3], probe_size=202).stop  # one drop only
    assert not decide([], probe_size=202).stop


def test_false_stop_rate_on_a_flat_run_is_under_one_percent():
    rate, _ = simulate_stop_rate(FLAT, runs=2000, probe_size=202, seed=1234)
    exact = exact_stop_probability(FLAT, probe_size=202)
    naive, _ = simulate_stop_rate(FLAT, runs=2000, probe_size=202, z=0.0, seed=1234)
    print(f"\nflat p=0.4, n=202, 20 evals: simulated false-stop rate {rate:.2%} (2000 runs), exact {exact:.3%}; "
          f"naive 'two drops of any size' {naive:.1%}")
    assert rate < 0.01 and exact < 0.01
    assert abs(rate - exact) < 4 * math.sqrt(exact * (1 - exact) / 2000) + 1e-3  # simulation agrees with the DP
    assert naive > 0.5  # why the noise threshold is needed


def test_a_real_decline_is_still_stopped_after_it_starts():
    rate, fired = simulate_stop_rate(DECLINE, runs=2000, probe_size=202, seed=99)
    exact = exact_stop_probability(DECLINE, probe_size=202)
    early = sum(f is not None and f < 5 for f in fired) / len(fired)
    slow = exact_stop_probability([0.45] * 5 + [0.40, 0.35, 0.30, 0.25, 0.20], probe_size=202)
    print(f"\ndecline 45% -> 13% (8 pp/eval): stopped in {rate:.1%} of 2000 runs (exact {exact:.1%}), "
          f"{early:.2%} before the decline could show; 5 pp/eval decline: {slow:.1%}")
    assert rate > 0.6 and abs(rate - exact) < 0.05
    assert early < 0.01


# ----------------------------------------------------------------- against references computed independently


def reference_decide(scores: list[float], n: int, z: float = 2.0) -> int | None:
    """The rule written out plainly: the index of the second of two consecutive drops beyond z standard errors."""
    streak = 0
    for i in range(1, len(scores)):
        p = (scores[i - 1] + scores[i]) / 2
        se = math.sqrt(max(p * (1 - p), 1 / n) / n)
        streak = streak + 1 if scores[i - 1] - scores[i] > z * se else 0
        if streak == 2:
            return i
    return None


@pytest.mark.parametrize("n", [4, 10])
def test_decide_agrees_with_the_plain_rule_on_every_history_of_a_small_probe(n):
    # n = 4: the threshold is exactly 0.5 (the 1/n floor), so no two drops can both exceed it; n = 10: some fire
    grid = [k / n for k in range(n + 1)]
    fired = 0
    for history in itertools.product(grid, repeat=4):
        d = decide(list(history), probe_size=n)
        assert d.fired_at == reference_decide(list(history), n) and d.stop is (d.fired_at is not None), history
        fired += d.stop
        if not d.stop:
            assert d.best_index == max(range(4), key=lambda i: history[i]) and d.drops == ()
    assert (fired > 100) is (n == 10)
    assert not decide([1.0, 0.5, 0.0], probe_size=4).stop  # two drops of exactly one threshold
    assert not decide([0.1, 0.0, 0.9], probe_size=202).stop  # a rise after one drop: no wrap-around pair
    assert drop_threshold(0.0, 0.0, 100) == pytest.approx(2 * math.sqrt(0.01 / 100))  # the 1/n floor


def brute_force_stop_probability(true_p: list[float], n: int, z: float = 2.0) -> float:
    """Sum over every sequence of scores of its binomial probability, where the plain rule fires."""
    pmfs = [[math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)] for p in true_p]
    total = 0.0
    for ks in itertools.product(range(n + 1), repeat=len(true_p)):
        if reference_decide([k / n for k in ks], n, z) is not None:
            total += math.prod(pmf[k] for pmf, k in zip(pmfs, ks, strict=True))
    return total


@pytest.mark.parametrize(
    ("true_p", "z"),
    [
        ([0.9, 0.5, 0.2, 0.1], 2.0),
        ([0.0, 1.0, 0.5, 0.0], 2.0),  # certain scores at both ends
        ([0.3, 0.9, 0.6, 0.2, 0.1], 2.0),  # 5 evals: a state after a drop carried into a later non-drop
        ([0.9, 0.4, 0.1], 3.0),  # at z = 3 a drop of 0.4 near 0.2 passes only with the 1/n floor
    ],
)
def test_exact_stop_probability_matches_brute_force(true_p, z):
    want = brute_force_stop_probability(true_p, 10, z)
    assert exact_stop_probability(true_p, probe_size=10, z=z) == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert 0.01 < want < 0.99  # a comparison that can tell a wrong programme apart


def test_a_simulation_is_reproducible_from_its_seed():
    a = simulate_stop_rate([0.5, 0.3, 0.1], runs=50, probe_size=20, seed=7)
    assert a == simulate_stop_rate([0.5, 0.3, 0.1], runs=50, probe_size=20, seed=7)
