"""prepare_sft_data.py on offline NuminaMath-shaped fixtures: stage counts, splits, determinism, --verify."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rft.data import cli
from rft.data.config import DataConfig, Inputs
from rft.data.eval_sets import build_eval_sets
from rft.data.integer_answer import gsm8k_final_answer, parse_integer_answer
from rft.data.pipeline import (
    BAND_FILE,
    FILES,
    GSM8K_FILES,
    file_specs,
    filter_numina,
    make_splits,
    prepare,
    write_outputs,
)
from rft.data.problems import problem_hash
from rft.data.solutions import SFT_OK, last_boxed_content, sft_output
from rft.data.sources import DataError, Source, load_hub_table, parse_source
from rft.data.verify import verify
from rft.fixtures.data_fixtures import (
    AIME,
    APEX,
    APEX_S,
    GSM_TRAIN,
    MATH_S,
    NUMINA_SCHEMA,
    SMALL_SIZES,
    _good_problem,
    _row,
    _solution,
    small_config,
    small_evals,
    write_eval_inputs,
    write_numina,
)
from rft.io import read_jsonl, sha256_file
from rft.prompts import strip_instruction
from rft.provenance import REPO_ROOT as ROOT

SIZES = [
    "--rl-pool-size", "40", "--sft-size", "12", "--sft-dev-size", "4", "--pool-subset-size", "8",
    "--probe-size", "6", "--aime-size", "4", "--ood-math-size", "10", "--gsm8k-eval-size", "5",
]  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Fixture inputs written once per module."""
    base = tmp_path_factory.mktemp("data-inputs")
    return write_numina(base / "numina"), write_eval_inputs(base / "eval"), base


def _args(inputs, out: Path, *extra: str) -> list[str]:
    numina, ev, base = inputs
    return [
        "--numina", str(base / "numina"), "--aime", str(ev.aime), "--math", *map(str, ev.math),
        "--apex", str(ev.apex), "--gsm8k-train", str(ev.gsm8k_train), "--gsm8k-test", str(ev.gsm8k_test),
        "--out-dir", str(out), "--no-progress", *SIZES, *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def run(inputs, tmp_path_factory):
    """One default run (seed 42, ID probe inside the pool)."""
    out = tmp_path_factory.mktemp("data-out")
    assert cli.main(_args(inputs, out)) == 0
    return out


def _hashes(path: Path) -> set[str]:
    return {problem_hash(r["input"]) for r in read_jsonl(path)}


# ----------------------------------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    ("raw", "label"),
    [("42", "42"), ("-3", "-3"), ("+5", "5"), ("042", "42"), ("1,000", "1000"), ("$12$", "12"),
     ("12 \\text{ cm}", "12"), ("1{,}000", "1000"), ("$\\boxed{7}$", "7"), ("-0", "0"), (" 12,345,678 ", "12345678")],
)  # fmt: skip
def test_clean_integers_are_parsed_to_canonical_strings(raw, label):
    assert parse_integer_answer(raw) == label


@pytest.mark.parametrize(
    "raw",
    ["5,7", "3.5", "\\frac{1}{2}", "proof", "notfound", "", "(1,4),(4,1)", "1,2345", "x^2", "2^{10}", None],
)
def test_non_integers_are_rejected(raw):
    assert parse_integer_answer(raw) is None


def test_gsm8k_final_answer():
    assert gsm8k_final_answer("3 * 4 = <<12>>12\n#### 12") == "12"
    assert gsm8k_final_answer("big\n#### 1,000") == "1000"
    assert gsm8k_final_answer("half\n#### 3.5") is None
    assert gsm8k_final_answer("no marker 12") is None


@pytest.mark.parametrize(
    ("solution", "label", "expected", "reason"),
    [
        ("So \\boxed{5}", "5", "So \\boxed{5}", "ok"),
        ("So $\\boxed{5}$.", "5", "So $\\boxed{5}$.", "ok"),
        ("So \\(\\boxed{5}\\)  \n", "5", "So \\(\\boxed{5}\\)", "ok"),
        ("So $\\boxed{1,000}$.", "1000", "So $\\boxed{1000}$.", "ok"),
        ("So $\\boxed{\\text{12}}$", "12", "So $\\boxed{12}$", "ok"),
        ("So the answer is 5.", "5", None, "no_boxed"),
        ("$\\boxed{2}$ and $\\boxed{5}$", "5", None, "several_boxed"),
        ("$\\boxed{5}$ and more text follows", "5", None, "boxed_not_final"),
        ("So $\\boxed{6}$.", "5", None, "boxed_mismatch"),
        ("So $\\boxed{\\frac{1}{2}}$.", "5", None, "boxed_mismatch"),
    ],
)
def test_sft_output_recognises_endings(solution, label, expected, reason):
    assert sft_output(solution, label) == (expected, reason)


def test_last_boxed_content_handles_nested_braces():
    assert last_boxed_content("a \\boxed{1} b \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed_content("unbalanced \\boxed{3") is None


# ----------------------------------------------------------------------------------------- pipeline


def test_each_stage_removes_the_planted_rows(run, inputs):
    numina = inputs[0]
    report = json.loads((run / "report.json").read_text())
    assert report["numina_rows"] == numina.total
    got = {s["key"]: s["removed"] for s in report["stages"]}
    assert got == numina.removed
    assert report["eligible"] == numina.eligible
    rows_in = numina.total
    for s in report["stages"]:
        assert s["rows_in"] == rows_in and s["examples"], s
        rows_in -= s["removed"]
    overlap = next(s for s in report["stages"] if s["key"] == "eval_overlap")
    assert all("eval input (source=" in e["detail"] for e in overlap["examples"])


def test_dedup_keeps_the_first_occurrence(run):
    """Duplicates differing in case/whitespace come after their originals: only original texts are written."""
    from rft.fixtures.data_fixtures import _good_problem, numina_rows

    rows = numina_rows()[0]
    revived = rows[-1]["problem"]  # the last fixture row survives dedup (its twin was removed at stage 4)
    originals = {_good_problem(i) for i in range(126)} | {revived}
    duplicated = {problem_hash(_good_problem(i)) for i in range(8)}
    written = [
        strip_instruction(r["input"])
        for name in ("sft_rl_pool.jsonl", "sft_train.jsonl", "sft_dev.jsonl")
        for r in read_jsonl(run / name)
    ]
    assert set(written) <= originals
    assert duplicated & {problem_hash(p) for p in written}  # some deduplicated problem was written


def test_files_have_the_requested_sizes_keys_and_datasources(run):
    expected = {
        "sft_rl_pool.jsonl": 40, "sft_rl_pool_400.jsonl": 8, "sft_train.jsonl": 12, "sft_dev.jsonl": 4,
        "probe_set_200.jsonl": 6, "aime_eval.jsonl": 4, "probe_set_200_ood.jsonl": 10 + 5,
        "gsm8k_rl_pool.jsonl": 28, "gsm8k_eval.jsonl": 5,
    }  # fmt: skip
    for name, n in expected.items():
        rows = read_jsonl(run / name)
        assert len(rows) == n, name
        spec = FILES[name]
        for row in rows:
            assert tuple(row) == spec.keys
            assert row["input"].endswith("put your final answer within \\boxed{}.")
            assert spec.datasource is None or row["datasource"] == spec.datasource
    ood = read_jsonl(run / "probe_set_200_ood.jsonl")
    assert sum(r["origin"] == "apex" for r in ood) == 5  # every integer Apex answer, none of the others
    assert {r["label"] for r in ood if r["origin"] == "apex"} == {"4049", "6266942768", "138", "1024"} | {"6"}
    for row in read_jsonl(run / "sft_train.jsonl") + read_jsonl(run / "sft_dev.jsonl"):
        assert sft_output(row["output"], row["label"]) == (row["output"], "ok")
        assert row["output"].count("\\boxed") == 1


def test_splits_are_disjoint_and_no_eval_problem_reaches_training(run, inputs):
    hashes = {name: _hashes(run / name) for name in FILES}
    subsets = {("sft_rl_pool_400.jsonl", "sft_rl_pool.jsonl"), ("probe_set_200.jsonl", "sft_rl_pool.jsonl")}
    names = list(hashes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if (a, b) in subsets or (b, a) in subsets:
                continue
            assert not hashes[a] & hashes[b], (a, b)
    for sub, parent in subsets:
        assert hashes[sub] <= hashes[parent]
    assert not hashes["probe_set_200.jsonl"] & hashes["sft_rl_pool_400.jsonl"]
    training = set().union(*(hashes[n] for n, s in FILES.items() if s.role in ("train", "sft")))
    planted = {problem_hash(p) for p in inputs[0].planted_eval_problems}
    assert not planted & training
    assert problem_hash(APEX[4][0]) in hashes["probe_set_200_ood.jsonl"]


def test_labels_stay_strings_when_loaded_with_datasets(run, tmp_path):
    import datasets

    for name in FILES:
        ds = datasets.load_dataset("json", data_files=str(run / name), split="train", cache_dir=str(tmp_path))
        assert ds.features["label"].dtype == "string", name
        assert all(isinstance(v, str) for v in ds["label"])


def test_same_seed_same_bytes_other_seed_other_pool(run, inputs, tmp_path):
    assert cli.main(_args(inputs, tmp_path / "again")) == 0
    for name in [*FILES, "REPORT.md", "report.json", "MANIFEST.json"]:
        assert (tmp_path / "again" / name).read_bytes() == (run / name).read_bytes(), name
    assert cli.main(_args(inputs, tmp_path / "other", "--seed", "7")) == 0
    assert (tmp_path / "other" / "sft_rl_pool.jsonl").read_bytes() != (run / "sft_rl_pool.jsonl").read_bytes()
    assert cli.main(["--verify", "--out-dir", str(tmp_path / "other")]) == 0


def test_held_out_probe_is_outside_every_training_file(inputs, tmp_path):
    assert cli.main(_args(inputs, tmp_path, "--probe-id-mode", "held-out", "--skip-gsm8k")) == 0
    probe = _hashes(tmp_path / "probe_set_200.jsonl")
    assert len(probe) == 6
    for name in ("sft_rl_pool.jsonl", "sft_train.jsonl", "sft_dev.jsonl"):
        assert not probe & _hashes(tmp_path / name)
    assert "HELD OUT" in (tmp_path / "REPORT.md").read_text()
    assert not any((tmp_path / n).exists() for n in GSM8K_FILES)
    assert cli.main(["--verify", "--out-dir", str(tmp_path)]) == 0


def test_no_require_valid_keeps_flagged_rows(inputs, tmp_path):
    assert cli.main(_args(inputs, tmp_path, "--no-require-valid")) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    stages = {s["key"]: s["removed"] for s in report["stages"]}
    n_invalid = inputs[0].removed["valid"]
    assert stages["valid"] == 0
    # the kept invalid row comes first, so its valid twin is the one dedup removes
    assert stages["dedup"] == inputs[0].removed["dedup"] + 1
    assert report["eligible"] == inputs[0].eligible + n_invalid - 1


# ----------------------------------------------------------------------------------------- verify


def _copy_run(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


def test_verify_passes_on_a_fresh_run(run, capsys):
    assert cli.main(["--verify", "--out-dir", str(run)]) == 0
    assert "0 failed" in capsys.readouterr().out


def test_verify_catches_a_corrupted_file(run, tmp_path):
    out = _copy_run(run, tmp_path / "out")
    pool = out / "sft_rl_pool.jsonl"
    lines = pool.read_text().splitlines()
    row = json.loads(lines[0])
    row["label"] = int(row["label"])  # the exact corruption that makes `datasets` infer integers
    pool.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    assert cli.main(["--verify", "--out-dir", str(out)]) == 1
    failed = {c.name: c.detail for c in verify(out) if not c.ok}
    assert set(failed) == {"sft_rl_pool.jsonl sha256", "sft_rl_pool.jsonl keys, string labels, inputs"}
    assert "sft_rl_pool.jsonl:1: label" in failed["sft_rl_pool.jsonl keys, string labels, inputs"]


def test_verify_catches_a_leaked_eval_problem_even_with_a_matching_manifest(run, tmp_path):
    out = _copy_run(run, tmp_path / "out")
    aime_row = read_jsonl(out / "aime_eval.jsonl")[0]
    pool = out / "sft_rl_pool.jsonl"
    with pool.open("a") as f:
        f.write(json.dumps({"input": aime_row["input"], "label": aime_row["label"]}) + "\n")
    manifest = json.loads((out / "MANIFEST.json").read_text())
    manifest["files"]["sft_rl_pool.jsonl"].update(rows=41, sha256=sha256_file(pool))
    (out / "MANIFEST.json").write_text(json.dumps(manifest))
    assert cli.main(["--verify", "--out-dir", str(out)]) == 1
    failed = {c.name: c.detail for c in verify(out) if not c.ok}
    assert set(failed) == {
        "aime_eval.jsonl in no training file",
        next(k for k in failed if k.startswith("pairwise")),
    }
    assert "sft_rl_pool.jsonl" in failed["aime_eval.jsonl in no training file"]


def test_verify_catches_a_missing_file_and_a_missing_manifest(run, tmp_path):
    out = _copy_run(run, tmp_path / "out")
    (out / "aime_eval.jsonl").unlink()
    assert cli.main(["--verify", "--out-dir", str(out)]) == 1
    (out / "MANIFEST.json").unlink()
    assert cli.main(["--verify", "--out-dir", str(out)]) == 1


# ----------------------------------------------------------------------------------------- bad input


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_missing_column_names_file_and_column_and_keeps_previous_files(run, inputs, tmp_path, capsys):
    out = _copy_run(run, tmp_path / "out")
    before = _snapshot(out)
    bad = tmp_path / "numina"
    shutil.copytree(inputs[2] / "numina", bad)
    shard = sorted(bad.rglob("*.parquet"))[1]
    pq.write_table(pq.read_table(shard).drop_columns(["solution_is_valid"]), shard)
    args = _args(inputs, out)
    args[args.index("--numina") + 1] = str(bad)
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert str(shard) in err and "solution_is_valid" in err
    assert _snapshot(out) == before


def test_unreadable_shard_is_named(inputs, tmp_path, capsys):
    bad = tmp_path / "numina"
    shutil.copytree(inputs[2] / "numina", bad)
    shard = sorted(bad.rglob("*.parquet"))[2]
    shard.write_bytes(b"this is not parquet")
    args = _args(inputs, tmp_path / "out")
    args[args.index("--numina") + 1] = str(bad)
    assert cli.main(args) == 1
    assert str(shard) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_wrong_column_type_is_named(inputs, tmp_path, capsys):
    bad = tmp_path / "numina"
    shutil.copytree(inputs[2] / "numina", bad)
    shard = sorted(bad.rglob("*.parquet"))[0]
    table = pq.read_table(shard)
    flags = pa.array([v == "Yes" for v in table.column("problem_is_valid").to_pylist()])
    pq.write_table(
        table.set_column(table.schema.get_field_index("problem_is_valid"), "problem_is_valid", flags), shard
    )
    args = _args(inputs, tmp_path / "out")
    args[args.index("--numina") + 1] = str(bad)
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert "problem_is_valid" in err and "bool" in err


def test_aime_without_answers_is_an_error_naming_file_and_column(inputs, tmp_path, capsys):
    no_answers = tmp_path / "aime.jsonl"
    no_answers.write_text(json.dumps({"Problem": "Find x."}) + "\n")
    args = _args(inputs, tmp_path / "out")
    args[args.index("--aime") + 1] = str(no_answers)
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert str(no_answers) in err and "'answer'" in err
    empty = tmp_path / "aime_empty.jsonl"
    empty.write_text(json.dumps({"problem": "Find x.", "answer": ""}) + "\n")
    args[args.index("--aime") + 1] = str(empty)
    assert cli.main(args) == 1
    assert "row 0" in capsys.readouterr().err


def test_too_few_eligible_rows_names_the_flag(inputs, tmp_path, capsys):
    assert cli.main(_args(inputs, tmp_path / "out", "--rl-pool-size", "5000")) == 1
    assert "--rl-pool-size" in capsys.readouterr().err
    assert cli.main(_args(inputs, tmp_path / "out", "--aime-size", "50")) == 1
    assert "--aime-size" in capsys.readouterr().err


def test_source_specs(tmp_path):
    assert parse_source(str(tmp_path)).path == tmp_path
    hub = parse_source("openai/gsm8k:main@test")
    assert (hub.hub_id, hub.config, hub.split) == ("openai/gsm8k", "main", "test")
    assert parse_source("AI-MO/NuminaMath-1.5").split == "train"
    with pytest.raises(DataError, match="no such file"):
        parse_source(str(tmp_path / "missing.parquet"))
    with pytest.raises(DataError, match="no such file"):
        parse_source("data/aime.jsonl")


def test_hub_loader_reads_through_datasets(inputs, tmp_path):
    """The hub branch calls datasets.load_dataset for real (here on a local dataset directory)."""
    table = load_hub_table(str(inputs[2] / "numina"), None, "train", cache_dir=str(tmp_path))
    assert table.num_rows == inputs[0].total
    with pytest.raises(DataError, match="could not load"):
        load_hub_table(str(tmp_path / "nothing-here"), None, "train", cache_dir=str(tmp_path))


def test_help_explains_every_flag():
    out = subprocess.run([sys.executable, str(ROOT / "prepare_sft_data.py"), "--help"], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout  # fmt: skip
    # argparse lists every flag whatever its help says, so the check is that each flag's own help text is shown
    # (whitespace dropped: argparse re-wraps lines); the script's --help is this parser's
    shown = "".join(out.split())
    parser = cli.build_parser()
    for action in parser._actions:
        assert action.help and action.help != "==SUPPRESS==", action.option_strings
        assert "".join(action.help.split()) in shown, action.option_strings


def test_the_reward_grades_every_sft_output_correct(run):
    """The SFT targets end in a box the reward (rft.reward.exact_match.grade) extracts and accepts."""
    from rft.reward import exact_match as reward

    for name in ("sft_train.jsonl", "sft_dev.jsonl"):
        for row in read_jsonl(run / name):
            grade = reward.grade(row["output"], row["label"], finished=True)
            assert grade.correct and grade.has_boxed, (name, row["output"][-60:], grade)


def test_pass_rate_band_pool_is_a_verified_subset_with_its_histogram(run, inputs, tmp_path, capsys):
    """--pass-rates: the pool problems inside the band (default: never- and always-solved dropped), a declared
    subset of the pool that --verify checks, with the histogram and the share kept in REPORT.md."""
    pool = read_jsonl(run / "sft_rl_pool.jsonl")
    levels = [0.0, 0.125, 0.5, 0.875, 1.0]
    rates = [{"problem_hash": problem_hash(r["input"]), "n": 8, "pass_rate": levels[i % 5]}
             for i, r in enumerate(pool) if i % 7]  # every 7th problem unmeasured  # fmt: skip
    path = tmp_path / "pass_rates.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rates))
    out = tmp_path / "out"
    assert cli.main(_args(inputs, out, "--pass-rates", str(path), "--pass-order", "easy-first")) == 0
    band = read_jsonl(out / BAND_FILE)
    rate_of = {r["problem_hash"]: r["pass_rate"] for r in rates}
    expected = [r for i, r in enumerate(pool) if i % 7 and levels[i % 5] not in (0.0, 1.0)]
    assert sorted(map(json.dumps, band)) == sorted(map(json.dumps, expected))
    got = [rate_of[problem_hash(r["input"])] for r in band]
    assert got == sorted(got, reverse=True) and set(got) == {0.125, 0.5, 0.875}  # easy first
    report = (out / "REPORT.md").read_text()
    share = len(band) / len(pool)
    assert f"**{len(band)} of {len(pool)} problems ({share:.1%})**" in report
    assert "| 0.000 |" in report and "| no |" in report and "| yes |" in report
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["files"][BAND_FILE]["subset_of"] == "sft_rl_pool.jsonl"
    assert (out / "sft_rl_pool.jsonl").read_bytes() == (run / "sft_rl_pool.jsonl").read_bytes()  # pool unchanged
    assert cli.main(["--verify", "--out-dir", str(out)]) == 0
    assert f"{BAND_FILE} inside sft_rl_pool.jsonl" in {c.name for c in verify(out) if c.ok}
    # a narrower band, and a band holding nothing
    assert cli.main(_args(inputs, tmp_path / "narrow", "--pass-rates", str(path), "--pass-band", "0.4", "0.6")) == 0
    assert len((tmp_path / "narrow" / BAND_FILE).read_text().splitlines()) == sum(
        1 for i in range(len(pool)) if i % 7 and levels[i % 5] == 0.5)
    assert cli.main(_args(inputs, tmp_path / "none", "--pass-rates", str(path), "--pass-band", "0.6", "0.7")) == 1
    path.write_text('{"problem_hash": "x", "pass_rate": 3}\n')
    assert cli.main(_args(inputs, tmp_path / "bad", "--pass-rates", str(path))) == 1
    assert "pass_rate in [0, 1]" in capsys.readouterr().err


def test_help_documents_the_pass_rate_input(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert "--pass-rates" in text and "eval_posthoc.py --pass-rates" in text and "--pass-band" in text


# ----------------------------------------------------------------------------------------- in-process pipeline
# mutmut counts a test against a function only if the test itself calls it; the tests below run the pipeline
# in their own body (prepare() on the fixture takes ~10 ms), not through the module-scoped `run`.


def _inputs(inputs, **over) -> Inputs:
    """The module fixture's inputs, with overrides."""
    _, ev, base = inputs
    spec = {"numina": str(base / "numina"), "aime": str(ev.aime), "math": tuple(map(str, ev.math)),
            "apex": str(ev.apex), "gsm8k_train": str(ev.gsm8k_train), "gsm8k_test": str(ev.gsm8k_test)}  # fmt: skip
    return Inputs(**{**spec, **over})


def _numina(path: Path, rows: list[dict]) -> Source:
    """NuminaMath-shaped rows written as one parquet file."""
    pq.write_table(pa.Table.from_pylist(rows, schema=NUMINA_SCHEMA), path)
    return parse_source(str(path))


SOL = _solution("plain", "5", "5")
LONG = "A long problem\n\twith   irregular  whitespace, " + "and many more words " * 5
P90 = ("Exactly ninety characters long: " + "y" * 90)[:90]
P91 = ("Ninety-one characters long here: " + "z" * 91)[:91]


def _stage_rows() -> list[dict]:
    """Rows planted for every stage over five batches of 4 (batch 3 removed whole at stage 1)."""
    return [
        _row(_good_problem(0), "5", SOL),
        _row(_good_problem(50), "5", SOL, qt="proof"),
        _row(None, "3.5", SOL),
        _row(_good_problem(1), "5", SOL),
        _row(_good_problem(51), "5", SOL, source="amc_aime"),
        _row(AIME[2][0].upper(), "5", SOL, source="cn_k12"),
        _row(_good_problem(2), "5", SOL),
        _row(LONG, "5", SOL, pv="No"),
        *[_row(_good_problem(52 + k), "5", SOL, qt=q) for k, q in enumerate(["MCQ", None, "Math-Word-Problem", "x"])],
        _row(P90, "5", SOL, sv="No"),
        _row(P91, "5", SOL, pv=None),
        _row(_good_problem(2).upper(), "5", SOL),
        _row("Find n.", "5", "S" * 60),
        _row(_good_problem(56), "5", SOL, qt="other"),
        {**_row(_good_problem(3), "5", SOL), "source": None},
    ]  # fmt: skip


def test_stages_count_and_explain_their_removals_across_batches(tmp_path):
    """Each stage's counts, and its first three removed rows with the input row number, a one-line preview and
    the reason (the value that failed, the eval input matched, the row duplicated), across record batches."""
    rows = _stage_rows()
    blocked = {problem_hash(AIME[2][0]): "aime"}
    res = filter_numina(_numina(tmp_path / "n.parquet", rows), small_config(batch_size=4), blocked)
    assert [(s.key, s.rows_in, s.removed) for s in res.stages] == [
        ("question_type", 18, 6), ("integer_answer", 12, 1), ("contest_source", 11, 1), ("eval_overlap", 10, 1),
        ("valid", 9, 3), ("dedup", 6, 1), ("length", 5, 1)]  # fmt: skip
    ex = {s.key: [(e["row"], e["detail"]) for e in s.examples] for s in res.stages}
    assert ex == {
        "question_type": [(1, "question_type='proof'"), (8, "question_type='MCQ'"), (9, "question_type=None")],
        "integer_answer": [(2, "answer='3.5'")],
        "contest_source": [(4, "source='amc_aime'")],
        "eval_overlap": [(5, "same problem as the aime eval input (source='cn_k12')")],
        "valid": [(7, "problem_is_valid='No', solution_is_valid='Yes'"),
                  (12, "problem_is_valid='Yes', solution_is_valid='No'"),
                  (13, "problem_is_valid=None, solution_is_valid='Yes'")],
        "dedup": [(14, "duplicate of row 6")],
        "length": [(15, "problem 7 chars, solution 60 chars")],
    }  # fmt: skip
    previews = {e["row"]: e["problem"] for s in res.stages for e in s.examples}
    assert previews[1] == _good_problem(50) and previews[2] == "" and previews[12] == P90
    for row, text in ((7, LONG), (13, P91)):
        flat = " ".join(text.split())
        assert len(previews[row]) == 90 and previews[row].endswith("...") and flat.startswith(previews[row][:-3])
        assert "  " not in previews[row] and "\n" not in previews[row]
    assert res.rows == [0, 3, 6, 17] and res.labels == ["5"] * 4
    assert res.hashes == [problem_hash(rows[i]["problem"]) for i in res.rows]
    assert res.table.column("source").to_pylist() == ["olympiads"] * 3 + [""]
    assert res.total_rows == 18
    assert res.source_mix == Counter("" if r["source"] is None else r["source"] for r in rows)


@pytest.mark.parametrize(
    ("problem", "solution", "kept"),
    [
        ("p" * 19, "s" * 50, False),
        ("p" * 20, "s" * 50, True),
        ("  " + "q" * 20 + "\n", "s" * 50, True),
        ("é" * 20, "s" * 50, True),
        ("p" * 21, "s" * 50, True),
        ("r" * 25, "s" * 49, False),
        ("r" * 25, " " + "s" * 49 + "\n", False),
        ("r" * 25, "s" * 51, True),
    ],
)
def test_length_filter_keeps_exactly_the_minimum(tmp_path, problem, solution, kept):
    """Stage 6 keeps a problem of exactly --min-problem-chars and a solution of exactly --min-solution-chars
    (characters after trimming whitespace), and drops one character less."""
    res = filter_numina(_numina(tmp_path / "n.parquet", [_row(problem, "5", solution)]), small_config(), {})
    assert len(res.labels) == int(kept)
    assert res.stages[-1].removed == int(not kept)


def test_stage_titles_are_the_documented_ones_and_follow_the_flags(tmp_path):
    """The default stage table matches docs/data.md; the titles show the excluded sources (or none), a disabled
    validity filter and the length thresholds; the flags change what is removed."""
    source = _numina(tmp_path / "n.parquet", _stage_rows())
    table = (ROOT / "docs" / "data.md").read_text().split("| # | stage")[1].split("```")[0]
    documented = [tuple(c.strip() for c in line.split("|")[1:3]) for line in table.splitlines()[2:]
                  if line.startswith("|")]
    assert [(s.number, s.title) for s in filter_numina(source, DataConfig(progress=False), {}).stages] == documented
    res = filter_numina(source, small_config(exclude_sources=(), require_valid=False, min_problem_chars=8,
                                     min_solution_chars=61), {})  # fmt: skip
    titles = {s.key: s.title for s in res.stages}
    assert titles["contest_source"] == "exclude sources (none)"
    assert titles["valid"] == 'problem_is_valid == solution_is_valid == "Yes" (off)'
    assert titles["length"] == "problem >= 8 chars, solution >= 61 chars"
    assert {s.key: s.removed for s in res.stages}["contest_source"] == 0
    assert {s.key: s.removed for s in res.stages}["valid"] == 0
    assert [e["detail"] for e in res.stages[-1].examples] == ["problem 7 chars, solution 60 chars"]
    res = filter_numina(source, small_config(exclude_sources=("amc_aime", "cn_k12")), {})
    assert res.stages[2].title == "exclude sources amc_aime, cn_k12"
    assert [e["row"] for e in res.stages[2].examples] == [4, 5]


def test_progress_bar_counts_input_rows_only_when_asked(tmp_path, capsys, monkeypatch):
    """--no-progress prints nothing; otherwise the bar names the stage and counts all input rows."""
    import threading

    from tqdm import tqdm

    # a process-local lock and no monitor thread: tqdm's default lock is a multiprocessing lock shared with
    # every forked process (mutmut forks one per mutant), which a killed process would leave held
    monkeypatch.setattr(tqdm, "_lock", threading.RLock(), raising=False)
    monkeypatch.setattr(tqdm, "monitor_interval", 0)
    source = _numina(tmp_path / "n.parquet", _stage_rows())
    filter_numina(source, small_config(batch_size=4), {})
    assert capsys.readouterr().err == ""
    filter_numina(source, small_config(batch_size=4, progress=True), {})
    lines = capsys.readouterr().err.replace("\r", "\n").split("\n")
    last = [line for line in lines if line.strip()][-1]
    assert last.startswith("filter NuminaMath: 100%") and "18/18" in last and "row/s" in last


def test_the_stages_see_at_most_batch_size_rows_at_once(tmp_path, monkeypatch):
    """--batch-size bounds the rows held in memory: every batch that reaches the stages has at most that many."""
    from rft.data import pipeline

    sizes: list[int] = []
    real = pipeline._BatchFilter

    def recording(batch: pa.RecordBatch, *args, **kwargs):
        sizes.append(batch.num_rows)
        return real(batch, *args, **kwargs)

    monkeypatch.setattr(pipeline, "_BatchFilter", recording)
    source = _numina(tmp_path / "n.parquet", _stage_rows())
    for batch_size, want in ((4, [4, 4, 4, 4, 2]), (7, [7, 7, 4]), (64, [18])):
        sizes.clear()
        filter_numina(source, small_config(batch_size=batch_size), {})
        assert sizes == want, batch_size


def test_an_empty_input_gives_an_empty_result(tmp_path):
    """A shard with no rows passes every stage with zero counts and an empty (string) table."""
    res = filter_numina(_numina(tmp_path / "n.parquet", []), small_config(), {})
    assert res.table.schema == pa.schema([(k, pa.large_string()) for k in ("problem", "solution", "source")])
    assert (res.table.num_rows, res.total_rows, res.labels) == (0, 0, [])
    assert [(s.rows_in, s.removed) for s in res.stages] == [(0, 0)] * 7


@pytest.mark.parametrize("column", ["source", "answer", "problem_is_valid"])
def test_an_all_null_column_reads_as_empty_strings(tmp_path, column):
    """A column that is null in every row of a file (Arrow type null) reads as empty strings."""
    rows = [_row(_good_problem(n), "5", SOL) for n in range(3)]
    table = pa.Table.from_pylist(rows, schema=NUMINA_SCHEMA)
    table = table.set_column(table.schema.get_field_index(column), column, pa.nulls(3))
    pq.write_table(table, tmp_path / "n.parquet")
    res = filter_numina(parse_source(str(tmp_path / "n.parquet")), small_config(), {})
    if column == "source":
        assert len(res.labels) == 3 and res.source_mix == Counter({"": 3})
        assert res.table.column("source").to_pylist() == ["", "", ""]
    else:
        stage = next(s for s in res.stages if s.removed)
        assert (len(res.labels), stage.removed, stage.examples[0]["detail"].split(", ")[0]) == (0, 3, f"{column}=None")


def _numina_result(inputs):
    """The module fixture's NuminaMath rows through the stages, blocked by the fixture's eval sets."""
    evals = build_eval_sets(_inputs(inputs), small_config())
    return filter_numina(parse_source(str(inputs[2] / "numina")), small_config(), evals.blocked)


@pytest.mark.parametrize("mode", ["in-pool", "held-out"])
def test_splits_have_the_asked_sizes_and_use_every_row_when_asked(inputs, mode):
    """Sizes that add up to every eligible row: each split has exactly its size, the SFT rows are the ones whose
    solution ends in the label's box, and pool, SFT train/dev (and a held-out probe) are disjoint and cover all."""
    numina = _numina_result(inputs)
    n = len(numina.labels)
    held_out = mode == "held-out"
    cfg = small_config(probe_id_mode=mode, rl_pool_size=n - 16 - 6 * held_out)
    s = make_splits(numina, cfg)
    sizes = [len(x) for x in (s.pool, s.sft_train, s.sft_dev, s.probe, s.pool_subset)]
    assert sizes == [cfg.rl_pool_size, 12, 4, 6, 8]
    parts = [s.pool, s.sft_train, s.sft_dev, *([s.probe] if held_out else [])]
    assert sorted(i for p in parts for i in p) == list(range(n))
    assert set(s.probe) <= set(s.pool) if not held_out else not set(s.probe) & set(s.pool)
    assert set(s.pool_subset) <= set(s.pool) - set(s.probe)
    sft = s.sft_train + s.sft_dev
    assert sorted(s.outputs) == sorted(sft)
    solutions = numina.table.column("solution").to_pylist()
    assert all(sft_output(solutions[i], numina.labels[i]) == (s.outputs[i], SFT_OK) for i in sft)
    assert s.sft_reasons[SFT_OK] == 16 and sum(s.sft_reasons.values()) <= n
    with pytest.raises(DataError) as err:
        make_splits(numina, small_config(probe_id_mode=mode, rl_pool_size=cfg.rl_pool_size + 1))
    left = cfg.rl_pool_size
    assert str(err.value) == (f"NuminaMath: {n} eligible rows leave {left} for the pool after the SFT/probe "
                              f"splits, --rl-pool-size asks for {left + 1}")  # fmt: skip


def test_sft_reasons_count_each_examined_solution_once(tmp_path):
    """When every solution ends in its box, the SFT scan examines exactly the SFT rows, each counted once."""
    rows = [_row(_good_problem(n), "5", SOL) for n in range(10)]
    numina = filter_numina(_numina(tmp_path / "n.parquet", rows), small_config(), {})
    s = make_splits(numina, small_config(rl_pool_size=5, sft_size=3, sft_dev_size=2, probe_size=1, pool_subset_size=2))
    assert s.sft_reasons == Counter({SFT_OK: 5})
    assert (len(s.sft_train), len(s.sft_dev), len(s.pool)) == (3, 2, 5)


@pytest.mark.parametrize(
    ("over", "flag", "message"),
    [
        ({"probe_size": 41, "pool_subset_size": 0}, "probe_size",
         "RL pool: only 40 eligible problems, but --probe-size asks for 41"),
        ({"pool_subset_size": 35}, "pool_subset_size",
         "RL pool: only 34 eligible problems, but --pool-subset-size asks for 35"),
        ({"probe_id_mode": "held-out", "rl_pool_size": 0, "sft_size": 0, "sft_dev_size": 0, "pool_subset_size": 0,
          "probe_size": 128}, "probe_size", "NuminaMath: only 127 eligible rows, --probe-size asks for 128"),
        ({"sft_size": 100, "sft_dev_size": 20, "rl_pool_size": 0, "probe_size": 0, "pool_subset_size": 0}, "sft_size",
         "NuminaMath: only {ok} eligible rows end in a \\boxed{{label}}, --sft-size + --sft-dev-size ask for {need}"),
    ],
)  # fmt: skip
def test_split_sizes_up_to_the_rows_available_and_one_more_is_an_error(inputs, over, flag, message):
    """Asking for every row available works; one more names the count and the flag."""
    numina = _numina_result(inputs)
    ok = sum(sft_output(s, label)[1] == SFT_OK
             for s, label in zip(numina.table.column("solution").to_pylist(), numina.labels, strict=True))  # fmt: skip
    limit = ok - 20 if flag == "sft_size" else over[flag] - 1
    fits = make_splits(numina, small_config(**{**over, flag: limit}))
    got = {"sft_size": fits.sft_train, "probe_size": fits.probe, "pool_subset_size": fits.pool_subset}[flag]
    assert len(got) == limit
    with pytest.raises(DataError) as err:
        make_splits(numina, small_config(**{**over, flag: limit + 1}))
    assert str(err.value) == message.format(ok=ok, need=ok + 1)


def test_gsm8k_pool_drops_problems_in_a_numina_split(tmp_path):
    """A GSM8K train problem that a Numina split holds is not in the GSM8K pool, and is counted; pool size 0
    means every remaining candidate, one more than those is an error naming the flag."""
    evals = small_evals(tmp_path / "ev")
    rows = [_row(_good_problem(n), "5", SOL) for n in range(8)] + [_row(GSM_TRAIN[2], "1000", SOL)]
    numina_dir = tmp_path / "numina"
    numina_dir.mkdir()
    _numina(numina_dir / "train.parquet", rows)
    inputs = Inputs(str(numina_dir), **evals)
    cfg = small_config(**SMALL_SIZES, rl_pool_size=4, sft_size=3, sft_dev_size=2, probe_size=1, pool_subset_size=1)
    result = prepare(inputs, cfg)
    assert result.gsm8k_overlap == 1
    assert [strip_instruction(r["input"]) for r in result.files["gsm8k_rl_pool.jsonl"]] == [GSM_TRAIN[0]]
    assert [r["label"] for r in result.files["gsm8k_eval.jsonl"]] == ["8", "12"]
    ood = result.files["probe_set_200_ood.jsonl"]
    assert [(strip_instruction(r["input"]), r["origin"]) for r in ood] == [
        (MATH_S[0], "math"), (MATH_S[5], "math"), (APEX_S[0], "apex")]  # fmt: skip
    with pytest.raises(DataError) as err:
        prepare(inputs, small_config(**{**vars(cfg), "gsm8k_pool_size": 2}))
    assert str(err.value) == "GSM8K train: only 1 eligible problems, but --gsm8k-pool-size asks for 2"


@pytest.mark.parametrize("missing", ["gsm8k_train", "gsm8k_test", "both"])
def test_prepare_without_gsm8k_writes_no_gsm8k_file(inputs, missing):
    """Without both GSM8K inputs there is no GSM8K file and no GSM8K overlap."""
    gone = ("gsm8k_train", "gsm8k_test") if missing == "both" else (missing,)
    result = prepare(_inputs(inputs, **dict.fromkeys(gone)), small_config())
    assert not set(GSM8K_FILES) & set(result.files)
    assert result.gsm8k_overlap == 0


def test_unknown_probe_mode_names_the_choices(inputs):
    """An unknown --probe-id-mode is an error listing the accepted modes and the value given."""
    with pytest.raises(DataError) as err:
        prepare(_inputs(inputs), small_config(probe_id_mode="inside"))
    assert str(err.value) == "--probe-id-mode must be one of in-pool, held-out, got 'inside'"


@pytest.mark.parametrize("mode", ["in-pool", "held-out"])
def test_manifest_describes_every_written_file(inputs, tmp_path, mode):
    """write_outputs creates missing parent folders and records per file its rows, hash, role, keys, datasource
    and subset relation (the ID probe a subset of the pool only in-pool), plus the seed and the probe mode."""
    result = prepare(_inputs(inputs), small_config(probe_id_mode=mode, seed=7))
    result.files[BAND_FILE] = result.files["sft_rl_pool.jsonl"][:3]
    out = tmp_path / "new" / "data"
    manifest = write_outputs(result, out, "# report\n", {"k": 1})
    assert json.loads((out / "MANIFEST.json").read_text()) == manifest
    assert (manifest["version"], manifest["seed"], manifest["probe_id_mode"]) == (1, 7, mode)
    assert manifest["reports"] == {n: sha256_file(out / n) for n in ("REPORT.md", "report.json")}
    for name, rows in result.files.items():
        assert read_jsonl(out / name) == rows
        spec = FILES.get(name)
        entry = manifest["files"][name]
        assert (entry["rows"], entry["sha256"]) == (len(rows), sha256_file(out / name))
        if name == BAND_FILE:
            assert (entry["role"], entry["keys"], entry["datasource"]) == ("train", ["input", "label"], None)
        else:
            assert (entry["role"], entry["keys"], entry["datasource"]) == (spec.role, list(spec.keys), spec.datasource)
    pool_subsets = {n for n, e in manifest["files"].items() if e["subset_of"] == "sft_rl_pool.jsonl"}
    expected = {"sft_rl_pool_400.jsonl", BAND_FILE} | ({"probe_set_200.jsonl"} if mode == "in-pool" else set())
    assert pool_subsets == expected
    assert all(spec.name == name for name, spec in file_specs(mode).items())
    assert all(c.ok for c in verify(out)), [c for c in verify(out) if not c.ok]


def test_seed_42_keeps_picking_the_same_problems(inputs):
    """The picks of a seed are pinned: data made with --seed 42 by an earlier version is the same data, so runs
    trained and evaluated on it stay comparable (each split has its own generator, see _rng)."""
    files = prepare(_inputs(inputs), small_config()).files

    def numbers(name: str, k: int | None = None) -> list[int]:
        return [int(strip_instruction(r["input"]).split(":")[0].split()[-1]) for r in files[name][:k]]

    def labels(name: str, k: int | None = None) -> list[str]:
        return [r["label"] for r in files[name][:k]]

    assert numbers("sft_rl_pool.jsonl", 6) == [41, 51, 116, 4, 58, 65]
    assert numbers("probe_set_200.jsonl") == [116, 56, 6, 52, 97, 113]
    assert numbers("sft_rl_pool_400.jsonl") == [62, 101, 59, 8, 80, 100, 68, 109]
    assert numbers("sft_dev.jsonl") == [10, 92, 39, 18]
    assert labels("aime_eval.jsonl") == ["20", "66", "674", "100"]
    assert labels("probe_set_200_ood.jsonl", 10) == ["4", "8", "12", "16", "20", "24", "32", "40", "48", "250"]
    assert labels("gsm8k_eval.jsonl") == ["1000", "88", "154", "180", "208"]
    assert labels("gsm8k_rl_pool.jsonl", 6) == ["378", "418", "1054", "990", "208", "598"]


def test_a_non_string_numina_column_names_file_and_column(tmp_path):
    """A NuminaMath column of another type is a DataError naming the file, the column and its role."""
    rows = [_row(_good_problem(n), "5", SOL) for n in range(3)]
    table = pa.Table.from_pylist(rows, schema=NUMINA_SCHEMA)
    table = table.set_column(table.schema.get_field_index("source"), "Source", pa.array([1, 2, 3]))
    pq.write_table(table, tmp_path / "n.parquet")
    with pytest.raises(DataError) as err:
        filter_numina(parse_source(str(tmp_path / "n.parquet")), small_config(), {})
    assert str(err.value) == f"{tmp_path / 'n.parquet'}: column 'Source' has type int64, expected strings (source)"
