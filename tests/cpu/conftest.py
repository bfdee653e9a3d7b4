"""Fixtures of the CPU-profile tests: the demo task's inputs, made once for every whole-loop test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rft.provenance import REPO_ROOT as ROOT


@pytest.fixture(scope="session")
def inputs(tmp_path_factory) -> Path:
    """The demo task's tiny Qwen2 (taught the answer format) and prompt sets, made once."""
    out = tmp_path_factory.mktemp("cpu-inputs")
    # as train_grpo_cpu.sh makes them (one thread: the same bytes as `make demo`'s model)
    subprocess.run([sys.executable, "-m", "rft.cpu.demo", str(out)], check=True, cwd=ROOT,
                   env={**os.environ, "TORCHDYNAMO_DISABLE": "1", "OMP_NUM_THREADS": "1"})
    return out
