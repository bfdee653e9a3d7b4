"""rft.eval.modes and eval_posthoc.py: prompt parity with OpenRLHF, modes, metrics, resume, end to end.

The end-to-end test runs the real script (subprocess, HF backend, CPU) on a tiny Qwen2 model taught the
\\boxed{} format for a few steps and a real PEFT LoRA adapter on it; dataset labels are chosen from the
two models' own greedy answers so that the expected pass@1, delta and flips are known exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from rft.eval import cli
from rft.eval.generation import HFBackend, Request
from rft.eval.merge import resolve_model
from rft.eval.modes import (
    MODES,
    EvalConfig,
    Problem,
    cell_metrics,
    load_problems,
    parse_named,
    plan_passes,
    resolve_dataset,
    run_evaluation,
)
from rft.fixtures.tiny_model import build_tiny_model, build_tokenizer, fabricate_lora_adapter
from rft.prompts import (
    DEFAULT_CHAT_DATE,
    build_input,
    chat_template_kwargs,
    encode_prompt,
    render_prompt,
)
from rft.provenance import REPO_ROOT as ROOT
from rft.reward.exact_match import grade

QUESTIONS = [
    f"What is {a}+{b}?" for a, b in [(2, 3), (7, 6), (4, 9), (11, 5), (1, 1), (8, 12), (3, 14), (20, 0)]
]
MAX_TOKENS = 24


# ------------------------------------------------------------------------------------------------
# Prompt parity with OpenRLHF 0.9.3 training
# ------------------------------------------------------------------------------------------------


def openrlhf_train_ids(tok, row: dict) -> list[int]:
    """Token ids OpenRLHF 0.9.3 trains on: its real preprocess_data + tokenize(add_special_tokens=False)."""
    from openrlhf.datasets.prompts_dataset import preprocess_data

    prompt, label = preprocess_data(row, None, "input", "label", apply_chat_template=tok.apply_chat_template)
    assert label == row["label"]
    return tok(prompt, add_special_tokens=False)["input_ids"]


def test_train_and_eval_render_the_same_tokens():
    tok = build_tokenizer()
    row = {"input": build_input("Find the sum of all integers n such that n^2 + 3n = 40."), "label": "-3"}
    for _ in range(2):  # retry once if the day changes between the two renders
        today = datetime.now().strftime("%Y-%m-%d")
        train = openrlhf_train_ids(tok, row)
        ours = encode_prompt(tok, row["input"], **chat_template_kwargs("medium", today))
        if today == datetime.now().strftime("%Y-%m-%d"):
            break
    assert ours == train
    assert tok.decode(ours).endswith("<|im_start|>assistant\n") and "Reasoning: medium" in tok.decode(ours)


def test_eval_date_is_fixed_and_is_the_only_difference_from_training():
    tok = build_tokenizer()
    row = {"input": build_input("What is 2+3?"), "label": "5"}
    from openrlhf.datasets.prompts_dataset import preprocess_data

    train_text, _ = preprocess_data(row, None, "input", "label", apply_chat_template=tok.apply_chat_template)
    eval_text = render_prompt(tok, row["input"], **chat_template_kwargs("medium", DEFAULT_CHAT_DATE))
    assert f"Current date: {DEFAULT_CHAT_DATE}" in eval_text
    today = datetime.now().strftime("%Y-%m-%d")
    assert eval_text.replace(DEFAULT_CHAT_DATE, today) == train_text.replace(
        datetime.now().strftime("%Y-%m-%d"), today
    )
    high = render_prompt(tok, row["input"], **chat_template_kwargs("high", DEFAULT_CHAT_DATE))
    assert "Reasoning: high" in high and high != eval_text
    with pytest.raises(ValueError):
        chat_template_kwargs("medium", "05/08/2025")
    assert EvalConfig(chat_date="today").fingerprint()["chat_date"] == datetime.now().strftime("%Y-%m-%d")
    assert EvalConfig().fingerprint()["chat_date"] == DEFAULT_CHAT_DATE
    with pytest.raises(ValueError, match="--chat-date '2025-13-40'"):
        EvalConfig(chat_date="2025-13-40").template_kwargs()


# ------------------------------------------------------------------------------------------------
# Inputs: datasets and names
# ------------------------------------------------------------------------------------------------


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_load_problems_and_errors_name_file_and_line(tmp_path):
    good = write_jsonl(
        tmp_path / "good.jsonl",
        [{"input": build_input(q), "label": str(i)} for i, q in enumerate(QUESTIONS[:3])],
    )
    probs = load_problems(good)
    assert [p.label for p in probs] == ["0", "1", "2"] and len({p.pid for p in probs}) == 3
    assert len(load_problems(good, limit=2)) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"input": "x", "label": "1"}) + "\n" + json.dumps({"input": "y"}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: row has no 'label'"):
        load_problems(bad)
    bad.write_text("{nope\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: not valid JSON"):
        load_problems(bad)
    dup = write_jsonl(
        tmp_path / "dup.jsonl", [{"input": "Same?", "label": "1"}, {"input": "same? ", "label": "1"}]
    )
    a, b = load_problems(dup)
    assert b.pid == a.pid + "~2"


def test_dataset_and_model_names(tmp_path):
    (tmp_path / "aime_eval.jsonl").write_text("")
    assert resolve_dataset("aime", tmp_path) == ("aime", tmp_path / "aime_eval.jsonl")
    with pytest.raises(ValueError, match=r"--dataset ood: .*probe_set_200_ood\.jsonl not found"):
        resolve_dataset("ood", tmp_path)
    assert resolve_dataset(f"x={tmp_path / 'aime_eval.jsonl'}")[0] == "x"
    assert resolve_dataset(str(tmp_path / "aime_eval.jsonl"))[0] == "aime_eval"
    assert parse_named("a30_s130=/ckpt/x=y", "--model") == ("a30_s130", "/ckpt/x=y")
    for bad in ("nopath", "=p", "a b=/x"):
        with pytest.raises(ValueError, match="--model"):
            parse_named(bad, "--model")


# ------------------------------------------------------------------------------------------------
# Modes: request plans and metrics on hand-made samples
# ------------------------------------------------------------------------------------------------


def problems(n: int) -> list[Problem]:
    return [Problem(f"p{i}", f"q{i}", str(i)) for i in range(n)]


def test_plans_keep_the_three_modes_apart():
    probs = problems(5)
    ids = {p.pid: [1, 2, i] for i, p in enumerate(probs)}
    cfg = EvalConfig(max_new_tokens=7, seed=11)
    (greedy,) = plan_passes(MODES["greedy_pass@1"], probs, ids, cfg)
    assert [r.prompt_id for r in greedy] == [p.pid for p in probs]
    assert {(r.temperature, r.sample_index, r.max_new_tokens) for r in greedy} == {(0.0, 0, 7)}
    (sampling,) = plan_passes(MODES["sampling_pass@8"], probs, ids, cfg)
    assert len(sampling) == 40 and {r.temperature for r in sampling} == {0.6}
    assert len({r.seed for r in sampling}) == 40  # one fixed seed per (problem, sample)
    assert plan_passes(MODES["sampling_pass@8"], probs, ids, cfg) == [sampling]  # reproducible
    nondet = plan_passes(MODES["nondet_proxy_pass@8"], probs, ids, cfg)
    assert len(nondet) == 8 and all(len(p) == 5 for p in nondet)
    assert all(
        {r.temperature for r in p} == {0.0} and {r.sample_index for r in p} == {j}
        for j, p in enumerate(nondet)
    )
    orders = {tuple(r.prompt_id for r in p) for p in nondet}
    assert len(orders) > 1 and all(sorted(o) == sorted(p.pid for p in probs) for o in orders)


def rows_for(samples: dict[str, list[tuple[str | None, bool]]]) -> list[dict]:
    rows = []
    for pid, got in samples.items():
        for i, (answer, correct) in enumerate(got):
            rows.append(
                {
                    "prompt_id": pid,
                    "sample_index": i,
                    "answer": answer,
                    "correct": correct,
                    "has_boxed": answer is not None,
                    "boxed_in_final": answer is not None,
                    "truncated": answer is None,
                    "has_answer": answer is not None,
                    "response_tokens": 10,
                }
            )
    return rows


def test_sampling_metrics_on_hand_made_samples():
    probs = problems(2)
    rows = rows_for(
        {
            "p0": [("0", True)] * 3 + [("9", False)] * 4 + [(None, False)],  # 3/8 correct, majority wrong
            "p1": [("1", True)] * 5 + [("2", False)] * 3,  # 5/8 correct, majority right
        }
    )
    m = cell_metrics(MODES["sampling_pass@8"], probs, rows, EvalConfig(n_boot=500))
    f = m["figures"]
    assert f["mean@8"]["value"] == pytest.approx((3 / 8 + 5 / 8) / 2) == f["pass@1"]["value"]
    assert f["pass@8"]["value"] == 1.0 and f["maj@8"]["value"] == 0.5
    assert m["solved"] == [False, True] and m["headline"] == "mean@8"
    assert m["rates"]["truncated"] == pytest.approx(1 / 16)
    assert all(v["ci95"][0] <= v["value"] <= v["ci95"][1] for v in f.values())


def test_nondet_metrics_and_agreement():
    probs = problems(2)
    rows = rows_for({"p0": [("0", True)] * 8, "p1": [("5", False)] * 7 + [("1", True)]})
    m = cell_metrics(MODES["nondet_proxy_pass@8"], probs, rows, EvalConfig(n_boot=200))
    f = m["figures"]
    assert f["pass@8"]["value"] == 1.0 and f["agreement"]["value"] == 0.5
    assert f["distinct_answers"]["value"] == 1.5 and f["mean@8"]["value"] == pytest.approx((1 + 1 / 8) / 2)
    with pytest.raises(ValueError, match="expected 8"):
        cell_metrics(MODES["nondet_proxy_pass@8"], probs, rows[:-1], EvalConfig())


# ------------------------------------------------------------------------------------------------
# Real tiny models: crash safety, bad input, end to end
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """Tiny format-trained base, a LoRA adapter on it, and a dataset labelled from their greedy answers."""
    root = tmp_path_factory.mktemp("eval-world")
    base = build_tiny_model(root / "base", train_steps=80)
    kwargs = chat_template_kwargs("medium", DEFAULT_CHAT_DATE)
    inputs = [build_input(q) for q in QUESTIONS]

    def greedy_answers(path) -> list:
        backend = HFBackend(path, dtype="float32", batch_size=8)
        reqs = [
            Request(str(i), 0, tuple(encode_prompt(backend.tokenizer, x, **kwargs)), 0.0, 1.0, MAX_TOKENS, 0)
            for i, x in enumerate(inputs)
        ]
        return [grade(c.text, "0", finished=c.finished).answer for c in backend.generate(reqs)]

    b = greedy_answers(base)
    tried = {}
    # the first adapter (seed, scale) that breaks one greedy answer and changes two others to digits: how far a
    # fixed one moves the tiny model's argmax varies with the base's training, so a few are tried in a fixed order
    for seed, scale in [(seed, scale) for scale in (0.08, 0.1, 0.12) for seed in range(3, 11)]:
        adapter = fabricate_lora_adapter(base, root / f"adapter-{seed}-{scale}", seed=seed, scale=scale)
        lo = greedy_answers(resolve_model(adapter, merged_dir=root / "probe-cache", dtype="float32")[0])
        tried[(seed, scale)] = lo
        broken = [i for i in range(len(inputs)) if b[i] is not None and b[i].isdigit() and lo[i] != b[i]][:1]
        fixed = [
            i
            for i in range(len(inputs))
            if lo[i] is not None and lo[i].isdigit() and lo[i] != b[i] and i not in broken
        ][:2]
        if len(broken) == 1 and len(fixed) == 2:
            break
    assert len(broken) == 1 and len(fixed) == 2, f"no adapter changes enough greedy answers: base {b}, {tried}"
    labels = ["100000"] * len(inputs)
    labels[broken[0]] = b[broken[0]]  # base right, lora wrong
    for i in fixed:
        labels[i] = lo[i]  # lora right, base wrong
    dataset = write_jsonl(
        root / "tiny.jsonl", [{"input": x, "label": y} for x, y in zip(inputs, labels, strict=True)]
    )
    greedy = {"base": b, "lora": lo}
    solved = {m: [greedy[m][i] == labels[i] for i in range(len(inputs))] for m in greedy}
    return {"root": root, "base": base, "adapter": adapter, "dataset": dataset, "solved": solved}


def cli_args(world: dict, run_dir: Path, *extra: str) -> list[str]:
    return [
        "--model",
        f"base={world['base']}",
        "--model",
        f"lora={world['adapter']}",
        "--dataset",
        f"tiny={world['dataset']}",
        "--run-dir",
        str(run_dir),
        "--merged-dir",
        str(world["root"] / "merged"),
        "--merge-dtype",
        "float32",
        "--hf-dtype",
        "float32",
        "--backend",
        "hf",
        "--device",
        "cpu",
        "--max-tokens",
        str(MAX_TOKENS),
        "--bootstrap",
        "300",
        *extra,
    ]


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "eval_posthoc.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def cell(run_dir: Path, model: str, mode: str) -> dict:
    return json.loads((run_dir / "cells" / model / "tiny" / mode / "cell.json").read_text())


def samples(run_dir: Path, model: str, mode: str) -> list[dict]:
    path = run_dir / "cells" / model / "tiny" / mode / "samples.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_end_to_end_merge_cache_modes_table_and_delta(world, tmp_path):
    world = {
        **world,
        "root": tmp_path,
        "adapter": Path(shutil.copytree(world["adapter"], tmp_path / "adapter")),
    }
    run_dir = tmp_path / "run"
    merged = world["root"] / "merged"
    n = len(QUESTIONS)
    # 1. first run: merge (cache miss), all three modes for both models
    out = run_cli(cli_args(world, run_dir, "--mode", "all")).stdout
    assert "(merged)" in out and len(list(merged.iterdir())) == 1
    for mode in MODES:
        assert f"[{mode}] lora on tiny" in out and f"[{mode}] base on tiny" in out
    g_base, g_lora = cell(run_dir, "base", "greedy_pass@1"), cell(run_dir, "lora", "greedy_pass@1")
    assert g_base["solved"] == world["solved"]["base"] and g_lora["solved"] == world["solved"]["lora"]
    exp_base, exp_lora = sum(world["solved"]["base"]) / n, sum(world["solved"]["lora"]) / n
    assert g_base["figures"]["pass@1"]["value"] == pytest.approx(exp_base)
    assert g_lora["figures"]["pass@1"]["value"] == pytest.approx(exp_lora)
    rows = samples(run_dir, "lora", "sampling_pass@8")
    assert len(rows) == 8 * n and len({r["seed"] for r in rows}) == 8 * n
    assert set(rows[0]) >= {"prompt_id", "response", "answer", "correct", "truncated", "seed"}
    assert len(samples(run_dir, "base", "nondet_proxy_pass@8")) == 8 * n

    summary = json.loads((run_dir / "summary.json").read_text())
    vs = next(
        c["vs_baseline"] for c in summary["cells"] if c["model"] == "lora" and c["mode"] == "greedy_pass@1"
    )
    pids = g_base["problem_ids"]
    assert vs["delta"] == pytest.approx(exp_lora - exp_base) and vs["delta"] > 0
    assert vs["fixed"] == [
        p
        for p, b, lo in zip(pids, world["solved"]["base"], world["solved"]["lora"], strict=True)
        if lo and not b
    ]
    assert vs["broken"] == [
        p
        for p, b, lo in zip(pids, world["solved"]["base"], world["solved"]["lora"], strict=True)
        if b and not lo
    ]
    assert len(vs["fixed"]) >= 2 and len(vs["broken"]) >= 1
    assert summary["models"]["base"]["boxed"] > 0.5  # the tiny model learned the format
    md = (run_dir / "results.md").read_text()
    for model in ("base", "lora"):  # format rates and the SFT verdict come from the greedy samples
        greedy_rows = samples(run_dir, model, "greedy_pass@1")
        boxed = sum(r["has_boxed"] for r in greedy_rows) / n
        m = summary["models"][model]
        assert m["boxed"] == pytest.approx(boxed) and m["sft_needed"] == (boxed < 0.95)
        assert m["truncated"] == pytest.approx(sum(r["truncated"] for r in greedy_rows) / n)
        verdict = "SFT needed" if boxed < 0.95 else "no SFT needed"
        (row,) = [r for r in md.split("Format check")[1].splitlines() if r.startswith(f"| {model} | {n} |")]
        assert row.startswith(f"| {model} | {n} | {100 * boxed:.1f}% |") and row.endswith(f"| {verdict} |")
    delta_pp = f"{100 * (exp_lora - exp_base):+.1f} pp"
    assert f"| lora | tiny (8; 12.5 pp) | greedy_pass@1 | pass@1 {100 * exp_lora:.1f}% [" in md
    assert f"| {delta_pp} [" in md and "Δ vs base" in md and "SFT" in md
    assert all(mode in md for mode in MODES) and f"fixed {len(vs['fixed'])} ({', '.join(vs['fixed'])})" in md
    print(md)  # shown with -s: the sample table for the README

    # 2. --force: the merged model is a cache hit, greedy output is reproduced exactly
    out = run_cli(cli_args(world, run_dir, "--force")).stdout
    assert "(cache hit)" in out and len(list(merged.iterdir())) == 1
    assert cell(run_dir, "lora", "greedy_pass@1")["solved"] == g_lora["solved"]

    # 3. the adapter changes in place: cache miss, new merged model, the stale lora cell is re-run without
    # --force while the finished base cell is reused untouched
    base_samples = run_dir / "cells" / "base" / "tiny" / "greedy_pass@1" / "samples.jsonl"
    before = base_samples.stat().st_mtime_ns
    fabricate_lora_adapter(world["base"], world["adapter"], seed=11, scale=0.3)
    out = run_cli(cli_args(world, run_dir)).stdout
    assert (
        "[greedy_pass@1] lora on tiny: settings or model changed since the finished cell; re-running" in out
    )
    assert "[greedy_pass@1] base on tiny: finished earlier, skipped" in out and "(merged)" in out
    assert base_samples.stat().st_mtime_ns == before and len(list(merged.iterdir())) == 2


def test_crash_mid_run_loses_no_finished_cell(world, tmp_path):
    cfg = EvalConfig(max_new_tokens=8, backend="hf", n_boot=100)
    calls = {"n": 0}

    def crashing_backend(model_dir):
        backend = HFBackend(model_dir, dtype="float32")
        real = backend.generate

        def generate(requests, desc=""):
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("CUDA error: an illegal memory access (simulated)")
            return real(requests, desc)

        backend.generate = generate
        return backend

    logs: list[str] = []
    kw = {"run_dir": tmp_path / "run", "cfg": cfg, "data_dir": tmp_path, "log": logs.append}
    models = [("base", str(world["base"]))]
    modes = ["greedy_pass@1", "sampling_pass@8"]
    with pytest.raises(RuntimeError, match="illegal memory"):
        run_evaluation(models, [f"tiny={world['dataset']}"], modes, backend_factory=crashing_backend, **kw)
    cells = tmp_path / "run" / "cells" / "base" / "tiny"
    assert (cells / "greedy_pass@1" / "cell.json").is_file()
    assert not (cells / "sampling_pass@8").exists()
    summary = run_evaluation(
        models,
        [f"tiny={world['dataset']}"],
        modes,
        backend_factory=lambda d: HFBackend(d, dtype="float32"),
        **kw,
    )
    assert any("[greedy_pass@1] base on tiny: finished earlier, skipped" in line for line in logs)
    assert [c["mode"] for c in summary["cells"]] == modes


def test_bad_input_exits_2_and_names_it(world, tmp_path, capsys):
    def run(*extra: str, model: str | None = None) -> str:
        args = [
            "--model",
            model or f"lora={world['adapter']}",
            "--dataset",
            f"tiny={world['dataset']}",
            "--run-dir",
            str(tmp_path / "run"),
            "--merged-dir",
            str(tmp_path / "m"),
            "--backend",
            "hf",
            *extra,
        ]
        assert cli.main(args) == 2
        return capsys.readouterr().err

    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "adapter_config.json").write_text((world["adapter"] / "adapter_config.json").read_text())
    err = run(model=f"lora={no_weights}")
    assert "no_weights: LoRA adapter has no weights file" in err and "adapter_model.safetensors" in err

    lost = tmp_path / "lost_base"
    lost.mkdir()
    for f in world["adapter"].iterdir():
        (lost / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((lost / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "/mnt/nowhere/gpt-oss-20b"
    (lost / "adapter_config.json").write_text(json.dumps(cfg))
    err = run(model=f"lora={lost}")
    assert "'/mnt/nowhere/gpt-oss-20b'" in err and "not found" in err and "--base" in err
    hub = run(model="base=nobody/absent-model-xyz")  # a Hub id not in the cache: refused, opt-in named
    assert "nothing is downloaded unless asked: pass --download" in hub

    bad = write_jsonl(
        tmp_path / "nolabel.jsonl", [{"input": "What is 1+1?", "label": "2"}, {"input": "2+2?"}]
    )
    err = run("--dataset", f"bad={bad}")
    assert f"{bad}:2: row has no 'label'" in err
    assert "--chat-date 'yesterday'" in run("--chat-date", "yesterday")
    assert "--baseline 'nobody'" in run("--baseline", "nobody")
    assert not (tmp_path / "run").exists() and not (tmp_path / "m").exists()  # nothing started


def test_help_documents_every_flag():
    parser = cli.build_parser()
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert len(flags) >= 20
    for action in flags:
        assert action.help and len(action.help) > 15, action.option_strings
    text = parser.format_help()
    for needed in (
        "--model",
        "--baseline",
        "--dataset",
        "--mode",
        "--force",
        "--base",
        "--merged-dir",
        "--tensor-parallel-size",
        "--reasoning-effort",
        "--chat-date",
        "--max-tokens",
        "--backend",
    ):
        assert needed in text
