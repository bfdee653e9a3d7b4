"""rft/data/eval_sets.py: the eval inputs read, integer answers kept, sets made disjoint, every input row blocked."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from rft.data.config import Inputs
from rft.data.eval_sets import EvalInput, build_eval_sets, load_integer_set
from rft.data.problems import problem_hash
from rft.data.sources import DataError, parse_source
from rft.fixtures.data_fixtures import (
    AIME_S,
    APEX_S,
    GSM_TEST,
    GSM_TRAIN,
    MATH_S,
    SMALL_SIZES,
    jsonl_source,
    small_config,
    small_evals,
    small_inputs,
)
from rft.io import read_jsonl


def test_eval_sets_count_every_input_drop_overlaps_and_block_every_row(tmp_path):
    """Per input: rows, usable, overlap with earlier sets, selected; every row of every eval input (usable or
    not, GSM8K train excepted) is blocked under the first input that has it; each set's origin and labels."""
    inputs = small_inputs(tmp_path)
    evals = build_eval_sets(inputs, small_config(**SMALL_SIZES))
    got = [(s.name, s.spec, s.rows, s.usable, s.overlap, s.selected, s.notes) for s in evals.inputs]
    assert got == [
        ("aime", inputs.aime, 6, 6, 2, 2, ""),
        ("math", " ".join(inputs.math), 6, 3, 1, 2, "levels 4, 5"),
        ("apex", inputs.apex, 4, 2, 1, 1, "all integer ones"),
        ("gsm8k_test", inputs.gsm8k_test, 4, 3, 1, 2, ""),
        ("gsm8k_train", inputs.gsm8k_train, 3, 3, 1, 0, "pool candidates"),
    ]
    expected = {problem_hash(p): "aime" for p in AIME_S}
    expected |= {problem_hash(APEX_S[n]): "apex" for n in (0, 1, 3)}
    expected |= {problem_hash(MATH_S[n]): "math" for n in (0, 1, 3, 4, 5)}
    expected |= {problem_hash(GSM_TEST[n]): "gsm8k_test" for n in (0, 2, 3)}
    assert evals.blocked == expected
    assert [p.origin for p in evals.aime] == ["aime", "aime"]
    assert {p.label for p in evals.aime} < {"10", "11", "12", "13"}
    assert [(p.problem, p.label, p.origin) for p in evals.ood] == [
        (MATH_S[0], "4", "math"), (MATH_S[5], "6", "math"), (APEX_S[0], "7", "apex")]  # fmt: skip
    assert [(p.problem, p.label, p.origin) for p in evals.gsm8k_eval] == [
        (GSM_TEST[0], "8", "gsm8k"), (GSM_TEST[2], "12", "gsm8k")]  # fmt: skip
    assert [(p.problem, p.label, p.origin) for p in evals.gsm8k_train] == [
        (GSM_TRAIN[0], "10", "gsm8k"), (GSM_TRAIN[2], "1000", "gsm8k")]  # fmt: skip
    sets = [evals.aime, evals.ood, evals.gsm8k_eval, evals.gsm8k_train]
    hashes = [p.hash for s in sets for p in s]
    assert len(hashes) == len(set(hashes))
    assert all(p.hash == problem_hash(p.problem) for s in sets for p in s)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"aime_size": 5}, "AIME: only 4 eligible problems, but --aime-size asks for 5"),
        ({"ood_math_size": 3}, "MATH: only 2 eligible problems, but --ood-math-size asks for 3"),
        ({"gsm8k_eval_size": 3}, "GSM8K test: only 2 eligible problems, but --gsm8k-eval-size asks for 3"),
    ],
)
def test_eval_set_sizes_up_to_the_usable_count_and_one_more_is_an_error(tmp_path, over, message):
    """Asking for every usable problem works; one more names the set, the count and the flag."""
    inputs = small_inputs(tmp_path)
    ((flag, above),) = over.items()
    at = build_eval_sets(inputs, small_config(**{**SMALL_SIZES, flag: above - 1}))
    picked = {"aime_size": at.aime, "ood_math_size": at.ood[:-1], "gsm8k_eval_size": at.gsm8k_eval}[flag]
    assert len(picked) == above - 1
    with pytest.raises(DataError) as err:
        build_eval_sets(inputs, small_config(**{**SMALL_SIZES, flag: above}))
    assert str(err.value) == message


@pytest.mark.parametrize("missing", ["gsm8k_train", "gsm8k_test"])
def test_gsm8k_sets_need_both_splits(tmp_path, missing):
    """Without one of the two GSM8K inputs no GSM8K set is built (and nothing of the other is read)."""
    evals = build_eval_sets(small_inputs(tmp_path, **{missing: None}), small_config(**SMALL_SIZES))
    assert (evals.gsm8k_eval, evals.gsm8k_train) == ([], [])
    assert [s.name for s in evals.inputs] == ["aime", "math", "apex"]
    assert "gsm8k_test" not in evals.blocked.values()


def test_hub_ids_read_the_test_split_for_eval_sets_and_train_for_the_gsm8k_pool(tmp_path, monkeypatch):
    """An eval set given as a hub id without @split reads its test split; the GSM8K pool reads train."""
    from rft.data import sources

    small = small_evals(tmp_path)
    asked = []

    def hub_table(hub_id: str, config: str | None, split: str, cache_dir: str | None = None) -> pa.Table:
        asked.append((hub_id, config, split))
        path = {"o/math": small["math"][0], "openai/gsm8k": small[f"gsm8k_{split}"]}[hub_id]
        return pa.Table.from_pylist(read_jsonl(Path(path)))

    monkeypatch.setattr(sources, "load_hub_table", hub_table)
    inputs = Inputs("unused", small["aime"], ("o/math",), small["apex"], "openai/gsm8k:main", "openai/gsm8k:main")
    evals = build_eval_sets(inputs, small_config(**{**SMALL_SIZES, "ood_math_size": 1}))
    assert asked == [("o/math", None, "test"), ("openai/gsm8k", "main", "test"), ("openai/gsm8k", "main", "train")]
    assert [p.problem for p in evals.gsm8k_train] == [GSM_TRAIN[0], GSM_TRAIN[2]]


@pytest.mark.parametrize(
    ("name", "rows", "column"),
    [
        ("math", [{"question_text": "Find x.", "level": 5, "solution": "$\\boxed{1}$"}], "'problem' or 'question'"),
        ("math", [{"problem": "Find x.", "solution": "$\\boxed{1}$"}], "'level'"),
        ("math", [{"problem": "Find x.", "level": 5}], "'answer' or 'solution'"),
        ("math", [{"problem": "Find x.", "level": 5, "solution": 1.5}], "'solution' has type double"),
        ("math", [{"problem": 2.5, "level": 5, "solution": "$\\boxed{1}$"}], "'problem' has type double"),
        ("apex", [{"problem": "Find x."}], "'answer'"),
        ("aime", [{"problem": "Find x.", "answer": 1.5}], "'answer' has type double"),
    ],
)
def test_a_bad_eval_input_is_an_error_naming_file_and_column(tmp_path, name, rows, column):
    """A missing or non-string column of an eval input is a DataError naming the file and the column."""
    small = small_evals(tmp_path / "ok")
    bad = jsonl_source(tmp_path / f"bad_{name}.jsonl", rows)
    small[name] = (bad,) if name == "math" else bad
    with pytest.raises(DataError) as err:
        build_eval_sets(Inputs("unused", **small), small_config(**SMALL_SIZES))
    assert str(err.value).startswith(f"{bad}: ") and column in str(err.value)


def test_integer_sets_read_the_gsm8k_marker_only_for_gsm8k(tmp_path):
    """GSM8K labels come from `#### N` (else a bare integer answer); other sets never read `####`."""
    rows = [{"problem": "P one.", "answer": "So #### 7"}, {"problem": "P two.", "answer": "12"},
            {"problem": "P three.", "answer": "#### 3.5"}]  # fmt: skip
    source = parse_source(jsonl_source(tmp_path / "x.jsonl", rows))
    stat = EvalInput("x", "x")
    got, raw = load_integer_set(source, "gsm8k", stat, gsm8k=True)
    assert [(p.label, p.origin) for p in got] == [("7", "gsm8k"), ("12", "gsm8k")]
    assert raw == [r["problem"] for r in rows] and (stat.rows, stat.usable) == (3, 2)
    load_integer_set(source, "gsm8k", stat, gsm8k=True)
    assert (stat.rows, stat.usable) == (6, 4)  # counts add up over the files of one input, as for MATH
    got, _ = load_integer_set(source, "apex", EvalInput("y", "y"), gsm8k=False)
    assert [(p.label, p.origin) for p in got] == [("12", "apex")]
