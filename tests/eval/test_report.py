"""rft.eval.report: baseline delta and flips, per-model SFT verdict, the markdown table."""

from __future__ import annotations

import pytest

from rft.eval.report import compare, markdown_report, summarize

SETTINGS = {
    "backend": "hf",
    "max_new_tokens": 64,
    "seed": 1,
    "reasoning_effort": "medium",
    "chat_date": "2025-08-05",
}


def greedy_cell(
    model: str,
    solved: list[bool],
    boxed: float = 1.0,
    mode: str = "greedy_pass@1",
    boxed_in_final: float | None = None,
) -> dict:
    """A finished greedy cell as evaluation writes it (hand-made)."""
    n = len(solved)
    per = [float(s) for s in solved]
    return {
        "model": model,
        "dataset": "aime",
        "mode": mode,
        "headline": "pass@1",
        "n_problems": n,
        "n_samples": n,
        "problem_ids": [f"p{i}" for i in range(n)],
        "solved": solved,
        "figures": {"pass@1": {"value": sum(per) / n, "ci95": [0.0, 1.0], "per_problem": per}},
        "rates": {
            "boxed": boxed,
            "boxed_in_final": boxed if boxed_in_final is None else boxed_in_final,
            "truncated": 0.1,
            "no_answer": 0.0,
            "response_tokens_mean": 10.0,
        },
        "model_dir": f"/m/{model}",
        "dataset_path": "data/aime_eval.jsonl",
        "prompts_sha256": "x",
    }


def test_compare_gives_delta_ci_and_flips():
    base = greedy_cell("base", [True, True, False, False])
    new = greedy_cell("new", [True, False, True, True])
    vs = compare(new, base, n_boot=300, seed=0)
    assert vs["delta"] == pytest.approx(0.25) and vs["fixed"] == ["p2", "p3"] and vs["broken"] == ["p1"]
    assert vs["ci95"][0] <= 0.25 <= vs["ci95"][1] and vs["metric"] == "pass@1" and vs["baseline"] == "base"
    other = greedy_cell("new", [True, False, True])
    with pytest.raises(ValueError, match="different problems"):
        compare(other, base, n_boot=10, seed=0)


def test_sft_verdict_uses_greedy_cells_and_the_95_percent_line():
    cells = [
        greedy_cell("base", [True, False], boxed=0.96, boxed_in_final=0.5),  # boxed early: still boxed
        greedy_cell("base", [True, True], boxed=0.5, mode="sampling_pass@8"),  # ignored: greedy exists
        greedy_cell("new", [True, True], boxed=0.94, boxed_in_final=0.94),
    ]
    s = summarize(cells, "base", settings=SETTINGS, n_boot=100, seed=0)
    assert s["models"]["base"]["sft_needed"] is False and s["models"]["base"]["basis"] == ["greedy_pass@1"]
    assert s["models"]["new"]["sft_needed"] is True
    assert "vs_baseline" not in s["cells"][0] and s["cells"][2]["vs_baseline"]["delta"] == pytest.approx(0.5)


def test_markdown_table_rows_deltas_and_flips():
    cells = [greedy_cell("base", [True, False, False, True]), greedy_cell("a30", [True, True, False, False])]
    md = markdown_report(summarize(cells, "base", settings=SETTINGS, n_boot=100, seed=0), "AIME")
    assert md.startswith("### AIME")
    assert "| base | aime (4; 25.0 pp) | greedy_pass@1 | pass@1 50.0% [0.0%, 100.0%] | baseline |" in md
    assert "| a30 | aime (4; 25.0 pp) | greedy_pass@1 | pass@1 50.0% [0.0%, 100.0%] | +0.0 pp [" in md
    assert "- a30 · aime · greedy_pass@1: fixed 1 (p1); broken 1 (p3)" in md
    assert "| a30 | 4 | 100.0% | 100.0% | 10.0% | no SFT needed |" in md


def test_nondet_gap_to_greedy_is_reported():
    greedy = greedy_cell("base", [True, False, False, False])
    nondet = greedy_cell("base", [True, True, False, False], mode="nondet_proxy_pass@8")
    nondet["headline"] = "pass@8"
    nondet["figures"] = {"pass@8": nondet["figures"].pop("pass@1")}
    s = summarize([greedy, nondet], "base", settings=SETTINGS, n_boot=50, seed=0)
    assert s["cells"][1]["gap_vs_greedy_pass@1"] == pytest.approx(0.25)
    assert "gap vs greedy_pass@1 +25.0 pp" in markdown_report(s, "t")
