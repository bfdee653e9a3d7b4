"""rft/train/lora_native.py: native mode's adapter directories (on /dev/shm, i.e. RAM) do not outlive the engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rft.provenance import REPO_ROOT as ROOT
from rft.train.lora_native import NativeLoraSlot


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_new_slot_sweeps_a_killed_engines_directories_and_keeps_live_ones(tmp_path):
    dead = tmp_path / f"rft-lora-{dead_pid()}-abc"
    live = tmp_path / f"rft-lora-{os.getpid()}-def"
    other = tmp_path / "rft-lora-notapid"
    for d in (dead, live, other):
        (d / "v1").mkdir(parents=True)
    slot = NativeLoraSlot(tmp_path)
    assert not dead.exists() and live.exists() and other.exists()
    assert slot.root.name.startswith(f"rft-lora-{os.getpid()}-")
    slot.close()
    assert not slot.root.exists()


def test_a_normal_exit_removes_the_slot(tmp_path):
    code = ("import sys; from rft.train.lora_native import NativeLoraSlot; s = NativeLoraSlot(sys.argv[1]); "
            "(s.root / 'v1').mkdir(); print(s.root)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    root = Path(res.stdout.strip())
    assert root.parent == tmp_path and not root.exists()
