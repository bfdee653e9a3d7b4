"""Processes a test starts, each the leader of a process group of its own, ended with all it started.

A test that fails stops nothing by itself: `with group(cmd) as proc:` (or `stop_group` in a finalizer) sends SIGKILL to
the whole group on the way out, passing or failing, so a bash wrapper's child or a monitor's loop cannot outlive it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator


def start_group(cmd: list[str], **popen_kwargs) -> subprocess.Popen:
    """`subprocess.Popen(cmd)` in a new session, so that its process group holds it and whatever it starts."""
    return subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGKILL every process of `proc`'s group (the leader included, if it still runs), reap the leader, close pipes."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@contextlib.contextmanager
def group(cmd: list[str], **popen_kwargs) -> Iterator[subprocess.Popen]:
    """`start_group(cmd)` for the block; on leaving it, however it ends, `stop_group`."""
    proc = start_group(cmd, **popen_kwargs)
    try:
        yield proc
    finally:
        stop_group(proc)


@contextlib.contextmanager
def groups(cmds: list[list[str]], **popen_kwargs) -> Iterator[list[subprocess.Popen]]:
    """`group` for several commands at once (the ranks of one world): every one is stopped on leaving the block."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(group(cmd, **popen_kwargs)) for cmd in cmds]


def restore_default_sigint() -> bool:
    """Give this process SIGINT's default back if it was started ignoring it; True when it was.

    A background job of a non-interactive shell starts with SIGINT ignored, and an ignored signal stays ignored
    across fork and exec. Python's own handler is not SIG_IGN, so every child exec'd after this gets SIG_DFL.
    """
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return False
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return True
