"""Noise-aware early stopping: unit cases, simulated false-stop rate on flat runs, power on a real decline."""

from __future__ import annotations

import math

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
