"""`make gpu-check`'s trainer phase on the CPU: OpenRLHF's patched Actor under real DeepSpeed ZeRO-3 (gloo, one rank),
built and stepped as the 20b recipe builds it, its figures into a device-figures file the dry run reads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import gpu_check_trainer as gt
from rft.fixtures.patched_openrlhf import stub_env
from rft.plan import step_time
from rft.provenance import REPO_ROOT as ROOT


def run_check(out, site, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_check.py"), "--out", str(out), "--tiny",
                           "--phases", "trainer", "--timeout", "300", *extra],
                          cwd=ROOT, env=stub_env(site) | {"CUDA_VISIBLE_DEVICES": ""}, capture_output=True,
                          text=True, timeout=420)
    return proc, json.loads((out / "gpu_check.json").read_text())


@pytest.fixture(scope="module")
def trainer_run(patched_openrlhf, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check-trainer")
    proc, report = run_check(out, patched_openrlhf)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return report, out


def test_the_patched_actor_under_zero3(trainer_run):
    report, _ = trainer_run
    t = report["phases"]["trainer"]
    assert t["status"] == "ok" and t["backend"] == "gloo" and t["reentrant"]
    assert report["environment"]["deepspeed"] == "0.18.5" and report["environment"]["openrlhf"] == "0.9.3"
    assert [r["phase"] for r in t["rows"]] == ["old_logprob", "reference", "train"]
    assert t["optimizer"]["optimizer"] == "torch AdamW" and "no CUDA" in t["optimizer"]["why"]
    assert 0 < t["lora_params"] < t["params"] and t["loss_finite"] and t["grad_norm"] > 0
    std = t["weight_std"]  # drawn at the config's init scale (0.02), the sinks away from 0
    assert set(std) == {"mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.router.weight", "self_attn.sinks"}
    assert all(0.01 < v < 0.04 for k, v in std.items() if "sinks" not in k) and std["self_attn.sinks"] > 0.1
    for r in t["rows"]:
        assert r["s"] > 0 and r["peak_gib"] >= r["start_gib"] > 0 and r["memory"] == "host RSS"
    train = t["rows"][-1]
    assert train["forward_s"] > 0 and train["backward_s"] > 0 and train["optimizer_s"] >= 0


def test_figures_beside_the_model_and_into_the_dry_run(trainer_run):
    report, out = trainer_run
    beside = report["beside"]
    assert set(beside["model_s"]) == {"old_logprob", "reference", "train"}
    assert set(beside["figures"]) == {"actor_mfu", "forward_mfu"}
    md = (out / "gpu_check.md").read_text()
    assert "## trainer: ok" in md and "model s" in md and "implied device figures" in md
    path = out / "device_figures.toml"
    figures = step_time.load_figures(path)
    assert figures["actor_mfu"] == pytest.approx(beside["figures"]["actor_mfu"], rel=1e-5)
    assert "tiny configuration" in step_time.figures_source(path)
    argv = ["--pretrain", "openai/gpt-oss-20b", "--prompt_max_len", "1024", "--generate_max_len", "4096",
            "--zero_stage", "3", "--lora_rank", "32", "--gradient_checkpointing"]
    res = subprocess.run([sys.executable, "-m", "rft.plan.step_time", "--device-figures", str(path), "--", *argv],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"actor_mfu, forward_mfu from {path} (make gpu-check, tiny configuration" in res.stdout
    stated = subprocess.run([sys.executable, "-m", "rft.plan.step_time", "--", *argv], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert "figures: as stated" in stated.stdout  # the tiny figures predict a far longer step than the stated ones
    minutes = [float(x.stdout.split(" at the stated figures)")[0].rsplit("(", 1)[1]) for x in (res, stated)]
    assert minutes[0] > 10 * minutes[1]


def test_non_reentrant_checkpointing_fails_with_a_frozen_base(patched_openrlhf, tmp_path):
    """Why the recipes set --gradient_checkpointing_use_reentrant (rft.launch.rules.checkpointing_rule): without it
    DeepSpeed 0.18.5 frees the frozen base before the recompute and the first backward raises."""
    proc, report = run_check(tmp_path, patched_openrlhf, "--non-reentrant")
    t = report["phases"]["trainer"]
    assert proc.returncode == 1 and t["status"] == "error" and not t["reentrant"]
    assert "CheckpointError" in t["reason"] and "different metadata" in t["reason"]
    assert [r["phase"] for r in t["rows"]] == ["old_logprob", "reference"]  # the forwards ran; the backward did not


def test_recipe_flags_are_the_scripts():
    """The check's actor flags are the 20b recipe's (train_grpo_20b.sh), reentrant checkpointing included."""
    text = (ROOT / "train_grpo_20b.sh").read_text()
    for flag in ("--zero_stage", "--param_dtype", "--gradient_checkpointing", "--gradient_checkpointing_use_reentrant",
                 "--attn_implementation", "--enable_vllm_is_correction", "--target_modules"):
        assert flag in gt.RECIPE_FLAGS and f"    {flag}" in text, flag
