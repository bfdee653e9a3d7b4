"""The eval-noise benchmark's null pairs: which cells are paired, the spread, and the share read as an effect."""

from __future__ import annotations

import pytest

from benchmarks.bench_eval_noise import noise_rows, null_pairs, spread, table

PIDS = [f"p{i}" for i in range(8)]


def cell(model: str, per_problem: list[float]) -> dict:
    value = sum(per_problem) / len(per_problem)
    return {"model": model, "headline": "mean@8", "problem_ids": PIDS, "solved": [v > 0.5 for v in per_problem],
            "figures": {"mean@8": {"value": value, "per_problem": per_problem}}}


def grid() -> dict:
    """Two models x three eval seeds: eval seeds move each problem a little, model b is 0.5 better everywhere."""
    cells = {}
    for s, jitter in ((1, 0.0), (2, 0.125), (3, -0.125)):
        cells[("a", s)] = cell("a", [0.25 + jitter] * 8)
        cells[("b", s)] = cell("b", [0.75 + jitter] * 8)
    return cells


def test_eval_pairs_hold_one_model_and_training_pairs_one_eval_seed():
    pairs = null_pairs(grid(), n_boot=200)
    assert len(pairs["eval"]) == 2 * 3 and len(pairs["training"]) == 3 * 1
    assert {p["baseline"] for p in pairs["eval"]} == {"a", "b"}
    assert all(p["delta"] == pytest.approx(0.5) for p in pairs["training"])
    assert sorted(round(abs(p["delta"]), 3) for p in pairs["eval"]) == [0.125] * 4 + [0.25] * 2


def test_the_rows_give_spread_deltas_and_the_share_of_pairs_read_as_an_effect():
    rows = {r["source"]: r for r in noise_rows(grid(), n_boot=200)}
    assert rows["training"]["max_abs_delta"] == pytest.approx(0.5)
    assert rows["training"]["excludes_zero"] == 1.0  # every problem moved the same way: the interval is a point
    assert rows["eval"]["excludes_zero"] == 1.0
    assert spread(grid(), "eval") == pytest.approx(0.125)
    assert spread(grid(), "training") == pytest.approx(0.5 / 2**0.5)
    md = table(list(rows.values()), "mean@8")
    assert "| training | 3 | 35.4 pp | 50.0 pp | 50.0 pp | 0.0 pp | 100% |" in md


def test_a_null_pair_whose_problems_disagree_is_not_an_effect():
    cells = {("a", 1): cell("a", [1.0, 0.0] * 4), ("a", 2): cell("a", [0.0, 1.0] * 4)}
    (row,) = noise_rows(cells, n_boot=500)
    assert row["source"] == "eval" and row["max_abs_delta"] == 0.0 and row["excludes_zero"] == 0.0
