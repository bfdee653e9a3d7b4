"""One launch per run directory: an exclusive `flock` on `.rft_launch.lock`, held by the launcher's process.

The launcher execs OpenRLHF in the same process and keeps the locked descriptor open across the exec, so the
lock lives exactly as long as the training driver: a second launch into the same directories refuses at once,
naming the holder's pid and host, and a run that died (crash, kill -9, reboot) leaves a file nobody holds, which
the next launch (a resume) takes over.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

LOCK_NAME = ".rft_launch.lock"


class LaunchLocked(RuntimeError):
    """Another launch holds the run directory."""


def _holder(fd: int) -> str:
    """The pid, host and start time the holder wrote into the lock file."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    return (f"pid {info.get('pid', '?')} on host {info.get('host', '?')} "
            f"(started {info.get('started', '?')}, run {info.get('run', '?')})")


def acquire(directory: Path, run: str = "") -> int:
    """Lock `directory` for this process; returns the open descriptor (inheritable: it must survive the exec).

    Raises LaunchLocked naming the holder when another live process holds it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise LaunchLocked(
            f"{directory} is in use by another launch: {holder}. Two launches into one run directory write one "
            f"metrics file and one checkpoint directory together; wait for it, stop it, or use another RUN_NAME"
        ) from None
    info = {"pid": os.getpid(), "host": socket.gethostname(), "run": run,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode() + b"\n", 0)
    os.set_inheritable(fd, True)
    return fd


def acquire_all(directories: list[Path], run: str = "") -> list[int]:
    """Lock each distinct directory in turn; on a refusal release those already taken and re-raise."""
    fds: list[int] = []
    seen: set[Path] = set()
    try:
        for d in directories:
            key = d.expanduser().absolute()
            if key in seen:
                continue
            seen.add(key)
            fds.append(acquire(key, run))
    except LaunchLocked:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def check_free(directories: list[Path], run: str = "") -> None:
    """LaunchLocked when a launch holds one of `directories`; takes and releases each lock (a supervising
    launcher's early check, before it builds or starts anything; its child holds the lock for the run)."""
    for fd in acquire_all(directories, run):
        os.close(fd)
