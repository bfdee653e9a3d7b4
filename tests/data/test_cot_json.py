"""The TRL guide's CoT JSON imported as an RL pool and a held-out eval set."""

from __future__ import annotations

import json

from rft.data.cot_json import EVAL_FILE, POOL_FILE, import_cot, main
from rft.data.problems import problem_hash
from rft.io import read_jsonl
from rft.prompts import INSTRUCTION, strip_instruction


def guide_rows(n: int) -> list[dict]:
    """Records shaped as the guide shows them: question, ground_truth, predicted_answer, correct, ..."""
    return [{"question": f"Tom has {i} apples and buys 3 more. How many now?", "ground_truth": str(i + 3),
             "predicted_answer": str(i + 3), "correct": True, "cot": "..."} for i in range(n)]


def test_import_writes_a_disjoint_pool_and_eval_set(tmp_path, capsys):
    rows = guide_rows(30)
    rows += [
        {"question": rows[0]["question"], "ground_truth": "3"},  # the same problem again
        {"question": "  ", "ground_truth": "1"},
        {"question": "What is 6 x 7?", "ground_truth": None},
        {"question": "What is 2.0 + 2?", "ground_truth": 4.0, "correct": False},  # numbers, a wrong teacher CoT
        "not a record",
    ]
    src = tmp_path / "first_round_final_gsm8k_math.json"
    src.write_text(json.dumps(rows))
    assert main([str(src), "--out", str(tmp_path / "data"), "--eval-size", "5"]) == 0
    out = capsys.readouterr().out
    assert "1 no ground_truth, 1 no question, 1 not an object, 1 repeated problem" in out
    pool, ev = read_jsonl(tmp_path / "data" / POOL_FILE), read_jsonl(tmp_path / "data" / EVAL_FILE)
    assert (len(pool), len(ev)) == (26, 5)
    assert all(set(r) == {"input", "label"} and r["input"].endswith(INSTRUCTION) for r in pool)
    assert all(set(r) == {"input", "label", "datasource"} and r["datasource"] == "cot" for r in ev)
    assert not {problem_hash(strip_instruction(r["input"])) for r in pool} & {
        problem_hash(strip_instruction(r["input"])) for r in ev}
    labels = {strip_instruction(r["input"]): r["label"] for r in pool + ev}
    assert labels["What is 2.0 + 2?"] == "4" and labels["Tom has 7 apples and buys 3 more. How many now?"] == "10"
    # the same seed gives the same split
    assert main([str(src), "--out", str(tmp_path / "again"), "--eval-size", "5"]) == 0
    assert read_jsonl(tmp_path / "again" / EVAL_FILE) == ev


def test_jsonl_input_and_refusals(tmp_path, capsys):
    src = tmp_path / "cot.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in guide_rows(4)))
    assert len(import_cot(src).rows) == 4
    assert main([str(src), "--out", str(tmp_path / "d"), "--eval-size", "10"]) == 2
    assert "4 usable problems, not more than --eval-size 10" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main([str(bad), "--out", str(tmp_path / "d")]) == 2
