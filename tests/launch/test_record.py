"""rft/launch/record.py: git state, the attempt tag, the chat date."""

from __future__ import annotations

import datetime

import pytest

from rft.launch import record
from tests.support.git import git


def test_git_state_and_tag(repo, monkeypatch):
    state = record.git_state(repo, None)
    assert (state.attempt, state.tag, state.problem) == (7, "attempt-07-start", None)
    assert record.tag_attempt(repo, state) is True
    assert git(repo, "rev-list", "-n", "1", "attempt-07-start") == state.sha
    assert record.tag_attempt(repo, record.git_state(repo, None)) is False  # relaunch at the same commit
    (repo / "train.sh").write_text("echo changed\n")
    dirty = record.git_state(repo, None)
    assert "working tree is dirty" in dirty.problem and "train.sh" in dirty.problem
    with pytest.raises(record.GitError, match="dirty"):
        record.tag_attempt(repo, dirty)
    git(repo, "commit", "-q", "-am", "change")
    moved = record.git_state(repo, None)
    assert "already marks" in moved.problem  # the tag belongs to the earlier configuration
    assert record.git_state(repo, "12").tag == "attempt-12-start"
    git(repo, "checkout", "-q", "-b", "experiment")
    assert "not named attempt-NN-desc" in record.git_state(repo, None).problem


def test_chat_date_is_local_and_warns_near_midnight():
    assert record.chat_date(datetime.datetime(2025, 8, 5, 14, 0)) == ("2025-08-05", None)
    date, warning = record.chat_date(datetime.datetime(2025, 8, 5, 23, 45))
    assert date == "2025-08-05" and "next day's date" in warning


def test_the_record_holds_the_seed_the_command_runs_with():
    from rft.launch.record import build_record, run_seed

    assert run_seed(["python", "-m", "x", "--seed", "42", "--lr", "1", "--seed", "7"]) == 7  # the last one wins
    assert run_seed(["python", "-m", "x"]) == 42  # OpenRLHF's default
    record = build_record("cpu", ["x", "--seed", "11"], "x --seed 11", None, False, {}, {}, "2026-01-01")
    assert record["seed"] == 11


def test_the_dirty_tree_rule_counts_configuration_not_output(repo):
    """Logs, venvs, runs/ and .gpu-check/ never block a launch; a modified tracked script, or an untracked file
    that changes a run, does, and the refusal names it and why."""
    (repo / ".venv-train" / "bin").mkdir(parents=True)
    (repo / ".venv-train" / "bin" / "python").write_text("")
    (repo / ".venv-train.building").mkdir()
    (repo / ".venv-train.building" / "x.py").write_text("")
    for out in ("train.log", "smoke.log", "runs/cpu-1/metrics.jsonl", ".gpu-check/out/gpu_check.json", "notes.md"):
        (repo / out).parent.mkdir(parents=True, exist_ok=True)
        (repo / out).write_text("x\n")
    clean = record.git_state(repo, None)
    assert (clean.problem, clean.dirty) == (None, [])

    (repo / "train.sh").write_text("echo changed\n")
    dirty = record.git_state(repo, None)
    assert dirty.dirty == ["train.sh (tracked, modified, not committed)"]
    assert dirty.problem.startswith("working tree is dirty: 1 uncommitted file(s) that change a run: "
                                    "train.sh (tracked, modified, not committed); commit the configuration first")
    git(repo, "checkout", "-q", "--", "train.sh")
    (repo / "reward.toml").write_text("[judge]\n")
    (repo / "rft" / "extra").mkdir(parents=True)
    (repo / "rft" / "extra" / "mod.txt").write_text("x\n")
    (repo / "patches").mkdir()
    (repo / "patches" / "new.patch").write_text("x\n")
    assert record.git_state(repo, None).dirty == [
        "reward.toml (untracked *.toml)", "patches/new.patch (untracked under patches/)",
        "rft/extra/mod.txt (untracked under rft/)"]
