"""Detached jobs on this host under a dedicated tmux server (libtmux), with logs and atomic exit statuses.

Layout under `<repo>/logs/`: `NAME.log` (the job's output, teed), `NAME.job.json` (what was started, when),
`NAME.argv` (the command's argv, NUL-separated, read by `rft/spare/job.sh`), `NAME.status.json` (written
atomically by the wrapper when the command ends: its own exit status). The status file, not tmux, decides
success; tmux only tells whether a job without a status file is still running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from rft.io import atomic_write_bytes, atomic_write_json

PACKAGE_DIR = Path(__file__).resolve().parent
TMUX_CONF = PACKAGE_DIR / "tmux.conf"
WRAPPER = PACKAGE_DIR / "job.sh"
DEFAULT_SOCKET = "rft"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
PYTHON_NAMES = ("python", "python3")


class JobError(RuntimeError):
    """A job operation that cannot proceed; the message is one line saying what to do."""


@dataclass
class JobInfo:
    """One job as `ls` shows it: state is running | exited | killed | lost."""

    name: str
    state: str
    exit_code: int | None
    started_at: float | None
    finished_at: float | None
    log: str
    argv: list[str]

    @property
    def status_text(self) -> str:
        """'running', 'exit 0', 'exit 3', 'killed' or 'lost' (no status file and no live pane)."""
        return f"exit {self.exit_code}" if self.state == "exited" else self.state

    def to_json(self) -> dict:
        """Plain dict for `--json` output."""
        return asdict(self)


def check_name(name: str) -> str:
    """Return `name` if it is a valid job/tmux session name, else raise JobError."""
    if not NAME_RE.match(name):
        raise JobError(
            f"bad job NAME {name!r}: use 1-64 letters, digits, '_' or '-' (tmux forbids '.' and ':')"
        )
    return name


def format_age(seconds: float) -> str:
    """Compact age: 42s, 5m, 3h12m, 2d4h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


SCRATCH = Path("/mnt/scratch")
SCRATCH_CACHES = {  # the guide's spare environment: model and kernel caches on the scratch disk, not the boot disk
    "HF_HOME": "hf",
    "TRANSFORMERS_CACHE": "hf/transformers",
    "HF_DATASETS_CACHE": "hf/datasets",
    "VLLM_CACHE_DIR": "vllm_cache",
}


def job_env(configured: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None,
            scratch: Path = SCRATCH) -> dict[str, str]:
    """Variables a job gets on top of the server's environment: each of SCRATCH_CACHES (under `scratch`) this
    host's environment does not set already, when the scratch disk exists here; then `configured` (spare.toml
    [env], run --env), which wins."""
    environ = os.environ if environ is None else environ
    out = {k: str(scratch / rel) for k, rel in SCRATCH_CACHES.items() if k not in environ} if scratch.is_dir() else {}
    return {**out, **dict(configured or {})}


class JobRunner:
    """Start, list, follow and stop jobs of one repo on this host's dedicated tmux server."""

    def __init__(self, repo: str | os.PathLike, socket_name: str = DEFAULT_SOCKET, python: str | None = None):
        self.repo = Path(repo).resolve()
        self.logs = self.repo / "logs"
        self.socket_name = socket_name
        self.python = python or sys.executable
        self._server = None

    # --- files -------------------------------------------------------------------------------
    def path(self, name: str, suffix: str) -> Path:
        """`logs/NAME<suffix>`."""
        return self.logs / f"{name}{suffix}"

    def _read_json(self, path: Path) -> dict | None:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise JobError(f"{path}: unreadable job file ({e}); move it aside") from None

    # --- tmux ----------------------------------------------------------------------------------
    @property
    def server(self):
        """The libtmux Server on our own socket, configured by rft/spare/tmux.conf when it starts."""
        if self._server is None:
            tmux = shutil.which("tmux")
            if tmux is None:
                raise JobError(f"tmux not found on {socket.gethostname()}: install it (apt-get install tmux)")
            import libtmux

            self._server = libtmux.Server(
                socket_name=self.socket_name, config_file=str(TMUX_CONF), tmux_bin=tmux
            )
        return self._server

    def _session(self, name: str):
        return self.server.sessions.get(session_name=name, default=None)

    @staticmethod
    def _pane_alive(session) -> bool:
        pane = session.active_pane
        return pane is not None and pane.pane_dead != "1"

    # --- queries -------------------------------------------------------------------------------
    def info(self, name: str) -> JobInfo:
        """State of job NAME (JobError if there is no such job)."""
        check_name(name)
        meta = self._read_json(self.path(name, ".job.json"))
        session = self._session(name)
        if meta is None and session is None:
            raise JobError(f"no job named {name!r} here: see `spare.py ls`")
        meta = meta or {}
        # Liveness first, status file second: the wrapper writes the status before its pane dies.
        alive = session is not None and self._pane_alive(session)
        status = self._read_json(self.path(name, ".status.json"))
        if status is not None:
            state = "killed" if status.get("killed") else "exited"
            code, finished = status.get("exit_code"), status.get("finished_at")
        else:
            state = "running" if alive else "lost"
            code, finished = None, None
        return JobInfo(
            name,
            state,
            code,
            meta.get("started_at"),
            finished,
            str(self.path(name, ".log")),
            meta.get("argv", []),
        )

    def list(self) -> list[JobInfo]:
        """Every job with a record under logs/ or a session on our server, oldest first."""
        names = (
            {p.name[: -len(".job.json")] for p in self.logs.glob("*.job.json")}
            if self.logs.is_dir()
            else set()
        )
        names |= {s.session_name for s in self.server.sessions}
        infos = [self.info(n) for n in names if NAME_RE.match(n)]
        return sorted(infos, key=lambda i: (i.started_at or 0, i.name))

    # --- actions -------------------------------------------------------------------------------
    def resolve_argv(self, argv: Sequence[str]) -> list[str]:
        """argv with a bare `python`/`python3` replaced by this environment's Python (absolute path)."""
        argv = list(argv)
        if not argv:
            raise JobError("no command given: spare.py run NAME -- COMMAND [ARGS...]")
        if argv[0] in PYTHON_NAMES:
            argv[0] = self.python
        elif "/" not in argv[0] and shutil.which(argv[0], path=self._job_path()) is None:
            raise JobError(
                f"command {argv[0]!r} not found on {socket.gethostname()} (PATH of the job: {self._job_path()})"
            )
        return argv

    def _job_path(self) -> str:
        return os.pathsep.join([str(Path(self.python).parent), os.environ.get("PATH", os.defpath)])

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> JobInfo:
        """Start argv detached in tmux session NAME, in the repo dir; refuses a NAME still running. The job gets
        `job_env(env)`: the caches on the scratch disk, and `env` (spare.toml [env], run --env) on top."""
        check_name(name)
        extra = job_env(env)
        argv = self.resolve_argv(argv)
        server = self.server
        session = self._session(name)
        if session is not None and self._pane_alive(session) and not self.path(name, ".status.json").exists():
            raise JobError(
                f"job {name!r} is still running: `spare.py kill {name}` first, or pick another NAME"
            )
        if session is not None:
            session.kill()
        self._archive(name)
        self.logs.mkdir(parents=True, exist_ok=True)
        log, status, argv_file = (
            self.path(name, ".log"),
            self.path(name, ".status.json"),
            self.path(name, ".argv"),
        )
        atomic_write_bytes(argv_file, b"".join(a.encode("utf-8") + b"\0" for a in argv))
        atomic_write_json(
            self.path(name, ".job.json"),
            {
                "name": name,
                "argv": argv,
                "cwd": str(self.repo),
                "host": socket.gethostname(),
                "started_at": time.time(),
                "log": str(log),
                "status": str(status),
                "python": self.python,
                "env": extra,
            },
        )
        log.touch()
        if server.is_alive():  # a server started without our config must still keep dead panes
            server.cmd("set-option", "-g", "remain-on-exit", "on")
        wrapper = [shutil.which("bash") or "/bin/bash", str(WRAPPER), str(status), str(log), str(argv_file)]
        env = {**extra, "PATH": self._job_path(), "PYTHONUNBUFFERED": "1", "RFT_JOB_NAME": name}
        server.new_session(
            session_name=name,
            start_directory=str(self.repo),
            window_command=_shell_join(wrapper),
            environment=env,
        )
        return self.info(name)

    def _archive(self, name: str) -> None:
        """Move a finished job's files to logs/old/NAME-<start time>.* so a re-run loses nothing."""
        meta = self._read_json(self.path(name, ".job.json")) or {}
        files = [self.path(name, s) for s in (".log", ".job.json", ".status.json", ".argv")]
        if not any(f.exists() for f in files):
            return
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(meta.get("started_at") or time.time()))
        old = self.logs / "old"
        old.mkdir(parents=True, exist_ok=True)
        for f in files:
            if f.exists():
                f.replace(old / f"{name}-{stamp}{f.name[len(name) :]}")

    def kill(self, name: str) -> JobInfo:
        """Stop job NAME (its tmux session and the processes in it); a job without status is marked killed."""
        info = self.info(name)
        session = self._session(name)
        if session is not None:
            session.kill()
        status = self.path(name, ".status.json")
        if info.state == "running" and not status.exists():
            atomic_write_json(status, {"exit_code": None, "killed": True, "finished_at": time.time()})
        return self.info(name)

    def wait(self, name: str, timeout: float | None = None, poll: float = 0.2) -> JobInfo:
        """Block until job NAME is no longer running (or timeout seconds pass); returns its info."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = self.info(name)
            if info.state != "running" or (deadline is not None and time.monotonic() > deadline):
                return info
            time.sleep(poll)

    def tail(
        self, name: str, lines: int = 20, follow: bool = False, out: TextIO | None = None, poll: float = 0.3
    ) -> JobInfo | None:
        """Write the last `lines` lines of NAME's log; with follow, keep writing until the job ends."""
        out = out or sys.stdout
        check_name(name)
        log = self.path(name, ".log")
        if not log.exists():
            raise JobError(f"no log for job {name!r} at {log}: see `spare.py ls`")
        with open(log, "rb") as f:
            data = f.read()
            keep = data.splitlines(keepends=True)[-lines:] if lines > 0 else []
            out.write(b"".join(keep).decode("utf-8", "replace"))
            out.flush()
            if not follow:
                return None
            while True:
                chunk = f.read()
                if chunk:
                    out.write(chunk.decode("utf-8", "replace"))
                    out.flush()
                    continue
                info = self.info(name)
                if info.state != "running":
                    rest = f.read()
                    if rest:
                        out.write(rest.decode("utf-8", "replace"))
                        out.flush()
                    return info
                time.sleep(poll)

    def attach(self, name: str) -> None:
        """Replace this process with an interactive `tmux attach` to NAME (needs a terminal)."""
        check_name(name)
        if not self.server.has_session(name):
            raise JobError(f"no tmux session {name!r} on socket {self.socket_name!r}: see `spare.py ls`")
        if not sys.stdin.isatty():
            raise JobError("attach needs a terminal (over ssh the CLI uses ssh -t)")
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        tmux = self.server.tmux_bin or "tmux"
        os.execvpe(tmux, [tmux, "-L", self.socket_name, "attach-session", "-t", f"={name}"], env)


def _shell_join(argv: Sequence[str]) -> str:
    """POSIX-quote argv for tmux's `sh -c` (paths only: the job's own argv travels in a NUL-separated file)."""
    import shlex

    return shlex.join(argv)


GPU_QUERY = "index,name,utilization.gpu,memory.used,memory.total"


def parse_nvidia_smi(text: str) -> list[dict]:
    """Rows of `nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits` as dicts."""
    keys = ["index", "name", "util_pct", "mem_used_mib", "mem_total_mib"]
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(keys):
            raise JobError(f"nvidia-smi output line {lineno}: expected {len(keys)} fields, got {line!r}")
        rows.append(dict(zip(keys, parts, strict=True)))
    return rows


def gpu_summary() -> list[dict]:
    """This host's GPUs from nvidia-smi; JobError with a clear message when it is absent or fails."""
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise JobError(
            f"nvidia-smi not found on {socket.gethostname()}: no NVIDIA driver here (no GPUs to show)"
        )
    proc = subprocess.run(
        [smi, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()[:1]
        raise JobError(
            f"nvidia-smi failed on {socket.gethostname()} (exit {proc.returncode}): {' '.join(first)}"
        )
    return parse_nvidia_smi(proc.stdout)
