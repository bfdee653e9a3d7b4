"""scripts/launch_lib.sh rft_run_forwarding: a signal to a launch script stops what it started, never orphans it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.io import pid_alive

ROOT = Path(__file__).resolve().parents[2]

# A launch script in miniature: an EXIT trap (train_grpo_cpu.sh stops its Ray there) and one forwarded child.
SCRIPT = """
set -euo pipefail
source "{root}/scripts/launch_lib.sh"
trap 'echo "exit trap ran" >&2' EXIT
status=0
rft_run_forwarding {python} -c "$CHILD" || status=$?
echo "child status $status stopped=${{RFT_STOPPED:-}}" >&2
exit "$status"
"""

SLEEPER = "import os, time; print(os.getpid(), flush=True); time.sleep(120)"
STUBBORN = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(os.getpid(), flush=True); "
            "time.sleep(120)")


def alive(pid: int) -> bool:
    if not pid_alive(pid):
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its reaper is gone for our purpose
        return f.read().split(") ", 1)[1][0] != "Z"


@pytest.mark.parametrize(("child", "grace", "sig"), [(SLEEPER, "30", signal.SIGTERM), (SLEEPER, "30", signal.SIGINT),
                                                     (STUBBORN, "1", signal.SIGTERM)])
def test_a_signal_to_the_script_stops_its_child(child, grace, sig, tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text(SCRIPT.format(root=ROOT, python=sys.executable))
    env = {**os.environ, "CHILD": child, "RFT_STOP_GRACE": grace}
    # SIGINT as at a terminal: a shell started in the background (as CI's may be) inherits it ignored, and bash
    # cannot trap a signal ignored at its start
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    child_pid = int(proc.stdout.readline())
    start = time.time()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert time.time() - start < 15
    assert not alive(child_pid), err
    assert "signal received: stopping pid" in err and "exit trap ran" in err
    want = 128 + (signal.SIGKILL if child is STUBBORN else signal.SIGTERM)
    assert proc.returncode == want and f"child status {want} stopped=1" in err


def test_without_a_signal_the_childs_status_comes_back(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text(SCRIPT.format(root=ROOT, python=sys.executable))
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "CHILD": "import sys; sys.exit(3)"})
    assert res.returncode == 3 and "child status 3 stopped=" in res.stderr
