"""prepare_sft_data.py on offline NuminaMath-shaped fixtures: stage counts, splits, determinism, --verify."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rft.data.integer_answer import gsm8k_final_answer, parse_integer_answer
from rft.data.pipeline import FILES, GSM8K_FILES
from rft.data.solutions import last_boxed_content, sft_output
from rft.data.sources import DataError, load_hub_table, parse_source
from rft.data.verify import verify
from rft.io import read_jsonl, sha256_file
from rft.problems import problem_hash
from rft.prompts import strip_instruction
from tests.support.data_fixtures import APEX, write_eval_inputs, write_numina
from tests.support.reward_files import load_file

ROOT = Path(__file__).resolve().parents[2]
SIZES = [
    "--rl-pool-size", "40", "--sft-size", "12", "--sft-dev-size", "4", "--pool-subset-size", "8",
    "--probe-size", "6", "--aime-size", "4", "--ood-math-size", "10", "--gsm8k-eval-size", "5",
]  # fmt: skip


CLI = load_file(ROOT / "prepare_sft_data.py", "prepare_sft_data")


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
    assert CLI.main(_args(inputs, out)) == 0
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
    from tests.support.data_fixtures import _good_problem, numina_rows

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
    assert CLI.main(_args(inputs, tmp_path / "again")) == 0
    for name in [*FILES, "REPORT.md", "report.json", "MANIFEST.json"]:
        assert (tmp_path / "again" / name).read_bytes() == (run / name).read_bytes(), name
    assert CLI.main(_args(inputs, tmp_path / "other", "--seed", "7")) == 0
    assert (tmp_path / "other" / "sft_rl_pool.jsonl").read_bytes() != (run / "sft_rl_pool.jsonl").read_bytes()
    assert CLI.main(["--verify", "--out-dir", str(tmp_path / "other")]) == 0


def test_held_out_probe_is_outside_every_training_file(inputs, tmp_path):
    assert CLI.main(_args(inputs, tmp_path, "--probe-id-mode", "held-out", "--skip-gsm8k")) == 0
    probe = _hashes(tmp_path / "probe_set_200.jsonl")
    assert len(probe) == 6
    for name in ("sft_rl_pool.jsonl", "sft_train.jsonl", "sft_dev.jsonl"):
        assert not probe & _hashes(tmp_path / name)
    assert "HELD OUT" in (tmp_path / "REPORT.md").read_text()
    assert not any((tmp_path / n).exists() for n in GSM8K_FILES)
    assert CLI.main(["--verify", "--out-dir", str(tmp_path)]) == 0


def test_no_require_valid_keeps_flagged_rows(inputs, tmp_path):
    assert CLI.main(_args(inputs, tmp_path, "--no-require-valid")) == 0
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
    assert CLI.main(["--verify", "--out-dir", str(run)]) == 0
    assert "0 failed" in capsys.readouterr().out


def test_verify_catches_a_corrupted_file(run, tmp_path):
    out = _copy_run(run, tmp_path / "out")
    pool = out / "sft_rl_pool.jsonl"
    lines = pool.read_text().splitlines()
    row = json.loads(lines[0])
    row["label"] = int(row["label"])  # the exact corruption that makes `datasets` infer integers
    pool.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    assert CLI.main(["--verify", "--out-dir", str(out)]) == 1
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
    assert CLI.main(["--verify", "--out-dir", str(out)]) == 1
    failed = {c.name: c.detail for c in verify(out) if not c.ok}
    assert set(failed) == {
        "aime_eval.jsonl in no training file",
        next(k for k in failed if k.startswith("pairwise")),
    }
    assert "sft_rl_pool.jsonl" in failed["aime_eval.jsonl in no training file"]


def test_verify_catches_a_missing_file_and_a_missing_manifest(run, tmp_path):
    out = _copy_run(run, tmp_path / "out")
    (out / "aime_eval.jsonl").unlink()
    assert CLI.main(["--verify", "--out-dir", str(out)]) == 1
    (out / "MANIFEST.json").unlink()
    assert CLI.main(["--verify", "--out-dir", str(out)]) == 1


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
    assert CLI.main(args) == 1
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
    assert CLI.main(args) == 1
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
    assert CLI.main(args) == 1
    err = capsys.readouterr().err
    assert "problem_is_valid" in err and "bool" in err


def test_aime_without_answers_is_an_error_naming_file_and_column(inputs, tmp_path, capsys):
    no_answers = tmp_path / "aime.jsonl"
    no_answers.write_text(json.dumps({"Problem": "Find x."}) + "\n")
    args = _args(inputs, tmp_path / "out")
    args[args.index("--aime") + 1] = str(no_answers)
    assert CLI.main(args) == 1
    err = capsys.readouterr().err
    assert str(no_answers) in err and "'answer'" in err
    empty = tmp_path / "aime_empty.jsonl"
    empty.write_text(json.dumps({"problem": "Find x.", "answer": ""}) + "\n")
    args[args.index("--aime") + 1] = str(empty)
    assert CLI.main(args) == 1
    assert "row 0" in capsys.readouterr().err


def test_too_few_eligible_rows_names_the_flag(inputs, tmp_path, capsys):
    assert CLI.main(_args(inputs, tmp_path / "out", "--rl-pool-size", "5000")) == 1
    assert "--rl-pool-size" in capsys.readouterr().err
    assert CLI.main(_args(inputs, tmp_path / "out", "--aime-size", "50")) == 1
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
    parser = CLI.build_parser()
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
    from rft.data.pipeline import BAND_FILE

    pool = read_jsonl(run / "sft_rl_pool.jsonl")
    levels = [0.0, 0.125, 0.5, 0.875, 1.0]
    rates = [{"problem_hash": problem_hash(r["input"]), "n": 8, "pass_rate": levels[i % 5]}
             for i, r in enumerate(pool) if i % 7]  # every 7th problem unmeasured  # fmt: skip
    path = tmp_path / "pass_rates.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rates))
    out = tmp_path / "out"
    assert CLI.main(_args(inputs, out, "--pass-rates", str(path), "--pass-order", "easy-first")) == 0
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
    assert CLI.main(["--verify", "--out-dir", str(out)]) == 0
    assert f"{BAND_FILE} inside sft_rl_pool.jsonl" in {c.name for c in verify(out) if c.ok}
    # a narrower band, and a band holding nothing
    assert CLI.main(_args(inputs, tmp_path / "narrow", "--pass-rates", str(path), "--pass-band", "0.4", "0.6")) == 0
    assert len((tmp_path / "narrow" / BAND_FILE).read_text().splitlines()) == sum(
        1 for i in range(len(pool)) if i % 7 and levels[i % 5] == 0.5)
    assert CLI.main(_args(inputs, tmp_path / "none", "--pass-rates", str(path), "--pass-band", "0.6", "0.7")) == 1
    path.write_text('{"problem_hash": "x", "pass_rate": 3}\n')
    assert CLI.main(_args(inputs, tmp_path / "bad", "--pass-rates", str(path))) == 1
    assert "pass_rate in [0, 1]" in capsys.readouterr().err


def test_help_documents_the_pass_rate_input(capsys):
    with pytest.raises(SystemExit):
        CLI.main(["--help"])
    text = capsys.readouterr().out
    assert "--pass-rates" in text and "eval_posthoc.py --pass-rates" in text and "--pass-band" in text
