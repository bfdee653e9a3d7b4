"""The filtering benchmark's summary: per-seed samples to each target, the ratio of means with its interval."""

from __future__ import annotations

from benchmarks.bench_filtering import GOAL, ratio_cell, summary


def figs(baseline: list[tuple[int, float, float]], filtered: list[tuple[int, float, float]]) -> dict:
    return {"baseline": {"evals": baseline}, "filtered": {"evals": filtered}}


def test_the_summary_gives_the_ratio_of_means_its_interval_and_whether_the_goal_is_inside():
    per_seed = {
        42: figs([(2, 1000.0, 0.2), (4, 3000.0, 0.6)], [(2, 800.0, 0.4), (4, 1600.0, 0.6)]),
        43: figs([(2, 1000.0, 0.3), (4, 3600.0, 0.6)], [(2, 900.0, 0.6)]),
        44: figs([(2, 1000.0, 0.1)], [(2, 1000.0, 0.6)]),  # the baseline never reaches 0.5
    }
    text = summary(per_seed, [0.1, 0.3])
    header, _, row1, row3 = text.splitlines()
    assert header.endswith(f"| seed 44 | ratio of means | 95% interval | {GOAL}x inside |")
    # every run reached 0.1: 3000 / 2700 samples in all, a ratio between 1.0x and 1.25x in every resample
    assert row1.startswith("| >= 0.1 | 1000 / 800 | 1000 / 900 | 1000 / 1000 | 1.11x | ") and row1.endswith("| no |")
    assert row3 == "| >= 0.3 | 3000 / 800 | 1000 / 900 | None / 1000 | - | - | - |"


def test_a_ratio_cell_says_whether_the_goal_lies_in_the_interval():
    assert ratio_cell([3000.0, 3000.0], [2000.0, 2000.0]) == "1.50x | 1.50-1.50x | yes"
    assert ratio_cell([2000.0, 2200.0], [2000.0, 2000.0]).endswith("| no")
    assert ratio_cell([3000.0, None], [2000.0, 2000.0]) == "- | - | -"
