"""A launch that outlives OpenRLHF's driver: a smoke run (sampler beside, verdict after) and the CPU profile.

The launcher runs itself again as a child (`--supervised`, which execs the driver, so the run record's
driver_pid is the driver) and waits for it with signals passed on: a TERM, INT or HUP to the launcher reaches
the driver as SIGTERM, SIGKILL after RFT_STOP_GRACE seconds (default 30), so the driver never outlives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from rft.launch.prereqs import gpu_count
from rft.launch.rules import Profile

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SAMPLER_MODULE = "rft.monitor.gpu_memory"  # python -m ... OUT_JSON: GPU memory by role while the run lasts
VERDICT_MODULE = "rft.monitor.smoke_verdict"  # python -m ... METRICS_DIR --run-status N: PASS (0) / FAIL (1)
GPU_FILE = "smoke_gpu_memory.json"


def shell_status(returncode: int) -> int:
    """A Popen return code as a shell reports it: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def stop_grace(env: dict[str, str] | None = None) -> float:
    """RFT_STOP_GRACE: seconds between the SIGTERM passed on and the SIGKILL."""
    value = (os.environ if env is None else env).get("RFT_STOP_GRACE") or "30"
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"RFT_STOP_GRACE={value}: expected a number of seconds") from None


def run_forwarding(cmd: list[str], grace: float, env: dict[str, str] | None = None) -> tuple[int, bool]:
    """Run `cmd`, passing a TERM/INT/HUP on as SIGTERM (SIGKILL after `grace` s); (shell status, stopped)."""
    state: dict = {"proc": None, "stopped": False, "killer": None}

    def kill_later(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(signum: int, _frame) -> None:
        state["stopped"] = True
        proc = state["proc"]
        if proc is None or proc.returncode is not None:
            return
        print(f"signal received: stopping pid {proc.pid} (SIGTERM, SIGKILL after {grace:g} s)", file=sys.stderr,
              flush=True)
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if state["killer"] is None:
            state["killer"] = threading.Timer(grace, kill_later, (proc.pid,))
            state["killer"].daemon = True
            state["killer"].start()

    # installed before the child starts: it gets the default dispositions back at exec (SIGINT included, which
    # a background job of a non-interactive shell inherits ignored)
    old = {s: signal.signal(s, stop) for s in FORWARDED}
    try:
        state["proc"] = subprocess.Popen(cmd, env=env)
        if state["stopped"]:
            stop(signal.SIGTERM, None)
        status = state["proc"].wait()
    finally:
        if state["killer"] is not None:
            state["killer"].cancel()
        for s, handler in old.items():
            signal.signal(s, handler)
    return shell_status(status), state["stopped"]


def python_module(module: str, *args: str) -> list[str]:
    """`python -m module args` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def smoke_prepare(metrics: Path) -> None:
    """A smoke verdict on this run alone: its metrics and GPU samples start empty."""
    metrics.mkdir(parents=True, exist_ok=True)
    for name in ("training_metrics.jsonl", GPU_FILE):
        (metrics / name).unlink(missing_ok=True)


def supervise(profile: Profile, child: list[str], env: dict[str, str], smoke: bool,
              after: Callable[[int], None] | None = None, module=python_module) -> int:
    """Run the child launcher with signals forwarded; then `after(status)` and, in a smoke run, the verdict.

    `module(name, *args)` builds the command of a later stage's module (a test gives a stand-in).
    """
    metrics = Path(env.get("METRICS_LOG_DIR") or "runs/metrics")
    sampler = None
    if smoke:
        smoke_prepare(metrics)
        if gpu_count() > 0:
            sampler = subprocess.Popen(module(SAMPLER_MODULE, str(metrics / GPU_FILE)), env=env)
    try:
        status, stopped = run_forwarding(child, stop_grace(env), env)
    finally:
        if sampler is not None:
            sampler.terminate()
            sampler.wait()
    if stopped:
        return status
    if after is not None:
        after(status)
    if smoke:
        return subprocess.run(module(VERDICT_MODULE, str(metrics), "--run-status", str(status)), env=env).returncode
    return status
