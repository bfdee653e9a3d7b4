"""What a checkout and its Python environment are: git, package versions, the patch series' state.

One copy for the launch's run record (`rft.launch.record`) and the spare node's `verify` (`rft.spare.node`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
KEY_PACKAGES = ("openrlhf", "vllm", "torch", "deepspeed", "ray", "transformers", "peft", "flash_attn", "rft")
MISSING = "missing"  # the version recorded for a package that is not installed


class GitError(RuntimeError):
    """A git command failed; the message holds the command and git's own error."""


def git(repo: Path, *args: str, check: bool = True) -> str:
    """Run git in `repo` and return its stdout without the trailing newline (GitError on failure)."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.strip()}")
    return proc.stdout.rstrip("\n")


def git_ok(repo: Path, *args: str) -> bool:
    """True when the git command exits 0."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True).returncode == 0


def package_versions(names: Sequence[str] = KEY_PACKAGES) -> dict[str, str]:
    """Installed version of each package, or MISSING."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = MISSING
    return out


@dataclass(frozen=True)
class PatchState:
    """`bash apply_patches.sh --check` for one interpreter: exit status and what it printed."""

    exit_code: int
    output: str

    @property
    def applied(self) -> bool:
        return self.exit_code == 0

    def summary(self) -> str:
        return "applied" if self.applied else f"not applied (exit {self.exit_code})"


def patch_state(repo: Path = REPO_ROOT, python: str = sys.executable, target: str | None = None) -> PatchState:
    """Whether the patch series is applied to the OpenRLHF `python` imports (or to `target`/openrlhf)."""
    script = repo / "apply_patches.sh"
    if not script.is_file():
        return PatchState(127, f"{script} not found")
    cmd = ["bash", str(script), "--check"] + (["--target", target] if target else [])
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", "")]),
               PYTHON=python)
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    return PatchState(proc.returncode, (proc.stdout + proc.stderr).strip())
