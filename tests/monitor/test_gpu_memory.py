"""rft/monitor/gpu_memory.py: nvidia-smi's rows read, and the peaks per role (rft/monitor/roles.py) kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rft.monitor.gpu_memory import read_rows
from rft.provenance import REPO_ROOT as ROOT


def titled(title: str) -> subprocess.Popen:
    """A sleeping process whose argv[0] is `title` (as Ray and vLLM set theirs), once its exec has happened."""
    proc = subprocess.Popen(["bash", "-c", f'exec -a "{title}" sleep 30'])
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    deadline = time.time() + 30
    while not cmdline.read_bytes().startswith(title.encode()) and time.time() < deadline:
        time.sleep(0.02)
    return proc


def test_rows_are_read_and_malformed_lines_skipped():
    text = "123, 00000000:17:00.0, 1000\n[N/A], 00000000:17:00.0, 5\nbad line\n45, 00000000:18:00.0, 2.5\n"
    assert read_rows(text) == [(123, "00000000:17:00.0", 1000.0), (45, "00000000:18:00.0", 2.5)]


def test_the_cli_keeps_the_peak_per_role(tmp_path):
    """A stand-in nvidia-smi (no GPU here) that prints a higher row for the actor on its second call."""
    actor = titled("ray::PolicyModelActor.fit")
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/bash\necho x >> "{calls}"\n'
                    f'if (( $(wc -l < "{calls}") == 1 )); then echo "{actor.pid}, 00000000:17:00.0, 1000"; '
                    f'else echo "{actor.pid}, 00000000:17:00.0, 3000"; echo "{actor.pid}, 00000000:17:00.0, 2000"; '
                    'fi\n')
    fake.chmod(0o755)
    out = tmp_path / "peaks.json"
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    proc = subprocess.Popen([sys.executable, "-m", "rft.monitor.gpu_memory", str(out), "--interval", "0.05"],
                            cwd=ROOT, env=env)
    try:
        deadline = time.time() + 30
        while not (calls.is_file() and len(calls.read_text().splitlines()) >= 3) and time.time() < deadline:
            time.sleep(0.05)
        assert json.loads(out.read_text()) == {"ray::PolicyModelActor": 3000.0}
    finally:
        proc.kill()
        proc.wait()
        actor.kill()
        actor.wait()
