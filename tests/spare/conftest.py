"""Fixtures of the spare-node tests: an isolated tmux server per test."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest


@pytest.fixture
def tmux_socket():
    """A unique tmux socket name; at teardown its server is killed and the socket unlinked, like libtmux's fixtures."""
    name = f"rft_test_{uuid.uuid4().hex[:10]}"
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)
    (Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.geteuid()}" / name).unlink(missing_ok=True)
