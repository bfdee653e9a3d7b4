"""spare.py end to end over real ssh (a throwaway sshd on 127.0.0.1) and real tmux, against a second checkout."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.provenance import REPO_ROOT as ROOT
from rft.spare.node import Spare, SpareError, load_config
from rft.spare.watch import RemoteTarget, WatchError
from tests.spare.sshd_fixture import missing_binaries, start_sshd
from tests.support.git import git

# What a checkout needs for spare.py to run on both sides.
CLI_FILES = [
    "spare.py",
    "rft/spare/cli.py",
    "rft/__init__.py",
    "rft/io.py",
    "rft/provenance.py",
    "rft/launch/__init__.py",
    "rft/plan/removed.py",
    "rft/launch/run_pointer.py",
    "rft/eval/__init__.py",
    "rft/eval/passk.py",
    "rft/eval/report.py",
    "rft/spare/__init__.py",
    "rft/train/__init__.py",
    "rft/train/checkpoints.py",
    "rft/spare/node.py",
    "rft/spare/jobs.py",
    "rft/spare/watch.py",
    "rft/spare/job.sh",
    "rft/spare/in_repo.sh",
    "rft/spare/remote_cli.sh",
    "rft/spare/read_file.sh",
    "rft/spare/probe_repo.sh",
    "rft/spare/apply_sync.sh",
    "rft/spare/make_dir.sh",
    "rft/spare/tmux.conf",
]
# Stand-in for the patch series: the exit-code contract of `apply_patches.sh --check` (0 = applied).
FAKE_APPLY_PATCHES = '#!/usr/bin/env bash\n[ "$1" = --check ] && [ -f .patched ]\n'
MISSING = missing_binaries()
needs_ssh = pytest.mark.skipif(bool(MISSING), reason=f"binaries not installed: {', '.join(MISSING)}")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """One sshd for the module; terminated at teardown."""
    if MISSING:
        pytest.skip(f"binaries not installed: {', '.join(MISSING)}")
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def toml_file(path: Path, settings: dict) -> Path:
    """`settings` (strings, integers, lists of strings and an `env` table) written as a spare.toml at `path`."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in settings.items() if k != "env"]
    lines += ["[env]", *(f"{k} = {json.dumps(v)}" for k, v in settings["env"].items())] if "env" in settings else []
    path.write_text("\n".join(lines) + "\n")
    return path


class Setup:
    """A primary checkout, its clone playing the spare, and the spare.toml (in RFT_SPARE_CONFIG) that points the CLI
    at the spare."""

    def __init__(self, tmp: Path, sshd, socket_name: str):
        self.tmp, self.socket = tmp, socket_name
        self.primary, self.spare = tmp / "primary", tmp / "spare"
        self.primary.mkdir()
        for rel in CLI_FILES:
            (self.primary / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, self.primary / rel)
        (self.primary / ".gitignore").write_text("data/*.jsonl\nlogs/\n.patched\n__pycache__/\n")
        (self.primary / "apply_patches.sh").write_text(FAKE_APPLY_PATCHES)
        git(self.primary, "init", "-q", "-b", "main")
        git(self.primary, "add", "-A")
        git(self.primary, "commit", "-q", "-m", "first")
        git(self.primary.parent, "clone", "-q", str(self.primary), str(self.spare))
        self.base = {"host": sshd.destination, "port": sshd.port, "key": str(sshd.key),
                     "ssh_options": list(sshd.client_options), "repo": str(self.spare), "python": sys.executable,
                     "tmux_socket": socket_name}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RFT_SPARE", "RFT_TMUX"))}
        self.env["RFT_SPARE_CONFIG"] = str(self.settings())

    def settings(self, **over: object) -> Path:
        """A spare.toml of the base settings with `over` on top (a new file for each distinct set)."""
        name = "spare-" + "-".join(f"{k}" for k in sorted(over)) + ".toml" if over else "spare.toml"
        return toml_file(self.tmp / name, {**self.base, **over})

    def cli(self, *args: str, settings: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run the primary's spare.py (with `settings` over the base spare.toml)."""
        env = {**self.env, **({"RFT_SPARE_CONFIG": str(self.settings(**settings))} if settings else {})}
        return subprocess.run(
            [sys.executable, str(self.primary / "spare.py"), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=self.tmp,
        )

    def commit(self, repo: Path, name: str, text: str) -> str:
        (repo / name).write_text(text)
        git(repo, "add", name)
        git(repo, "commit", "-q", "-m", f"add {name}")
        return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def setup(tmp_path, sshd, tmux_socket):
    """Fresh primary + spare checkouts and a unique tmux socket (its server killed at teardown)."""
    return Setup(tmp_path, sshd, tmux_socket)


def verify_rows(s: Setup, *args: str) -> tuple[int, dict]:
    proc = s.cli("verify", "--json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, {r["item"]: r for r in json.loads(proc.stdout)}


# --- config (no ssh) -----------------------------------------------------------------------------
def test_config_file_then_env_then_flag(tmp_path):
    cfg = tmp_path / "spare.toml"
    cfg.write_text('host = "rlu@10.0.0.3"\nport = 2222\nrepo = "~/Code/rft"\nssh_options = ["-o", "X=1"]\n')
    c = load_config(cfg, env={})
    assert (c.host, c.port, c.repo, c.ssh_options) == ("rlu@10.0.0.3", 2222, "~/Code/rft", ("-o", "X=1"))
    with pytest.raises(SpareError, match=r"RFT_SPARE_PORT is set but not read: RFT_SPARE_PORT is now "
                                         r"spare.toml: port .*; unset it"):
        load_config(cfg, env={"RFT_SPARE_PORT": "22"})
    cfg.write_text('host = "rlu@10.0.0.3"\nport = 22\nssh_options = "-o \'A=b c\'"\n')
    c = load_config(cfg, env={})
    assert c.port == 22 and c.ssh_options == ("-o", "A=b c") and c.host == "rlu@10.0.0.3"
    assert load_config(cfg, env={}, host="local").is_local
    cfg.write_text('host = "x"\n[env]\nHF_HOME = "/mnt/scratch/hf"\nVLLM_CACHE_DIR = "/mnt/scratch/vllm_cache"\n')
    assert dict(load_config(cfg, env={}).env) == {"HF_HOME": "/mnt/scratch/hf", "VLLM_CACHE_DIR": "/mnt/scratch/vllm_cache"}
    cfg.write_text('host = "x"\n[env]\n"BAD-NAME" = "1"\n')
    with pytest.raises(SpareError, match=r"env\.BAD-NAME must be a variable name"):
        load_config(cfg, env={})
    cfg.write_text('host = "x"\nhots = "typo"\n')
    with pytest.raises(SpareError, match=r"spare\.toml: unknown key 'hots'"):
        load_config(cfg, env={})
    cfg.write_text('host = "x"\nport = "ssh"\n')
    with pytest.raises(SpareError, match=r"spare\.toml: port: port must be an integer"):
        load_config(cfg, env={})
    with pytest.raises(SpareError, match="not found"):
        load_config(tmp_path / "nope.toml", env={})


def test_no_spare_configured_says_how(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RFT_")}
    env["RFT_SPARE_CONFIG"] = str(tmp_path / "empty.toml")
    (tmp_path / "empty.toml").write_text("")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "spare.py"), "ls"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and 'no spare configured: set `host = "user@host"` in spare.toml' in proc.stderr


# --- sync and verify -----------------------------------------------------------------------------
@needs_ssh
@pytest.mark.slow
def test_sync_and_verify_end_to_end(setup):
    s = setup
    head = s.commit(s.primary, "notes.md", "attempt 27\n")
    (s.primary / "data").mkdir()
    (s.primary / "data" / "train.jsonl").write_text('{"input": "1+1?", "label": "2"}\n')
    (s.primary / "data" / "eval_aime.jsonl").write_text('{"input": "x", "label": "7"}\n')
    adapter = s.tmp / "ckpt" / "global_step130_hf"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text('{"r": 32}')
    (adapter / "adapter_model.bin").write_bytes(os.urandom(4096))
    dest = s.tmp / "spare_ckpt" / "global_step130_hf"
    spec = f"{adapter}={dest}"
    for repo in (s.primary, s.spare):
        (repo / ".patched").write_text("")  # the fake apply_patches.sh --check then exits 0

    rc, rows = verify_rows(s, "--adapter", spec)
    assert rc == 1
    assert not rows["git HEAD"]["ok"] and rows["data/train.jsonl"]["spare"] == "missing"
    assert rows[f"adapter {adapter}"]["spare"] == "missing"

    proc = s.cli("sync", "--adapter", spec)
    assert proc.returncode == 0, proc.stderr
    assert "on main (1 commits" in proc.stdout and "data: 2 of 2 files updated" in proc.stdout
    assert git(s.spare, "rev-parse", "HEAD") == head
    assert git(s.spare, "symbolic-ref", "--short", "HEAD") == "main"
    assert git(s.spare, "status", "--porcelain") == ""
    assert (s.spare / "data" / "train.jsonl").read_bytes() == (
        s.primary / "data" / "train.jsonl"
    ).read_bytes()
    assert (dest / "adapter_model.bin").read_bytes() == (adapter / "adapter_model.bin").read_bytes()

    again = s.cli("sync", "--adapter", spec)  # idempotent
    assert again.returncode == 0, again.stderr
    assert "code: up to date" in again.stdout and "data: up to date (2 files)" in again.stdout
    assert "adapter" in again.stdout and again.stdout.rstrip().endswith("up to date")

    rc, rows = verify_rows(s, "--adapter", spec)
    assert rc == 0, [r for r in rows.values() if not r["ok"]]
    assert rows["git HEAD"]["primary"] == head[:12] and rows["torch"]["ok"]
    assert rows["vllm"]["primary"] == rows["vllm"]["spare"]  # "missing" on this CPU box, reported as such
    table = s.cli("verify", "--adapter", spec)
    assert table.returncode == 0 and "primary vs spare" in table.stdout and "MISMATCH" not in table.stdout

    (s.spare / "data" / "train.jsonl").write_text('{"input": "1+1?", "label": "3"}\n')
    (s.spare / ".patched").unlink()
    rc, rows = verify_rows(s)
    assert rc == 1
    bad = sorted(item for item, r in rows.items() if not r["ok"] and not r["warn_only"])
    assert bad == ["data/train.jsonl", "patches"]
    assert rows["patches"]["primary"] == "applied" and rows["patches"]["spare"] == "not applied (exit 1)"
    table = s.cli("verify")
    assert table.returncode == 1 and "MISMATCH: data/train.jsonl, patches" in table.stderr


@needs_ssh
def test_sync_refuses_non_fast_forward(setup):
    s = setup
    s.commit(s.primary, "a.txt", "primary\n")
    spare_head = s.commit(s.spare, "b.txt", "made on the spare\n")
    proc = s.cli("sync", "--no-data")
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "fast-forward impossible" in err[0] and spare_head[:12] in err[0]
    assert git(s.spare, "rev-parse", "HEAD") == spare_head


@needs_ssh
def test_sync_follows_a_new_attempt_branch(setup):
    s = setup
    main_head = git(s.spare, "rev-parse", "HEAD")
    git(s.primary, "checkout", "-q", "-b", "attempt-27-grpo-20b")
    head = s.commit(s.primary, "a27.md", "notes\n")
    proc = s.cli("sync", "--no-data")
    assert proc.returncode == 0, proc.stderr
    assert git(s.spare, "symbolic-ref", "--short", "HEAD") == "attempt-27-grpo-20b"
    assert git(s.spare, "rev-parse", "HEAD") == head
    assert git(s.spare, "rev-parse", "main") == main_head  # the spare's other branch is left alone


@needs_ssh
def test_sync_full_bundle_into_empty_checkout(setup):
    s = setup
    shutil.rmtree(s.spare)
    git(s.tmp, "init", "-q", str(s.spare))
    proc = s.cli("sync")
    assert proc.returncode == 0, proc.stderr
    assert "(empty) ->" in proc.stdout
    assert git(s.spare, "rev-parse", "HEAD") == git(s.primary, "rev-parse", "HEAD")
    assert (s.spare / "spare.py").is_file()


# --- jobs over ssh -------------------------------------------------------------------------------
@needs_ssh
@pytest.mark.slow
def test_run_ls_tail_kill_over_ssh(setup):
    s = setup
    ok = s.cli("run", "ok", "--wait", "--", "bash", "-c", "for i in 1 2 3; do echo step$i; done")
    assert ok.returncode == 0, ok.stderr
    bad = s.cli("run", "bad", "--wait", "--", "python", "-c", "import sys; print('boom'); sys.exit(3)")
    assert bad.returncode == 3, bad.stderr
    assert json.loads((s.spare / "logs" / "ok.status.json").read_text())["exit_code"] == 0
    assert json.loads((s.spare / "logs" / "bad.status.json").read_text())["exit_code"] == 3
    assert (s.spare / "logs" / "bad.log").read_text() == "boom\n"
    assert not (s.primary / "logs").exists()  # everything happened in the spare's checkout

    long = s.cli("run", "long", "--", "sleep", "300")
    assert long.returncode == 0 and f"log {s.spare / 'logs' / 'long.log'}" in long.stdout
    again = s.cli("run", "long", "--", "true")
    assert again.returncode == 2 and "job 'long' is still running" in again.stderr

    jobs = {j["name"]: j for j in json.loads(s.cli("ls", "--json").stdout)}
    assert {n: (j["state"], j["exit_code"]) for n, j in jobs.items()} == {
        "ok": ("exited", 0),
        "bad": ("exited", 3),
        "long": ("running", None),
    }
    assert jobs["long"]["log"] == str(s.spare / "logs" / "long.log")
    table = s.cli("ls")
    assert table.returncode == 0 and "exit 3" in table.stdout and "running" in table.stdout

    tail = s.cli("tail", "ok", "-n", "2")
    assert tail.returncode == 0 and tail.stdout == "step2\nstep3\n"
    follow = s.cli("run", "follow", "--", "bash", "-c", "echo one; sleep 1; echo two; exit 4")
    assert follow.returncode == 0
    tail = s.cli("tail", "follow", "-f")
    assert tail.stdout == "one\ntwo\n" and "[job follow: exit 4]" in tail.stderr

    killed = s.cli("kill", "long")
    assert killed.returncode == 0 and "job long: killed" in killed.stdout
    jobs = {j["name"]: j["state"] for j in json.loads(s.cli("ls", "--json").stdout)}
    assert jobs["long"] == "killed"
    assert (
        s.cli("kill", "nope").stderr.strip() == "spare.py: error: no job named 'nope' here: see `spare.py ls`"
    )


@needs_ssh
def test_job_command_crosses_ssh_exactly(setup):
    s = setup
    tricky = [
        "it's",
        'say "hi"',
        "$HOME",
        "${PATH}",
        "a;b",
        "x && rm -rf /nonexistent",
        "two  spaces",
        "back\\slash",
        "new\nline",
        "*",
        "`id`",
        "$(id)",
        "",
        "--",
        "-n",
        "ünï",
    ]
    script = "import json, sys; print(json.dumps(sys.argv[1:]))"
    proc = s.cli("run", "quote", "--wait", "--", "python", "-c", script, *tricky)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((s.spare / "logs" / "quote.log").read_text()) == tricky


@needs_ssh
def test_helpful_one_line_failures(setup, sshd, tmp_path):
    s = setup
    closed = s.cli("ls", settings={"port": _closed_port()})
    assert closed.returncode == 2 and "cannot reach the spare" in closed.stderr
    assert len(closed.stderr.strip().splitlines()) == 1

    gone = s.cli("ls", settings={"repo": str(tmp_path / "no-such-repo")})
    assert (
        gone.returncode == 2 and f"repo path {tmp_path / 'no-such-repo'} missing on the spare" in gone.stderr
    )
    gone = s.cli("sync", settings={"repo": str(tmp_path / "no-such-repo")})
    assert gone.returncode == 2 and "missing on the spare" in gone.stderr

    no_py = s.cli("ls", settings={"python": "/nonexistent/bin/python"})
    assert no_py.returncode == 2 and "set `python` in spare.toml" in no_py.stderr

    empty = tmp_path / "empty-checkout"
    git(tmp_path, "init", "-q", str(empty))
    no_cli = s.cli("ls", settings={"repo": str(empty)})
    assert no_cli.returncode == 2 and "run `spare.py sync` first" in no_cli.stderr

    gpus = s.cli("gpus")
    if shutil.which("nvidia-smi") is None:  # this box has no NVIDIA driver: one line saying so, nothing more
        assert gpus.returncode == 2 and gpus.stderr.strip().splitlines() == [
            f"spare.py: error: nvidia-smi not found on {socket.gethostname()}: no NVIDIA driver here (no GPUs to show)"
        ]
    else:
        assert gpus.returncode == 0 and "GPUs on" in gpus.stdout

    # the spare's environment has no tmux on PATH
    wrapper = tmp_path / "python-without-tmux"
    wrapper.write_text(f'#!/bin/sh\nPATH=/nonexistent exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    no_tmux = s.cli("run", "x", "--", "/bin/true", settings={"python": str(wrapper)})
    assert no_tmux.returncode == 2
    assert no_tmux.stderr.strip().startswith("spare.py: error: tmux not found on ")


def _closed_port() -> int:
    from rft.cpu.local_ray import free_port

    return free_port()


@needs_ssh
def test_the_watch_reads_a_file_of_the_spares_checkout_over_ssh(setup):
    s = setup
    (s.spare / "logs").mkdir()
    (s.spare / "logs" / "state.json").write_text('{"step": 130}')
    target = RemoteTarget(Spare(load_config(None, env=s.env)))
    assert target.read_json("logs/state.json") == {"step": 130}
    with pytest.raises(WatchError, match="cannot read logs/none.json on the spare"):
        target.read_json("logs/none.json")
    gone = RemoteTarget(Spare(load_config(s.settings(repo=str(s.tmp / "none")), env={})))
    with pytest.raises(SpareError, match="missing on the spare"):  # the in-repo prelude's exit 97
        gone.read_json("logs/state.json")


@needs_ssh
def test_local_mode_runs_on_this_machine(setup):
    s = setup
    proc = s.cli("--host", "local", "run", "here", "--wait", "--", "bash", "-c", "echo local")
    assert proc.returncode == 0, proc.stderr
    assert (s.primary / "logs" / "here.log").read_text() == "local\n"
    assert s.cli("--host", "local", "verify").stderr.startswith("spare.py: error: `verify` compares")
    assert time.time() - json.loads((s.primary / "logs" / "here.job.json").read_text())["started_at"] < 60


@needs_ssh
def test_jobs_get_the_configured_environment_over_ssh(setup, tmp_path):
    """spare.toml [env] on the primary reaches the job on the spare; run --env overrides one variable."""
    s = setup
    caches = {"env": {"HF_HOME": "/mnt/scratch/hf", "VLLM_CACHE_DIR": "/mnt/scratch/vllm_cache"}}
    proc = s.cli("run", "caches", "--wait", "--env", "VLLM_CACHE_DIR=/other/vllm", "--", "bash", "-c",
                 'echo "$HF_HOME $VLLM_CACHE_DIR"', settings=caches)
    assert proc.returncode == 0, proc.stderr
    assert (s.spare / "logs" / "caches.log").read_text() == "/mnt/scratch/hf /other/vllm\n"
    bad = s.cli("run", "x", "--env", "nothing", "--", "true", settings=caches)
    assert bad.returncode == 2 and "--env 'nothing': expected NAME=VALUE" in bad.stderr
