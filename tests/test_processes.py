"""tests/support/processes.py: the suite passes however it is started, and a failing test ends what it started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import group

ROOT = Path(__file__).resolve().parent.parent
SIGINT_TESTS = [
    "tests/monitor/test_stop.py::test_a_driver_that_ignores_sigint_gets_sigterm_at_once",
    "tests/monitor/test_cli.py::test_follow_shows_lines_as_they_arrive",
]


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_sigint_tests_pass_from_a_background_job_of_a_non_interactive_shell():
    """`bash -c 'pytest ... & wait'` starts pytest with SIGINT ignored; the conftest gives it (and its children) back."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(["bash", "-c", '"$@" & wait $!', "bash", sys.executable, "-m", "pytest", "-q",
                          "-p", "no:cacheprovider", *SIGINT_TESTS], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "2 passed" in res.stdout


def test_a_failing_block_ends_the_whole_group_a_bash_wrapper_started():
    """The wrapper's background child (its grandchild here) dies with the group when the block raises."""
    with pytest.raises(AssertionError, match="the test failed"):
        with group(["bash", "-c", 'sleep 300 & echo $!; wait'], stdout=subprocess.PIPE, text=True) as shell:
            grandchild = int(shell.stdout.readline())
            assert alive(grandchild)
            raise AssertionError("the test failed")
    deadline = time.time() + 10
    while alive(grandchild):
        assert time.time() < deadline, f"pid {grandchild} outlived the block"
        time.sleep(0.05)
    assert shell.returncode is not None
