"""`spare.py watch`: checkpoints found as they settle, one eval_posthoc.py job each on a real tmux server (HF backend,
a tiny model and two real LoRA adapters), the checkpoint table, the best-checkpoint rule, restarts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rft.fixtures.tiny_model import build_tiny_model, fabricate_lora_adapter
from rft.prompts import build_input
from rft.provenance import REPO_ROOT as ROOT
from rft.spare.watch import (
    WatchError,
    best_line,
    job_name,
    parse_eval_options,
    pick_best,
    table_markdown,
)
from rft.train.checkpoints import Checkpoint


def cell(dataset: str, value: float, delta: float | None, lo: float = -0.1, hi: float = 0.1) -> dict:
    c = {
        "dataset": dataset,
        "mode": "greedy_pass@1",
        "headline": "pass@1",
        "n_problems": 8,
        "figures": {"pass@1": {"value": value, "ci95": [max(0.0, value - 0.2), min(1.0, value + 0.2)]}},
        "rates": {"boxed": 1.0},
    }
    if delta is not None:
        c["vs_baseline"] = {"baseline": "base", "metric": "pass@1", "delta": delta, "ci95": [lo, hi]}
    return c


def state_of(values: dict[int, tuple[float, float]], second: dict[int, float] | None = None) -> dict:
    """A watch state: step -> (ood pass@1, its delta); `second`: step -> aime pass@1."""
    ckpts = {}
    for step, (v, d) in values.items():
        cells = [cell("ood", v, d, d - 0.05, d + 0.05)]
        if second:
            cells.append(cell("aime", second[step], 0.0))
        ckpts[f"global_step{step}_hf"] = {"step": step, "status": "evaluated", "cells": cells, "log": "x"}
    return {"baseline": {"name": "base", "cells": [cell("ood", 0.4, None)]}, "checkpoints": ckpts}


def test_best_is_the_highest_headline_ties_to_the_earlier_step():
    state = state_of({20: (0.55, 0.15), 10: (0.55, 0.15), 30: (0.45, 0.05)})
    name, entry, _ = pick_best(state)
    assert (name, entry["step"]) == ("global_step10_hf", 10)
    line = best_line(state)
    assert line.startswith("best: global_step10_hf (step 10): ood greedy_pass@1 pass@1 55.0%")
    assert "above base at 95%" in line and "ties to the earlier step" in line


def test_best_follows_the_selected_cell_and_says_when_it_is_within_noise():
    state = state_of({10: (0.50, 0.10), 20: (0.45, 0.05)}, second={10: 0.2, 20: 0.3})
    assert pick_best(state)[0] == "global_step10_hf"  # the first cell: ood
    assert pick_best(state, "aime greedy_pass@1")[0] == "global_step20_hf"
    assert "not distinguishable from base at 95%" in best_line(state, "aime greedy_pass@1")
    assert best_line({"checkpoints": {}}) == "best: none (no checkpoint evaluated yet)"


def test_table_has_a_row_per_checkpoint_with_intervals_and_a_failed_row():
    state = state_of({10: (0.55, 0.15)})
    state["checkpoints"]["global_step20_hf"] = {
        "step": 20,
        "status": "failed",
        "job_status": "exit 2",
        "log": "logs/j.log",
        "cells": [],
    }
    md = table_markdown(state, "run-a")
    rows = [r for r in md.splitlines() if r.startswith("| ")]
    assert rows[0].startswith("| checkpoint | step | ood greedy_pass@1 | Δ vs base [95% CI] |")
    assert rows[1].startswith("| base (baseline) | - | 40.0% [20.0%, 60.0%] | baseline |")
    assert rows[2].startswith("| global_step10_hf | 10 | 55.0% [35.0%, 75.0%] | +15.0 pp [+10.0, +20.0] |")
    assert rows[3] == "| global_step20_hf | 20 | failed: exit 2, log logs/j.log |"
    assert md.rstrip().splitlines()[-1].startswith("best: global_step10_hf")


def adapter_files(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    (path / "adapter_model.safetensors").write_bytes(b"0")
    return path


def test_eval_options_are_checked_by_eval_posthoc_and_name_the_baseline():
    opts = parse_eval_options(["--model", "base=/m", "--dataset", "ood", "--mode", "sampling_pass@8"], "r.1")
    assert (opts.baseline, opts.run_dir, opts.run_dir_given) == ("base", "runs/watch/r.1", False)
    ckpt = Checkpoint(4, Path("/c/global_step4_hf"))
    tail = ["--model", "step4=/c/global_step4_hf", "--run-dir", "runs/watch/r.1"]
    assert opts.argv(ckpt, "/c/global_step4_hf")[-4:] == tail
    assert job_name("r.1" * 40, ckpt).endswith("-step4") and len(job_name("r.1" * 40, ckpt)) == 64
    with pytest.raises(WatchError, match="baseline"):
        parse_eval_options(["--dataset", "ood"], "r")
    with pytest.raises(WatchError, match="clash"):
        parse_eval_options(["--model", "step4=/m"], "r")
    with pytest.raises(WatchError, match="refuses"):
        parse_eval_options(["--model", "base=/m", "--mode", "nope"], "r")


# ---- end to end: real tmux, real eval_posthoc.py jobs --------------------------------------------------------
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux binary not installed")


def watch_cli(socket_name: str, run: Path, *args: str, eval_opts: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "spare.py"),
            "--host",
            "local",
            "--tmux-socket",
            socket_name,
            "watch",
            str(run),
            *args,
            "--",
            *eval_opts,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=900,
    )


@needs_tmux
@pytest.mark.slow
def test_watch_once_evaluates_both_checkpoints_prints_best_and_skips_them_on_restart(tmp_path, tmux_socket):
    base = build_tiny_model(tmp_path / "base", train_steps=80)
    run = tmp_path / f"run-{uuid.uuid4().hex[:6]}"
    for step, seed in ((4, 3), (8, 5)):
        fabricate_lora_adapter(base, run / "ckpt" / f"global_step{step}_hf", seed=seed, scale=0.08)
    pairs = [(2, 3), (7, 6), (4, 9), (11, 5), (1, 1), (8, 12)]
    data = tmp_path / "tiny.jsonl"
    data.write_text(
        "".join(
            json.dumps({"input": build_input(f"What is {a}+{b}?"), "label": str(a + b)}) + "\n"
            for a, b in pairs
        )
    )
    eval_dir = tmp_path / "eval"
    opts = [
        "--model",
        f"base={base}",
        "--dataset",
        f"tiny={data}",
        "--backend",
        "hf",
        "--device",
        "cpu",
        "--hf-dtype",
        "float32",
        "--merge-dtype",
        "float32",
        "--merged-dir",
        str(tmp_path / "merged"),
        "--max-tokens",
        "16",
        "--bootstrap",
        "200",
        "--run-dir",
        str(eval_dir),
    ]
    proc = watch_cli(tmux_socket, run, "--once", "--settle", "0", eval_opts=opts)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    state = json.loads((run / "checkpoint_eval.json").read_text())
    assert sorted(state["checkpoints"]) == ["global_step4_hf", "global_step8_hf"]
    assert all(e["status"] == "evaluated" for e in state["checkpoints"].values())
    for e in state["checkpoints"].values():
        (c,) = e["cells"]
        assert c["dataset"] == "tiny" and c["mode"] == "greedy_pass@1"
        assert c["vs_baseline"]["baseline"] == "base" and len(c["vs_baseline"]["ci95"]) == 2
        assert (
            c["figures"]["pass@1"]["ci95"][0]
            <= c["figures"]["pass@1"]["value"]
            <= c["figures"]["pass@1"]["ci95"][1]
        )
    # the best line follows the rule on the recorded figures
    values = {e["step"]: e["cells"][0]["figures"]["pass@1"]["value"] for e in state["checkpoints"].values()}
    want = 4 if values[4] >= values[8] else 8
    assert f"best: global_step{want}_hf (step {want})" in proc.stdout
    md = (run / "checkpoint_eval.md").read_text()
    assert "| global_step4_hf | 4 |" in md and "| global_step8_hf | 8 |" in md and "best: " in md
    # one job per checkpoint, through the job machinery (logs, exit status)
    for step in (4, 8):
        name = job_name(run.name, Checkpoint(step, run))
        status = json.loads((ROOT / "logs" / f"{name}.status.json").read_text())
        assert status["exit_code"] == 0
    # restart: nothing pending, no job started, same table
    again = watch_cli(tmux_socket, run, "--once", "--settle", "0", eval_opts=opts)
    assert again.returncode == 0, again.stderr
    assert "started job" not in again.stderr and f"best: global_step{want}_hf" in again.stdout
    # other eval options: the state records different ones, so every checkpoint is evaluated again
    changed = watch_cli(tmux_socket, run, "--once", "--settle", "0", eval_opts=[*opts, "--seed", "7"])
    assert changed.returncode == 0, changed.stderr
    assert (
        "every checkpoint is evaluated again" in changed.stderr and changed.stderr.count("started job") == 2
    )
    # a third checkpoint appears: only it is evaluated
    fabricate_lora_adapter(base, run / "ckpt" / "global_step12_hf", seed=7, scale=0.08)
    third = watch_cli(tmux_socket, run, "--once", "--settle", "0", eval_opts=[*opts, "--seed", "7"])
    assert third.returncode == 0, third.stderr
    assert third.stderr.count("started job") == 1 and "global_step12_hf: started job" in third.stderr
    assert "| global_step12_hf | 12 |" in (run / "checkpoint_eval.md").read_text()


@needs_tmux
def test_a_failing_eval_job_is_recorded_and_not_retried(tmp_path, tmux_socket, monkeypatch):
    config = tmp_path / "spare.toml"
    config.write_text('[env]\nRFT_WATCH_MARK = "from spare.toml"\n')
    monkeypatch.setenv("RFT_SPARE_CONFIG", str(config))
    run = tmp_path / f"run-{uuid.uuid4().hex[:6]}"
    adapter_files(run / "global_step4_hf")  # not a real adapter: eval_posthoc.py fails on it
    opts = [
        "--model",
        f"base={tmp_path / 'missing-base'}",
        "--backend",
        "hf",
        "--run-dir",
        str(tmp_path / "e"),
    ]
    proc = watch_cli(tmux_socket, run, "--once", "--settle", "0", eval_opts=opts)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    entry = json.loads((run / "checkpoint_eval.json").read_text())["checkpoints"]["global_step4_hf"]
    assert entry["status"] == "failed" and entry["job_status"].startswith("exit ")
    assert "| global_step4_hf | 4 | failed: exit" in proc.stdout
    # the job got spare.toml [env], as `spare.py run` jobs do
    name = job_name(run.name, Checkpoint(4, run))
    shown = subprocess.run(
        ["tmux", "-L", tmux_socket, "show-environment", "-t", name, "RFT_WATCH_MARK"], capture_output=True, text=True
    )
    assert shown.stdout.strip() == "RFT_WATCH_MARK=from spare.toml", shown.stderr
    again = watch_cli(tmux_socket, run, "--once", "--settle", "0", eval_opts=opts)
    assert "started job" not in again.stderr and again.returncode == 1
