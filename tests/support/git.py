"""git in a test's scratch repository, with a fixed author and committer."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo: Path, *args: str) -> str:
    """Run `git -C repo ARGS` (raises on failure); its stdout, stripped."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **IDENTITY})  # fmt: skip
    return proc.stdout.strip()
