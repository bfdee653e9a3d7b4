"""rft/monitor/smoke_verdict.py: the SMOKE=1 run's PASS/FAIL verdict on metrics logs.

The probe's numbers are generated per token: a trainer change T, a kept share k, the expected X = k·T and an
engine change E = X + noise inside the band (a good merge), or a planted fault's: wrong sign -X; wrong scale 2X
or X/2; wrong shard at TP 2: the right rank's half of the heads' contribution plus the other half misplaced, a
vector uncorrelated with T (rft.train.sync_probe.compare turns them into the logged scalars)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from rft.launch.supervise import RELAUNCH_FILE, TIMED_OUT
from rft.monitor.smoke_verdict import GPU_FILE, KL_BOUND, checks, verdict
from rft.provenance import REPO_ROOT as ROOT
from rft.train.sync_probe import PROBE_BAND, compare, decisive_norm

FLOOR = 1e-4
TOKENS = 40


def vec(rng: random.Random, size: float) -> list[float]:
    """A per-token change of rms `size`, with a mean of the same order."""
    return [size * (0.5 + rng.gauss(0, 1)) for _ in range(TOKENS)]


def probe(engine: list[float], trainer: list[float], kept: float) -> dict:
    return {**compare(engine, trainer, kept), "lora_sync_probe_floor": FLOOR}


GOOD_T = vec(random.Random(0), 0.02)


def row(step: int, engine_factor: float = 1.0, kept: float = 0.8, **kw) -> dict:
    """One step's metrics; the engine's probe change is engine_factor x the expected kept·T."""
    base = {"global_step": step, "timestamp": 1000.0 + 60 * step, "vllm_kl": 2e-4, "lora_sync_modules": 96.0,
            "lora_sync_expected_modules": 96.0, "lora_sync_seconds": 1.5,
            **probe([engine_factor * kept * t for t in GOOD_T], GOOD_T, kept)}
    return {**base, **kw}


def write(tmp_path: Path, rows: list[dict]) -> Path:
    (tmp_path / "training_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def probe_ok(rows: list[dict]) -> bool:
    return checks({r["global_step"]: r for r in rows})[2][1]


def test_a_good_run_passes(tmp_path):
    passed, text = verdict(write(tmp_path, [row(1), row(2), row(3)]))
    assert passed and text.splitlines()[-1] == "SMOKE PASS", text
    assert "step time: 60.0 s, 60.0 s" in text and "sync seconds: 1.50, 1.50, 1.50" in text
    assert "peak GPU memory per role: n/a" in text


@pytest.mark.parametrize("seed", range(20))
def test_generated_good_merges_pass_and_planted_faults_fail(seed):
    rng = random.Random(seed)
    kept = rng.uniform(0.05, 1.0)
    rms = rng.uniform(1.5, 30.0) * decisive_norm(FLOOR, TOKENS) / (kept * TOKENS ** 0.5)  # decisive
    trainer = vec(rng, rms)
    x = [kept * t for t in trainer]
    noise = vec(rng, 1.0)
    scale = 0.9 * PROBE_BAND * sum(v * v for v in x) ** 0.5 / sum(v * v for v in noise) ** 0.5
    good = [xi + scale * n for xi, n in zip(x, noise, strict=True)]  # ||E - X|| = 0.9 band ||X||
    rest = [row(2), row(3)]
    assert probe_ok([{**row(1), **probe(good, trainer, kept)}, *rest])
    for fault in (-1.0, 2.0, 0.5):  # wrong sign, scaling applied twice, scaling left out (alpha/r = 2)
        assert not probe_ok([{**row(1), **probe([fault * v for v in x], trainer, kept)}, *rest])
    misplaced = vec(rng, rms * kept / 2)  # the other rank's heads on this rank's rows: uncorrelated with T
    shard = [xi / 2 + m for xi, m in zip(x, misplaced, strict=True)]
    assert not probe_ok([{**row(1), **probe(shard, trainer, kept)}, *rest])


def test_an_engine_that_never_moved_fails_and_the_floor_counts():
    assert not probe_ok([row(1, 0.0), row(2), row(3)])  # the adapter never arrived
    assert not checks({1: row(1, lora_sync_probe_floor=0.05), 2: row(2), 3: row(3)})[2][1]  # floor above it all
    # an update too small to tell a good merge from a half one: not a PASS, and it says what to do
    tiny = [t * 0.1 for t in GOOD_T]
    small = checks({1: {**row(1), **probe(tiny, tiny, 1.0)}, 2: row(2), 3: row(3)})[2]
    assert not small[1] and "raise SMOKE_LR" in small[2]


def test_step_one_vllm_kl_is_the_floor_not_a_sync():
    res = checks({1: row(1, vllm_kl=3 * KL_BOUND), 2: row(2), 3: row(3)})[1]
    assert res[1] and "step 1 (before any sync, the floor): 1.50e-01" in res[2]
    assert not checks({1: row(1), 2: row(2), 3: row(3, vllm_kl=3 * KL_BOUND)})[1][1]
    assert not checks({1: row(1), 2: row(2, vllm_kl=None), 3: row(3)})[1][1]


def test_the_gpu_peaks_beside_the_metrics_are_reported(tmp_path):
    (tmp_path / GPU_FILE).write_text(json.dumps({"ray::PolicyModelActor": 2048.0, "VLLM::Worker_TP0": 512.0}))
    _, text = verdict(write(tmp_path, [row(1), row(2), row(3)]))
    assert "peak GPU memory per role: VLLM::Worker_TP0 0.5 GiB, ray::PolicyModelActor 2.0 GiB" in text


def test_each_failure_fails(tmp_path):
    assert not checks({1: row(1, lora_sync_skipped=1.0, lora_sync_modules=None), 2: row(2), 3: row(3)})[0][1]
    assert not checks({1: row(1, lora_sync_modules=90.0), 2: row(2), 3: row(3)})[0][1]  # a module missing
    assert not checks({1: row(1), 2: row(2)})[0][1]  # the run stopped early
    passed, text = verdict(write(tmp_path, [row(1), row(2), row(3)]), run_status=1)
    assert not passed and "FAIL  the training run exited with status 1" in text
    passed, text = verdict(write(tmp_path, [row(1), row(2), row(3)]), run_status=TIMED_OUT)
    assert not passed and "FAIL  the smoke ran past SMOKE_TIMEOUT" in text


def test_the_recipe_lr_statement(tmp_path):
    recipe = {"lora_sync_recipe_lr": 5e-7, "lora_sync_recipe_scale": 5e-7 * 10 / 1e-4}
    # 0.1% of the recipe's smaller update survives bf16: the engine keeps serving the base model
    _, text = verdict(write(tmp_path, [row(1, lora_sync_recipe_kept=1e-3, **recipe), row(2), row(3)]))
    assert "WARN  the recipe's learning rate 5e-07 does NOT move the served policy within 10 steps" in text
    big = [100 * t for t in GOOD_T]  # a trainer change 100x larger: 5% of it clears the floor
    _, text = verdict(write(tmp_path, [{**row(1), **probe(big, big, 1.0), "lora_sync_recipe_kept": 0.9, **recipe},
                                       row(2), row(3)]))
    assert "note  the recipe's learning rate 5e-07 moves the served policy within 10 steps" in text


def test_the_relaunch_must_resume_from_the_saved_step(tmp_path):
    d = write(tmp_path, [row(1)])
    offset = (d / "training_metrics.jsonl").stat().st_size
    (d / RELAUNCH_FILE).write_text(json.dumps({"resumed_from": 1, "offset": offset, "status": 0}))
    with open(d / "training_metrics.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in (row(2), row(3))))
    passed, text = verdict(d)
    assert passed and "PASS  the relaunch resumed from the step-1 DeepSpeed checkpoint" in text, text
    with open(d / "training_metrics.jsonl", "w") as f:  # the relaunch started over from step 1
        f.write("".join(json.dumps(r) + "\n" for r in (row(1), row(1), row(2), row(3))))
    (d / RELAUNCH_FILE).write_text(json.dumps({"resumed_from": 1, "offset": offset, "status": 0}))
    passed, text = verdict(d)
    assert not passed and "first logged step: 1 (want 2)" in text


def test_the_cli_exit_status(tmp_path):
    d = write(tmp_path, [row(1, engine_factor=-1.0), row(2), row(3)])
    res = subprocess.run([sys.executable, "-m", "rft.monitor.smoke_verdict", str(d)], capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 1 and res.stdout.strip().endswith("SMOKE FAIL")
    assert "step 1: FAIL engine moved against the trainer" in res.stdout and "wrong sign" in res.stdout
    assert "step 2: ok" in res.stdout


def test_the_all_gather_is_stated_and_warns_below_its_floor(tmp_path):
    """The first sync's all-gather (rft.train.allgather_probe): info above the floor, WARN below it; never a FAIL."""
    gathered = {"allgather_gb_s": 140.0, "allgather_ranks": 4.0, "allgather_shard_mb": 437.0,
                "allgather_model_gb_s": 360.0, "allgather_floor_gb_s": 28.8}
    passed, text = verdict(write(tmp_path, [row(1, **gathered), row(2), row(3)]))
    assert passed and "info  all-gather: 140.0 GB/s bus rate across 4 actor ranks" in text
    passed, text = verdict(write(tmp_path, [row(1, **{**gathered, "allgather_gb_s": 9.5}), row(2), row(3)]))
    assert passed and "WARN  all-gather: 9.5 GB/s" in text and "BELOW the floor 28.8 GB/s" in text
    assert "all-gather" not in verdict(write(tmp_path, [row(1), row(2), row(3)]))[1]
