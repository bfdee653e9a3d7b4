"""SMOKE=1 on the CPU profile: the same code path as `SMOKE=1 bash train_grpo_20b.sh` (the launcher's smoke
recipe, the sync probe in the patched actor, the save at step 1 and the relaunch that resumes, the verdict), on the
tiny model. With the sync it must PASS; with the sync skipped (--vllm_sync_lora_skip: the adapter never reaches
vLLM) it must FAIL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rft.provenance import REPO_ROOT as ROOT
from tests.support.processes import start_group, stop_group

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def smoke(out_root: Path, inputs: Path, name: str, *flags: str, **extra: str) -> tuple[int, str]:
    """`SMOKE=1 bash train_grpo_cpu.sh` to the end: (exit status, its output)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "METRICS_", "SAMPLES_", "SPIKE_"))}
    env.update(PYTHON=sys.executable, OUT_ROOT=str(out_root), INPUTS=str(inputs), RUN_NAME=name, SMOKE="1",
               TQDM_DISABLE="1", **extra)
    log = out_root / f"{name}.log"
    with open(log, "wb") as f:
        proc = start_group(["bash", str(ROOT / "train_grpo_cpu.sh"), *flags], env=env, cwd=ROOT, stdout=f,
                           stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=1800)
        finally:
            stop_group(proc)
    return rc, log.read_text(errors="replace")


def verdict_lines(out: str) -> list[str]:
    """From `# smoke verdict` to its last line, `SMOKE PASS` or `SMOKE FAIL` (the exit trap prints after it)."""
    lines = out[out.index("# smoke verdict"):].splitlines()
    end = next(i for i, ln in enumerate(lines) if ln.startswith("SMOKE "))
    return lines[: end + 1]


def test_smoke_passes_with_the_sync_and_fails_without_it(tmp_path, inputs):
    rc, out = smoke(tmp_path, inputs, "cpu-sync")
    lines = verdict_lines(out)
    print("\n".join(lines))
    assert rc == 0 and lines[-1] == "SMOKE PASS", out[-6000:]
    assert (tmp_path / "cpu-sync-smoke" / "metrics" / "training_metrics.jsonl").is_file()  # its own directories
    assert any("PASS  every targeted module synced at every step: 3 step(s)" in ln for ln in lines)
    assert any(ln.startswith("  PASS  the engine's probe change reproduces the trainer's") for ln in lines)
    assert any(ln.startswith("  PASS  the relaunch resumed from the step-1 DeepSpeed checkpoint") for ln in lines)
    assert any("(before any sync, the floor)" in ln for ln in lines)
    assert any(ln.startswith("  info  sync seconds: ") for ln in lines)
    # the 2 actor ranks' all-gather (gloo here), stated; the tiny model has no step-time floor
    assert any(ln.startswith("  info  all-gather: ") and "across 2 actor ranks" in ln for ln in lines)

    # the sync-off run in one launch (SMOKE_RESUME_STEP=0): the resume is the first run's to show
    rc, out = smoke(tmp_path, inputs, "cpu-nosync", "--vllm_sync_lora_skip", SMOKE_RESUME_STEP="0")
    lines = verdict_lines(out)
    print("\n".join(lines))
    assert rc == 1 and lines[-1] == "SMOKE FAIL", out[-6000:]
    assert any(ln.startswith("  FAIL  every targeted module synced") and "sync skipped" in ln for ln in lines)
    assert any(ln.startswith("  FAIL  the engine's probe change reproduces the trainer's") and "did not move" in ln
               for ln in lines)
