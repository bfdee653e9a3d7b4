"""The attempt workflow and the run record: git state, the `attempt-NN-start` tag, the chat date, the record file.

A launch refuses a dirty tree (the configuration must be committed: tracked changes and untracked files that change
a run; logs, venvs and run output never count), tags the attempt once (a relaunch finds the
tag at HEAD) and writes `run_record_<UTC>.json` next to the metrics.
"""

from __future__ import annotations

import datetime
import fnmatch
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from rft.io import atomic_write_json, flag_value
from rft.provenance import REPO_ROOT, GitError, git, package_versions


def branch_attempt(branch: str) -> str | None:
    """NN as the branch writes it (attempt-NN-desc), None for any other branch."""
    m = re.match(r"attempt-(\d+)(-|$)", branch)
    return m.group(1) if m else None


def attempt_number(branch: str, env_value: str | None) -> int:
    """NN from ATTEMPT=NN, else from a branch named attempt-NN-desc."""
    if env_value and env_value.strip():
        if not env_value.strip().isdigit():
            raise GitError(f"ATTEMPT={env_value!r} is not a number")
        return int(env_value)
    nn = branch_attempt(branch)
    if nn is None:
        raise GitError(f"branch {branch!r} is not named attempt-NN-desc and ATTEMPT=NN is not set")
    return int(nn)


def attempt_tag(n: int) -> str:
    return f"attempt-{n:02d}-start"


RUN_OUTPUT = (".venv*/", "runs/", "logs/", ".gpu-check/", ".cache/", "*.log", "nohup.out", "__pycache__/",
              "*.pyc")
"""Untracked paths a launch never counts (nor looks into): venvs, logs, run output."""
RUN_INPUT_DIRS = ("rft/", "patches/", "scripts/", "data/")
"""Untracked files under these change a run."""
RUN_INPUT_FILES = ("*.sh", "*.py", "*.patch", "*.toml", "*.json", "*.jsonl", "*.yaml", "*.yml", "*.cfg", "*.ini",
                   "series", "Makefile")
"""Untracked files named so change a run, wherever they are."""


@dataclass
class GitState:
    sha: str
    branch: str
    dirty: list[str]  # what blocks a launch: `path (why)`
    attempt: int | None
    tag: str | None
    problem: str | None  # why a launch would be refused


def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    """`path` (a directory ends in /) matches a pattern by its name, or lies under a pattern that ends in /."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    for pat in patterns:
        if pat.endswith("/"):
            parts = path.rstrip("/").split("/")
            if any(fnmatch.fnmatch(part + "/", pat) for part in (parts if path.endswith("/") else parts[:-1])):
                return True
        elif fnmatch.fnmatch(name, pat):
            return True
    return False


def run_input_reason(path: str) -> str | None:
    """Why an untracked file changes a run (None: it does not, e.g. a log, a venv, run output or a note)."""
    if _matches(path, RUN_OUTPUT):
        return None
    top = next((d for d in RUN_INPUT_DIRS if path.startswith(d)), None)
    if top:
        return f"untracked under {top}"
    pat = next((p for p in RUN_INPUT_FILES if fnmatch.fnmatch(path.rsplit("/", 1)[-1], p)), None)
    return f"untracked {pat}" if pat else None


def blocking_changes(repo: Path) -> list[str]:
    """What keeps the tree from being the run's configuration, `path (why)`: every change to a tracked file, and
    every untracked file that changes a run (run_input_reason); untracked RUN_OUTPUT is never looked into."""
    out = []
    entries = git(repo, "status", "--porcelain", "-z", "--untracked-files=normal").split("\0")
    untracked_dirs = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if code.startswith("R") or code.startswith("C"):
            i += 1  # the rename's source path follows
        if code == "??":
            if _matches(path, RUN_OUTPUT):
                continue
            if path.endswith("/"):
                untracked_dirs.append(path)
            elif (why := run_input_reason(path)) is not None:
                out.append(f"{path} ({why})")
        else:
            what = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "copied", "T": "type changed",
                    "U": "unmerged"}.get(code.strip()[:1], "changed")
            out.append(f"{path} (tracked, {what}, not committed)")
    for d in untracked_dirs:
        for path in git(repo, "ls-files", "-z", "--others", "--exclude-standard", "--", d).split("\0"):
            if path and (why := run_input_reason(path)) is not None:
                out.append(f"{path} ({why})")
    return out


def git_state(repo: Path, env_attempt: str | None) -> GitState:
    """Inspect the repository without changing it."""
    sha = git(repo, "rev-parse", "HEAD")
    branch = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    dirty = blocking_changes(repo)
    problem, n, tag = None, None, None
    try:
        n = attempt_number(branch, env_attempt)
        tag = attempt_tag(n)
        existing = git(repo, "tag", "--list", tag)
        if existing:
            at = git(repo, "rev-list", "-n", "1", tag)
            if at != sha:
                problem = (
                    f"tag {tag} already marks {at[:12]}, not HEAD {sha[:12]}: start a new attempt branch"
                )
    except GitError as e:
        problem = str(e)
    if dirty:
        shown = "; ".join(dirty[:8]) + (f"; and {len(dirty) - 8} more" if len(dirty) > 8 else "")
        problem = (
            f"working tree is dirty: {len(dirty)} uncommitted file(s) that change a run: {shown}; commit the "
            "configuration first (logs, venvs, runs/, .gpu-check/ never count: docs/launching.md, the dirty-tree rule)"
        )
    return GitState(sha, branch, dirty, n, tag, problem)


def tag_attempt(repo: Path, state: GitState) -> bool:
    """Create the attempt tag at HEAD; False if it was already there (a relaunch/resume)."""
    if state.problem or not state.tag:
        raise GitError(state.problem or "no attempt tag")
    if git(repo, "tag", "--list", state.tag):
        return False
    git(repo, "tag", state.tag, state.sha)
    return True


def chat_date(now: datetime.datetime | None = None) -> tuple[str, str | None]:
    """The date gpt-oss's chat template writes into every training prompt, and a warning near midnight.

    OpenRLHF 0.9.3 renders the training prompts once, minutes after launch, with no template kwargs, so the
    template's strftime_now takes the trainer's local date; eval_posthoc.py needs it as --chat-date.
    """
    now = now or datetime.datetime.now()
    date = now.strftime("%Y-%m-%d")
    if now.hour == 23 and now.minute >= 30:
        return date, (
            f"launched at {now:%H:%M} local time: prompts rendered after midnight carry the next day's date; "
            "check the date in the first samples_step file before using chat_date"
        )
    return date, None


def write_run_record(record_dir: Path, record: dict) -> Path:
    """Atomically write run_record_<UTC time>.json into `record_dir`."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = record_dir / f"run_record_{stamp}.json"
    atomic_write_json(path, record)
    return path


def newest_record(record_dir: Path) -> Path | None:
    """The newest run_record_*.json in `record_dir` (names sort by their UTC time), None when there is none."""
    return max(record_dir.glob("run_record_*.json"), default=None)


OPENRLHF_SEED = 42
"""OpenRLHF 0.9.3's default --seed."""


def run_seed(command: list[str]) -> int:
    """The --seed a command runs with (the last one given; OpenRLHF's default when none): every draw of the run
    derives from it (rft/train/seeds.py, docs/reproducibility.md)."""
    value = flag_value(command, "--seed")
    return int(value) if value and value.lstrip("-").isdigit() else OPENRLHF_SEED


def build_record(profile: str, command: list[str], command_text: str, state: GitState | None, tag_created: bool,
                 facts: dict, env: dict[str, str], date: str) -> dict:
    """The run record: what ran, from which commit, on which data, packages, patches and GPUs."""
    return {
        "profile": profile,
        "command": command,
        "command_text": command_text,
        "seed": run_seed(command),  # every draw of the run derives from it (docs/reproducibility.md)
        "git_sha": state.sha if state else None,
        "branch": state.branch if state else None,
        "attempt_tag": state.tag if state else None,
        "tag_created": tag_created,
        "data_sha256": facts.get("data_sha256", {}),
        "packages": package_versions(),
        "patches": facts.get("patches"),
        "gpus": facts.get("gpus"),
        "gpu_topology": facts.get("gpu_topology"),  # `nvidia-smi topo -m` (rft/provision/transport.py)
        "nccl_env": facts.get("nccl_env"),  # every NCCL_* variable the launch saw
        "env": env,
        "host": socket.gethostname(),
        "repo": str(REPO_ROOT),  # the checkout that launched (monitor.sh finds its latest run by it)
        # the launcher execs OpenRLHF's driver in this process: what `monitor.sh --follow --end-on-stop` ends
        "driver_pid": os.getpid(),
        "started_utc": datetime.datetime.now(datetime.UTC).isoformat(),
        "started_local": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "chat_date": date,  # eval_posthoc.py --chat-date: the date rendered into the training prompts
        "lr_preflight": facts.get("lr_preflight"),
        "loss_aggregation": facts.get("loss_aggregation"),  # --loss_aggregation in force (rft.train.loss_aggregation)
        # the step-time model's seconds per phase (rft.plan.step_time), beside the measured time_*_s keys
        "predicted_step_s": facts.get("predicted_step_s"),
        "predicted_step_range_s": facts.get("predicted_step_range_s"),  # [low, high] over the figures' spread
        "rollout_lag": facts.get("rollout_lag", 0),  # --async_train: steps the rollouts trail the policy
    }
