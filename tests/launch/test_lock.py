"""rft/launch/lock.py: one launch per run directory, held through the exec into OpenRLHF, free once it dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.launch.lock import LOCK_NAME, LaunchLocked, acquire, acquire_all, check_free
from rft.provenance import REPO_ROOT as ROOT
from tests.support.processes import start_group, stop_group

# Takes the lock, then execs into `sleep` (as the launcher execs into OpenRLHF): the lock must outlive the exec.
HOLDER = """
import os, sys
from pathlib import Path
from rft.launch.lock import acquire
acquire(Path(sys.argv[1]), "first-run")
print("locked", flush=True)
os.execvp("sleep", ["sleep", "60"])
"""


@pytest.fixture
def start_holder(request):
    """Starts a HOLDER on a directory and waits until it holds the lock; every holder is ended at teardown."""

    def start(directory: Path) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        proc = start_group([sys.executable, "-c", HOLDER, str(directory)], stdout=subprocess.PIPE, text=True, env=env)
        request.addfinalizer(lambda: stop_group(proc))
        assert proc.stdout.readline().strip() == "locked"
        return proc

    return start


def test_a_second_launch_is_refused_naming_the_first_and_a_dead_ones_lock_is_taken_over(tmp_path, start_holder):
    proc = start_holder(tmp_path / "metrics")
    try:
        time.sleep(0.5)  # the exec into sleep has happened or is happening; the lock is held either way
        with pytest.raises(LaunchLocked) as err:
            acquire(tmp_path / "metrics")
        assert f"pid {proc.pid} on host {socket.gethostname()}" in str(err.value)
        assert "run first-run" in str(err.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (tmp_path / "metrics" / LOCK_NAME).exists()  # the dead run's file stays, nobody holds it
    fd = acquire(tmp_path / "metrics", "resume")
    assert f'"pid": {os.getpid()}' in (tmp_path / "metrics" / LOCK_NAME).read_text()
    os.close(fd)


def test_acquire_all_releases_what_it_took_when_one_directory_is_held(tmp_path, start_holder):
    proc = start_holder(tmp_path / "ckpt")
    try:
        with pytest.raises(LaunchLocked):
            acquire_all([tmp_path / "metrics", tmp_path / "metrics", tmp_path / "ckpt"])
        os.close(acquire(tmp_path / "metrics"))  # released by the refusal above
    finally:
        proc.kill()
        proc.wait()


def test_the_launcher_refuses_a_second_launch_at_once(tmp_path, start_holder):
    proc = start_holder(tmp_path / "m")
    try:
        env = {**os.environ, "METRICS_LOG_DIR": str(tmp_path / "m"),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        start = time.time()
        res = subprocess.run([sys.executable, "-m", "rft.launch", "--profile", "cpu", "--", "--ckpt_path",
                              str(tmp_path / "ckpt")], capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 1 and time.time() - start < 30
        assert f"launch refused: {tmp_path / 'm'} is in use by another launch: pid {proc.pid}" in res.stderr
        assert "flags:" not in res.stderr  # refused before any check ran
    finally:
        proc.kill()
        proc.wait()


def test_the_cpu_script_refuses_before_it_starts_anything(tmp_path, start_holder):
    """train_grpo_cpu.sh's early check: no inputs built, no Ray started when the run directory is held."""
    proc = start_holder(tmp_path / "runs" / "twice" / "metrics")
    try:
        env = {**os.environ, "RUN_NAME": "twice", "OUT_ROOT": str(tmp_path / "runs"), "PYTHON": sys.executable}
        env["PATH"] = ":".join(p for p in env["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists())
        res = subprocess.run(["bash", str(ROOT / "train_grpo_cpu.sh")], capture_output=True, text=True, env=env,
                             timeout=120)
        assert res.returncode == 1, res.stderr
        assert f"is in use by another launch: pid {proc.pid}" in res.stderr
        assert not (tmp_path / "runs" / "cpu-inputs-qwen2").exists()
    finally:
        proc.kill()
        proc.wait()


def test_check_free_takes_nothing_it_keeps(tmp_path, start_holder):
    """The supervising launcher's early check: refused while held, and it leaves the lock free for its child."""
    proc = start_holder(tmp_path / "held")
    with pytest.raises(LaunchLocked, match=f"pid {proc.pid}"):
        check_free([tmp_path / "free", tmp_path / "held"])
    stop_group(proc)
    check_free([tmp_path / "free", tmp_path / "held"])
    for fd in acquire_all([tmp_path / "free", tmp_path / "held"]):  # nothing was kept: taken again at once
        os.close(fd)
