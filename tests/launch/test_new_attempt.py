"""new_attempt.sh on a throwaway git repo: creates branch + note, refuses bad input and unsafe states."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rft.provenance import REPO_ROOT as ROOT
from tests.support.git import git

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@x", "GIT_CONFIG_GLOBAL": os.devnull}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "notes").mkdir()
    shutil.copy(ROOT / "new_attempt.sh", tmp_path / "new_attempt.sh")
    shutil.copy(ROOT / "notes" / "attempt-template.md", tmp_path / "notes" / "attempt-template.md")
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "init")
    return tmp_path


def new_attempt(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(repo / "new_attempt.sh"), *args], cwd=repo, env=ENV,
                          capture_output=True, text=True, timeout=30)


def test_creates_branch_and_note(repo):
    res = new_attempt(repo, "29", "lr-1e-6")
    assert res.returncode == 0, res.stderr
    assert git(repo, "branch", "--show-current") == "attempt-29-lr-1e-6"
    note = (repo / "notes" / "attempt-29-lr-1e-6.md").read_text()
    assert note.startswith("# Attempt 29: lr-1e-6\n")
    assert "Branch `attempt-29-lr-1e-6`" in note and "from `main@" in note and "attempt-29-start" in note
    assert "{{" not in note
    for section in ("## Hypothesis", "## Changes", "## Metrics logged", "## Command", "## Baseline", "## Result"):
        assert section in note
    assert not list((repo / "notes").glob(".*"))  # no temp file left


@pytest.mark.parametrize(
    "args,message",
    [(("7", "x"), "NN must be"), (("abc", "x"), "NN must be"), (("1234", "x"), "NN must be"),
     (("29", "Bad_Desc"), "short-desc"), (("29", "-x"), "short-desc"), (("29", "a--b"), "short-desc"),
     (("29", "a" * 41), "short-desc"), (("29",), "expected 2 arguments")],
)
def test_refuses_bad_arguments(repo, args, message):
    res = new_attempt(repo, *args)
    assert res.returncode == 2 and message in res.stderr
    assert git(repo, "branch", "--show-current") == "main"


def test_refuses_existing_branch_and_reused_number(repo):
    git(repo, "branch", "attempt-29-lr-1e-6")
    res = new_attempt(repo, "29", "lr-1e-6")
    assert res.returncode == 2 and "already exists" in res.stderr
    res = new_attempt(repo, "29", "other-idea")
    assert res.returncode == 2 and "attempt 29 already has a branch" in res.stderr
    assert not (repo / "notes" / "attempt-29-other-idea.md").exists()


def test_refuses_dirty_tree(repo):
    (repo / "new_attempt.sh").write_text((repo / "new_attempt.sh").read_text() + "\n# edit\n")
    res = new_attempt(repo, "30", "eps-clip")
    assert res.returncode == 2 and "uncommitted changes" in res.stderr and "new_attempt.sh" in res.stderr
    assert git(repo, "branch", "--list", "attempt-*") == ""
