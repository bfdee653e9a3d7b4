"""Fixtures of the launch tests: the patched OpenRLHF source, tiny data files, a git repository."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rft.io import atomic_write_jsonl
from rft.provenance import REPO_ROOT as ROOT
from tests.launch.rows import rows
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
    d = tmp_path_factory.mktemp("data")
    # 16 prompts: long enough for every recipe's LR preflight at its episode count (see test_full_pool_...).
    atomic_write_jsonl(d / "sft_rl_pool.jsonl", rows("pool", 16))
    atomic_write_jsonl(d / "sft_rl_pool_400.jsonl", rows("pool", 400))
    atomic_write_jsonl(d / "probe_set_200_ood.jsonl", [{**r, "datasource": "probe_ood"} for r in rows("ood", 10)])
    atomic_write_jsonl(d / "gsm8k_rl_pool.jsonl", rows("gsm", 300))
    atomic_write_jsonl(d / "gsm8k_eval.jsonl", rows("gsmeval", 10))
    atomic_write_jsonl(d / "sft_train.jsonl", rows("sft", 20, output=True))
    atomic_write_jsonl(d / "sft_dev.jsonl", rows("dev", 5, output=True))
    return d


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
