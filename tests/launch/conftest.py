"""Fixtures of the launch tests: the patched OpenRLHF source, tiny data files, a git repository."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rft.provenance import REPO_ROOT as ROOT
from tests.launch.rows import write_launch_data
from tests.support.git import git


@pytest.fixture(autouse=True)
def launcher_environment():
    """The launcher sets its decisions in os.environ before it execs (RUN_NAME, caches, stand-ins); a test that
    calls it in-process gets this process's environment back afterwards, so no test sees another's."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="session")
def patched_root(pristine_openrlhf_root, tmp_path_factory) -> Path:
    """A copy of the pristine 0.9.3 package with our whole patch series applied by apply_patches.sh."""
    dest = tmp_path_factory.mktemp("openrlhf-patched")
    shutil.copytree(pristine_openrlhf_root / "openrlhf", dest / "openrlhf")
    res = subprocess.run(["bash", str(ROOT / "apply_patches.sh"), "--target", str(dest)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return dest


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """Tiny data files with the names the scripts expect; train and eval disjoint."""
    return write_launch_data(tmp_path_factory.mktemp("data"))


@pytest.fixture
def repo(tmp_path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    (r / "train.sh").write_text("echo hi\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "init")
    git(r, "checkout", "-q", "-b", "attempt-07-tight-clip")
    return r
