"""A launch that outlives OpenRLHF's driver: a smoke run (sampler beside, verdict after) and the CPU profile.

The launcher runs itself again as a child (`--supervised`, which execs the driver, so the run record's
driver_pid is the driver) and waits for it with signals passed on: a TERM, INT or HUP to the launcher reaches
the driver as SIGTERM, SIGKILL after RFT_STOP_GRACE seconds (default 30), so the driver never outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rft.launch.rules import Profile
from rft.provision.host import gpu_count

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
SAMPLER_MODULE = "rft.monitor.gpu_memory"  # python -m ... OUT_JSON: GPU memory by role while the run lasts
VERDICT_MODULE = "rft.monitor.smoke_verdict"  # python -m ... METRICS_DIR --run-status N: PASS (0) / FAIL (1)
GPU_FILE = "smoke_gpu_memory.json"
RELAUNCH_FILE = "smoke_relaunch.json"  # {"resumed_from", "offset", "status"}: the verdict's resume check
TIMED_OUT = 124  # the status of a launch stopped by its deadline (as timeout(1) reports it)


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


def run_forwarding(cmd: list[str], grace: float, env: dict[str, str] | None = None,
                   deadline: float = 0) -> tuple[int, bool]:
    """Run `cmd`, passing a TERM/INT/HUP on as SIGTERM (SIGKILL after `grace` s); (shell status, stopped).

    With `deadline` > 0 seconds, a child still running then is stopped the same way and the status is TIMED_OUT."""
    state: dict = {"proc": None, "stopped": False, "killer": None, "timed_out": False}

    def kill_later(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(signum: int, _frame, why: str = "signal received") -> None:
        state["stopped"] = state["stopped"] or why == "signal received"
        proc = state["proc"]
        if proc is None or proc.returncode is not None:
            return
        print(f"{why}: stopping pid {proc.pid} (SIGTERM, SIGKILL after {grace:g} s)", file=sys.stderr, flush=True)
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if state["killer"] is None:
            state["killer"] = threading.Timer(grace, kill_later, (proc.pid,))
            state["killer"].daemon = True
            state["killer"].start()

    def expire() -> None:
        state["timed_out"] = True
        stop(signal.SIGTERM, None, f"deadline of {deadline:g} s passed")

    # installed before the child starts: it gets the default dispositions back at exec (SIGINT included, which
    # a background job of a non-interactive shell inherits ignored)
    old = {s: signal.signal(s, stop) for s in FORWARDED}
    timer = threading.Timer(deadline, expire) if deadline > 0 else None
    try:
        state["proc"] = subprocess.Popen(cmd, env=env)
        if state["stopped"]:
            stop(signal.SIGTERM, None)
        if timer is not None:
            timer.daemon = True
            timer.start()
        status = state["proc"].wait()
    finally:
        if timer is not None:
            timer.cancel()
        if state["killer"] is not None:
            state["killer"].cancel()
        for s, handler in old.items():
            signal.signal(s, handler)
    return (TIMED_OUT if state["timed_out"] else shell_status(status)), state["stopped"]


def python_module(module: str, *args: str) -> list[str]:
    """`python -m module args` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def smoke_prepare(metrics: Path) -> None:
    """A smoke verdict on this run alone: its metrics and GPU samples start empty."""
    metrics.mkdir(parents=True, exist_ok=True)
    for name in ("training_metrics.jsonl", GPU_FILE, RELAUNCH_FILE):
        (metrics / name).unlink(missing_ok=True)


def relaunch(metrics: Path, child: list[str], extra: list[str], resumed_from: int, grace: float,
             env: dict[str, str], deadline: float) -> tuple[int, bool]:
    """The smoke's second launch (`child` + `extra`, resuming from step `resumed_from`), with RELAUNCH_FILE
    recording where its metrics start in the log, so the verdict can check the step it resumed from."""
    log = metrics / "training_metrics.jsonl"
    offset = log.stat().st_size if log.is_file() else 0
    print(f"smoke: relaunching to resume from the step-{resumed_from} checkpoint", file=sys.stderr, flush=True)
    status, stopped = run_forwarding(child + extra, grace, env, deadline)
    (metrics / RELAUNCH_FILE).write_text(json.dumps({"resumed_from": resumed_from, "offset": offset,
                                                      "status": status}))
    return status, stopped


def supervise(profile: Profile, child: list[str], env: dict[str, str], smoke: bool,
              after: Callable[[int], None] | None = None, module=python_module,
              resume: tuple[int, list[str]] | None = None, deadline: float = 0) -> int:
    """Run the child launcher with signals forwarded; then `after(status)` and, in a smoke run, the verdict.

    `resume` = (k, flags): a smoke whose first launch saved at step k is relaunched once with `flags` appended.
    `deadline`: seconds both launches together may take (0: none); past it the smoke fails with TIMED_OUT.
    `module(name, *args)` builds the command of a later stage's module (a test gives a stand-in).
    """
    metrics = Path(env.get("METRICS_LOG_DIR") or "runs/metrics")
    sampler = None
    if smoke:
        smoke_prepare(metrics)
        if gpu_count() > 0:
            sampler = subprocess.Popen(module(SAMPLER_MODULE, str(metrics / GPU_FILE)), env=env)
    start = time.monotonic()
    try:
        status, stopped = run_forwarding(child, stop_grace(env), env, deadline)
        if smoke and resume is not None and status == 0 and not stopped:
            left = deadline - (time.monotonic() - start) if deadline > 0 else 0
            status, stopped = relaunch(metrics, child, resume[1], resume[0], stop_grace(env), env,
                                       max(left, 1e-3) if deadline > 0 else 0)
    finally:
        if sampler is not None:
            sampler.terminate()
            sampler.wait()
    if stopped:
        return status
    if after is not None:
        after(status)
    if smoke:
        if status == TIMED_OUT:
            print(f"smoke: stopped after {deadline:g} s (SMOKE_TIMEOUT)", file=sys.stderr, flush=True)
        return subprocess.run(module(VERDICT_MODULE, str(metrics), "--run-status", str(status)), env=env).returncode
    return status
