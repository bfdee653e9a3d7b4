"""rft/monitor/smoke_verdict.py: the SMOKE=1 run's PASS/FAIL verdict on metrics logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rft.monitor.smoke_verdict import GPU_FILE, KL_BOUND, checks, verdict
from rft.provenance import REPO_ROOT as ROOT


def row(step: int, **kw) -> dict:
    base = {"global_step": step, "timestamp": 1000.0 + 60 * step, "vllm_kl": 2e-4, "lora_sync_modules": 96.0,
            "lora_sync_expected_modules": 96.0, "lora_sync_seconds": 1.5, "lora_sync_probe_delta": 0.02}
    return {**base, **kw}


def write(tmp_path: Path, rows: list[dict]) -> Path:
    (tmp_path / "training_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_a_good_run_passes(tmp_path):
    passed, text = verdict(write(tmp_path, [row(1), row(2), row(3)]))
    assert passed and text.splitlines()[-1] == "SMOKE PASS"
    assert "step time: 60.0 s, 60.0 s" in text and "sync seconds: 1.50, 1.50, 1.50" in text
    assert "peak GPU memory per role: n/a" in text


def test_the_gpu_peaks_beside_the_metrics_are_reported(tmp_path):
    (tmp_path / GPU_FILE).write_text(json.dumps({"ray::PolicyModelActor": 2048.0, "VLLM::Worker_TP0": 512.0}))
    _, text = verdict(write(tmp_path, [row(1), row(2), row(3)]))
    assert "peak GPU memory per role: VLLM::Worker_TP0 0.5 GiB, ray::PolicyModelActor 2.0 GiB" in text


def test_each_failure_fails(tmp_path):
    assert not checks({1: row(1, lora_sync_skipped=1.0, lora_sync_modules=None), 2: row(2), 3: row(3)})[0][1]
    assert not checks({1: row(1, lora_sync_modules=90.0), 2: row(2), 3: row(3)})[0][1]  # a module missing
    assert not checks({1: row(1), 2: row(2)})[0][1]  # the run stopped early
    assert not checks({1: row(1), 2: row(2, vllm_kl=3 * KL_BOUND), 3: row(3)})[1][1]
    assert not checks({1: row(1), 2: row(2, vllm_kl=None), 3: row(3)})[1][1]
    assert not checks({1: row(1, lora_sync_probe_delta=0.0), 2: row(2), 3: row(3)})[2][1]  # never arrived
    passed, text = verdict(write(tmp_path, [row(1), row(2), row(3)]), run_status=1)
    assert not passed and "FAIL  the training run exited with status 1" in text


def test_the_cli_exit_status(tmp_path):
    d = write(tmp_path, [row(1, lora_sync_probe_delta=0.0), row(2), row(3)])
    res = subprocess.run([sys.executable, "-m", "rft.monitor.smoke_verdict", str(d)], capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 1 and res.stdout.strip().endswith("SMOKE FAIL")
    assert "FAIL  probe log-prob moved > 0.001 after the first update: smallest engine change 0.00e+00" in res.stdout
