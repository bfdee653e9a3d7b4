"""Acting on a STOP verdict (`monitor.sh --follow --end-on-stop`): end the run once its next checkpoint is on disk.

The run stays resumable (the DeepSpeed checkpoint the run waited for is complete; relaunching the same command
resumes from it) and the reason goes into the run record (`stopped_by_monitor`). The driver to end is the
process the run record names (`driver_pid`: the launcher execs OpenRLHF's driver in the same process); it gets
SIGINT (SIGTERM where it ignores SIGINT), OpenRLHF's driver exits and Ray ends the run's actors with it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rft.io import atomic_write_json
from rft.monitor.diagnosis import STOP, Verdict
from rft.train.checkpoints import find_checkpoints

STEP_RE = re.compile(r"^global_step(\d+)(_hf)?$")
DRIVER_MARKERS = ("train_ppo_ray", "rft.launch")


class StopError(RuntimeError):
    """The run cannot be ended as asked; the message says why."""


def stop_verdict(verdicts: Sequence[Verdict]) -> Verdict | None:
    """The first STOP verdict (FAIL verdicts are reported, never acted on)."""
    return next((v for v in verdicts if v.status == STOP), None)


def latest_checkpoint(ckpt_path: Path) -> int | None:
    """The step of the newest complete checkpoint: DeepSpeed's `_actor/latest` (what a relaunch resumes from),
    else the newest `global_stepN_hf` with its weights (adapters-only runs: --disable_ds_ckpt)."""
    latest = ckpt_path / "_actor" / "latest"
    if latest.is_file():
        m = STEP_RE.match(latest.read_text(encoding="utf-8").strip())
        if m:
            return int(m.group(1))
    found = find_checkpoints(ckpt_path) if ckpt_path.is_dir() else []
    return found[-1].step if found else None


@dataclass
class StopPlan:
    """What --end-on-stop decided so far: the step a STOP was first seen at and the checkpoint it waits for."""

    seen_at: int | None = None
    reason: str = ""

    def update(self, verdict: Verdict | None, step: int | None, ckpt_step: int | None) -> str:
        """'run' (no STOP), 'wait' (STOP seen, no checkpoint at or after its step yet) or 'end'."""
        if self.seen_at is None:
            if verdict is None or verdict.status != STOP or step is None:
                return "run"
            self.seen_at, self.reason = step, f"{verdict.check}: {verdict.evidence}"
        return "end" if ckpt_step is not None and ckpt_step >= self.seen_at else "wait"


def driver_pid(record: dict) -> int:
    """The run's driver process on this host, checked by its command line."""
    pid, host = record.get("driver_pid"), record.get("host")
    if not isinstance(pid, int):
        raise StopError(
            "the run record has no driver_pid (the launcher did not record it): end the run by hand"
        )
    if host and host != socket.gethostname():
        raise StopError(f"the run's driver runs on {host}, not here: run the monitor there")
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        raise StopError(f"the run's driver (pid {pid}) is not running") from None
    if not any(m in cmd for m in DRIVER_MARKERS):
        raise StopError(f"pid {pid} is not the run's driver (its command: {cmd[:120]!r})")
    return pid


def ignores_sigint(pid: int) -> bool:
    """Whether the process ignores SIGINT (a background job of a non-interactive shell starts so)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except OSError:
        pass
    return False


def end_run(record_path: Path, plan: StopPlan, ckpt_step: int, timeout: float = 120.0) -> dict:
    """Write the reason into the run record, SIGINT the driver (SIGTERM if it ignores SIGINT), SIGTERM it if
    still there after `timeout`."""
    record = json.loads(record_path.read_text(encoding="utf-8"))
    pid = driver_pid(record)
    sig = signal.SIGTERM if ignores_sigint(pid) else signal.SIGINT
    entry = {
        "reason": plan.reason,
        "step": plan.seen_at,
        "checkpoint": f"global_step{ckpt_step}",
        "resume": "relaunch the same command: it resumes from this checkpoint",
        "driver_pid": pid,
        "signal": sig.name,
        "at_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    record["stopped_by_monitor"] = entry
    atomic_write_json(record_path, record)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # it ended by itself meanwhile
        return entry
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return entry
        time.sleep(0.5)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    return entry


def _gone(pid: int) -> bool:
    """True once `pid` has exited (no /proc entry) or is a zombie awaiting its parent."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
