"""The overlap benchmark finds a run's role processes wherever Ray starts them, pins them and counts their CPU time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchmarks.bench_overlap import MARK, Watcher, marked, role_of

BURN = "import sys, time\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end: pass\n"


def daemon(seconds: float, title: str, token: str | None) -> int:
    """A CPU-burning process that is no child of this one (started through a shell that exits), as Ray's are."""
    env = {k: v for k, v in os.environ.items() if k != MARK}
    if token:
        env[MARK] = token
    out = subprocess.run(
        ["bash", "-c", f'"$0" -c "$1" {seconds} {title} >/dev/null 2>&1 & echo $!', sys.executable, BURN],
        env=env, capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux affinity")
def test_the_watcher_counts_and_pins_only_the_marked_runs_daemonized_processes():
    token = f"test-{os.getpid()}-{time.time_ns()}"
    ours = daemon(3.0, "ray::PolicyModelActor.fit", token)
    other = daemon(3.0, "ray::PolicyModelActor.fit", "another-run")
    unmarked = daemon(3.0, "ray::LLMRayActor.generate", None)
    try:
        assert os.getppid() != ours and ours in marked(token)
        assert other not in marked(token) and unmarked not in marked(token)
        watcher = Watcher(token, {"vllm": 0, "train": 0}, every=0.2)
        watcher.start()
        time.sleep(2.0)
        watcher.stop.set()
        watcher.join()
        last = watcher.samples[-1][1]
        assert last["train"] > 0.5  # the daemon's CPU seconds, on a core of its own
        assert last["vllm"] == 0.0  # the unmarked vLLM-titled process belongs to no run of ours
        assert os.sched_getaffinity(ours) == {0}
        assert os.sched_getaffinity(other) != {0} or os.cpu_count() == 1
    finally:
        for pid in (ours, other, unmarked):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def test_roles_come_from_ray_and_vllm_process_titles():
    assert role_of("ray::PolicyModelActor.fit") == "train"
    assert role_of("VLLM::EngineCore") == "vllm"
    assert role_of("/usr/bin/raylet --node-ip-address=127.0.0.1") is None
