"""The spare node seen from the primary: config, ssh transport, code/data/adapter sync and verification.

Config comes from `spare.toml` (repo root, or `--config` / `$RFT_SPARE_CONFIG`; the keys are `KEYS`), and
`--host` / `--tmux-socket` on the command line. Every remote command is a fixed `sh -c` script plus arguments that are
shell-quoted exactly once (`shlex.join`); CLI calls on the spare carry their argv as base64 JSON.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rft.io import sha256_file
from rft.plan.removed import still_set
from rft.provenance import REPO_ROOT, git, git_ok, package_versions, patch_state

CONFIG_NAME = "spare.toml"
KEYS = ("host", "key", "port", "repo", "python", "ssh_options", "data", "tmux_socket", "env")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Exit codes of our remote scripts, mapped to one-line advice by SpareError.
RC_NO_REPO, RC_NO_CLI, RC_NO_PYTHON, RC_NOT_GIT, RC_NOT_FF, RC_SSH = 97, 98, 99, 96, 93, 255


class SpareError(RuntimeError):
    """A spare operation that cannot proceed; the message is one line saying what to do."""


class RemoteFailed(SpareError):
    """The CLI on the spare failed and has already printed its own one-line error; carries its exit status."""

    def __init__(self, returncode: int):
        super().__init__(f"the spare's CLI exited {returncode}")
        self.returncode = returncode


@dataclass(frozen=True)
class SpareConfig:
    """Where the spare is and how to reach it; host 'local' means this machine, no ssh."""

    host: str | None = None
    key: str | None = None
    port: int | None = None
    repo: str = str(REPO_ROOT)
    python: str = sys.executable
    ssh_options: tuple[str, ...] = ()
    data: tuple[str, ...] = ("data",)
    tmux_socket: str = "rft"
    env: tuple[tuple[str, str], ...] = ()  # spare.toml [env]: variables every job gets (caches on scratch)
    source: str = "defaults"
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def is_local(self) -> bool:
        """True when commands run on this machine."""
        return self.host == "local"


def _coerce(key: str, value: object, where: str) -> object:
    """Validate/convert one config value; errors name `where` (the file and key)."""
    if key == "port":
        try:
            port = int(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise SpareError(f"{where}: port must be an integer, got {value!r}") from None
        if not 0 < port < 65536:
            raise SpareError(f"{where}: port {port} out of range 1-65535")
        return port
    if key == "env":
        if not isinstance(value, dict):
            raise SpareError(f"{where}: env must be a table of NAME = \"value\" (e.g. [env] HF_HOME = \"/mnt/scratch/hf\")")
        for name, val in value.items():
            if not ENV_NAME.fullmatch(name) or not isinstance(val, str):
                raise SpareError(f"{where}: env.{name} must be a variable name with a string value")
        return tuple(sorted(value.items()))
    if key in ("ssh_options", "data"):
        if isinstance(value, str):
            value = shlex.split(value) if key == "ssh_options" else [v for v in value.split(",") if v]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpareError(f"{where}: {key} must be a list of strings")
        return tuple(value)
    if not isinstance(value, str) or not value:
        raise SpareError(f"{where}: {key} must be a non-empty string")
    return value


def load_config(
    path: str | os.PathLike | None = None, env: dict[str, str] | None = None, host: str | None = None
) -> SpareConfig:
    """Config from the TOML file (if any), then an explicit `host` (the --host flag); `env` supplies only
    RFT_SPARE_CONFIG. SpareError names a removed variable still set, with its key."""
    env = os.environ if env is None else env
    if leftovers := [ln for ln in still_set(env) if ln.startswith(("RFT_SPARE", "RFT_TMUX"))]:
        raise SpareError("; ".join(leftovers))
    values: dict[str, object] = {}
    sources = []
    explicit = path or env.get("RFT_SPARE_CONFIG")
    cfg_path = Path(explicit) if explicit else REPO_ROOT / CONFIG_NAME
    if explicit and not cfg_path.is_file():
        raise SpareError(f"config file {cfg_path} not found (from --config / RFT_SPARE_CONFIG)")
    if cfg_path.is_file():
        try:
            raw = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise SpareError(f"{cfg_path}: not valid TOML ({e})") from None
        known = set(KEYS)
        for key, value in raw.items():
            if key not in known:
                raise SpareError(f"{cfg_path}: unknown key {key!r} (known: {', '.join(sorted(known))})")
            values[key] = _coerce(key, value, f"{cfg_path}: {key}")
        sources.append(str(cfg_path))
    if host:
        values["host"] = host
        sources.append("--host")
    return SpareConfig(**values, source=", ".join(sources) or "defaults")  # type: ignore[arg-type]


# --- ssh -----------------------------------------------------------------------------------------
# The scripts run on the spare are files beside this module, each sent as the files it is made of, joined, as
# `sh -c SCRIPT rft ARGS...` (user values cross ssh only as positional args). IN_REPO, the prelude of those
# that run in the spare's checkout, cds to $1 (exit 97 when it is missing) and defines `x`, which expands ~ there.
IN_REPO = "in_repo.sh"
CLI_SCRIPT = (IN_REPO, "remote_cli.sh")
READ_SCRIPT = (IN_REPO, "read_file.sh")
PROBE_SCRIPT = (IN_REPO, "probe_repo.sh")
APPLY_SCRIPT = (IN_REPO, "apply_sync.sh")
MKDIR_SCRIPT = ("make_dir.sh",)


def remote_script(parts: Sequence[str]) -> str:
    """The text of a remote script: its files under rft/spare/, read now and joined in order."""
    here = Path(__file__).resolve().parent
    return "".join((here / name).read_text(encoding="utf-8") for name in parts)


class Spare:
    """Runs things on the spare over ssh with the configured key, port and options."""

    def __init__(self, cfg: SpareConfig):
        if not cfg.host:
            raise SpareError(
                "no spare configured: set `host = \"user@host\"` in spare.toml, or pass --host user@host / --host local"
            )
        self.cfg = cfg

    def ssh_base(self, tty: bool = False) -> list[str]:
        """The ssh argv up to and including the destination."""
        cmd = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
        if self.cfg.key:
            cmd += ["-i", os.path.expanduser(self.cfg.key)]
        if self.cfg.port:
            cmd += ["-p", str(self.cfg.port)]
        return cmd + list(self.cfg.ssh_options) + (["-t"] if tty else []) + [self.cfg.host]  # type: ignore[list-item]

    def where(self) -> str:
        """Human name of the spare for messages."""
        return f"{self.cfg.host}" + (f" port {self.cfg.port}" if self.cfg.port else "")

    def script(
        self,
        script: Sequence[str],
        *args: str,
        input: bytes | None = None,
        capture: bool = True,
        tty: bool = False,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess:
        """Run `sh -c <remote_script(script)> rft args...` on the spare; each arg crosses ssh quoted exactly once."""
        remote = shlex.join(["sh", "-c", remote_script(script), "rft", *args])
        stdin = None if tty or input is not None else subprocess.DEVNULL
        try:
            proc = subprocess.run(
                self.ssh_base(tty) + [remote],
                input=input,
                stdin=stdin,
                stdout=subprocess.PIPE if capture else None,
                stderr=None if tty else subprocess.PIPE,
                timeout=timeout,
            )
        except FileNotFoundError:
            raise SpareError("ssh not found here: install it (apt-get install openssh-client)") from None
        self._raise_for(proc)
        return proc

    def _raise_for(self, proc: subprocess.CompletedProcess) -> None:
        """Turn the transport's own failures into one-line advice; other exit codes pass through."""
        err = (proc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        last = err[-1] if err else "no message"
        rc = proc.returncode
        if rc == RC_SSH:
            raise SpareError(
                f"cannot reach the spare {self.where()} over ssh ({last}): check spare.toml's host, "
                "key, port and ssh_options and that the machine is up"
            )
        if rc == RC_NO_REPO:
            raise SpareError(
                f"repo path {self.cfg.repo} missing on the spare {self.cfg.host}: clone it there "
                "(or `git init` it and run `spare.py sync`), or set `repo` in spare.toml"
            )
        if rc == RC_NOT_GIT:
            raise SpareError(f"{self.cfg.repo} on the spare is not a git checkout: clone the repo there")
        if rc == RC_NO_CLI:
            raise SpareError(f"spare.py missing in {self.cfg.repo} on the spare: run `spare.py sync` first")
        if rc == RC_NO_PYTHON:
            raise SpareError(
                f"python {self.cfg.python} not found on the spare: set `python` in spare.toml to "
                "the environment's python (absolute path)"
            )

    def cli(
        self, argv: Sequence[str], capture: bool = False, tty: bool = False
    ) -> subprocess.CompletedProcess:
        """Run `spare.py --host local ...argv` in the spare's repo with the spare's Python."""
        full = ["--host", "local", "--tmux-socket", self.cfg.tmux_socket, *argv]
        blob = base64.b64encode(json.dumps(full).encode("utf-8")).decode("ascii")
        proc = self.script(CLI_SCRIPT, self.cfg.repo, self.cfg.python, blob, capture=capture, tty=tty)
        if proc.stderr:
            sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
            sys.stderr.flush()
        return proc

    def cli_json(self, argv: Sequence[str]) -> object:
        """Run a `--json` CLI command on the spare and decode its stdout."""
        proc = self.cli(argv, capture=True)
        if proc.returncode != 0:
            if proc.stderr:
                raise RemoteFailed(proc.returncode)
            raise SpareError(f"`spare.py {' '.join(argv)}` failed on the spare (exit {proc.returncode})")
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError:
            raise SpareError(
                f"`spare.py {' '.join(argv)}` on the spare printed no JSON "
                "(is its code older? run `spare.py sync`)"
            ) from None

    def rsync(self, src: str, dest: str, files: Sequence[str] | None = None) -> list[str]:
        """rsync src to dest on the spare over the same ssh options; returns the paths transferred."""
        ssh = self.ssh_base()[:-1]
        cmd = ["rsync", "-a", "--checksum", "-s", "--out-format=%n", "-e", shlex.join(ssh)]
        if files is not None:
            cmd.append("--files-from=-")
        cmd += [src, f"{self.cfg.host}:{dest}"]
        try:
            proc = subprocess.run(
                cmd, input="".join(f + "\n" for f in files or []).encode(), capture_output=True
            )
        except FileNotFoundError:
            raise SpareError("rsync not found here: install it (apt-get install rsync)") from None
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            hint = " (is rsync installed on the spare?)" if proc.returncode in (12, 127) else ""
            raise SpareError(
                f"rsync {src} -> {self.cfg.host}:{dest} failed (exit {proc.returncode}){hint}: "
                f"{err[-1] if err else ''}"
            )
        return [n for n in proc.stdout.decode("utf-8", "replace").splitlines() if n and not n.endswith("/")]


def ignored_data_files(repo: Path, dirs: Sequence[str]) -> list[str]:
    """Gitignored files under the data dirs (what git does not carry), repo-relative and sorted."""
    existing = [d for d in dirs if (repo / d).is_dir()]
    if not existing:
        return []
    out = git(repo, "ls-files", "-o", "-i", "--exclude-standard", "-z", "--", *existing)
    return sorted(p for p in out.split("\0") if p)


@dataclass
class Probe:
    """What the spare's checkout looks like."""

    path: str
    head: str
    branch: str
    refs: list[str]


def probe(spare: Spare) -> Probe:
    """Ask the spare for its absolute repo path, HEAD, current branch and all ref tips."""
    proc = spare.script(PROBE_SCRIPT, spare.cfg.repo)
    if proc.returncode != 0:
        raise SpareError(f"could not read the spare's checkout {spare.cfg.repo} (exit {proc.returncode})")
    lines = proc.stdout.decode().splitlines()
    return Probe(
        path=lines[0], head=lines[1].strip(), branch=lines[2].strip(), refs=[r for r in lines[3:] if r]
    )


def plan_bundle(
    spare_head: str, spare_refs: Sequence[str], repo: Path = REPO_ROOT
) -> tuple[str, list[str] | None]:
    """(local HEAD, bundle negatives) for a fast-forward; negatives None = spare already has the commit."""
    head = git(repo, "rev-parse", "HEAD")
    if spare_head:
        if not git_ok(repo, "cat-file", "-e", f"{spare_head}^{{commit}}"):
            raise SpareError(
                f"spare HEAD {spare_head[:12]} is unknown here (commits made on the spare?): "
                "fast-forward impossible; bring them here or reset the spare's checkout by hand"
            )
        if not git_ok(repo, "merge-base", "--is-ancestor", spare_head, head):
            raise SpareError(
                f"spare HEAD {spare_head[:12]} is not an ancestor of HEAD {head[:12]} here: "
                "fast-forward impossible; check out a descendant here or move the spare by hand"
            )
    if head in spare_refs:
        return head, None
    negatives = sorted(
        {r for r in spare_refs if r != head and git_ok(repo, "merge-base", "--is-ancestor", r, head)}
    )
    return head, negatives


def sync_code(spare: Spare, p: Probe, repo: Path = REPO_ROOT) -> str:
    """Fast-forward the spare's checkout (as probed) to our HEAD via a bundle of what it lacks; a summary."""
    head, negatives = plan_bundle(p.head, p.refs, repo)
    branch = git(repo, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    if p.head == head and (p.branch == branch or not branch):
        return f"code: up to date ({head[:12]}{', ' + branch if branch else ''})"
    size = 0
    if negatives is None:
        proc = spare.script(APPLY_SCRIPT, spare.cfg.repo, head, branch, "none")
    else:
        with tempfile.TemporaryDirectory(prefix="rft-sync-") as tmp:
            bundle = Path(tmp) / "sync.bundle"
            git(repo, "bundle", "create", "-q", str(bundle), "HEAD", *[f"^{n}" for n in negatives])
            data = bundle.read_bytes()
            size = len(data)
            proc = spare.script(APPLY_SCRIPT, spare.cfg.repo, head, branch, "bundle", input=data)
    if proc.returncode == RC_NOT_FF:
        raise SpareError(
            f"spare checkout cannot fast-forward to {head[:12]} (branch {branch or 'detached'} there "
            "has other commits): reconcile it by hand"
        )
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SpareError(
            f"updating the spare's checkout failed (exit {proc.returncode}): "
            f"{err[-1] if err else 'no message'} (local changes there? `git -C {p.path} status`)"
        )
    count = git(repo, "rev-list", "--count", f"{p.head}..{head}") if p.head else "all"
    return (
        f"code: {p.head[:12] or '(empty)'} -> {head[:12]} on {branch or 'detached HEAD'} "
        f"({count} commits, bundle {size / 1024:.1f} KiB)"
    )


def sync_data(spare: Spare, spare_path: str, repo: Path = REPO_ROOT) -> str:
    """rsync the gitignored data files to the same relative paths on the spare; returns a summary."""
    files = ignored_data_files(repo, spare.cfg.data)
    if not files:
        return f"data: no gitignored files under {', '.join(spare.cfg.data)}"
    sent = spare.rsync(f"{repo}/", f"{spare_path}/", files)
    return (
        f"data: {len(sent)} of {len(files)} files updated"
        if sent
        else f"data: up to date ({len(files)} files)"
    )


def parse_adapter(spec: str) -> tuple[Path, str]:
    """`SRC[=DEST]` -> (local dir, spare path); DEST defaults to SRC's absolute path (same layout)."""
    src, _, dest = spec.partition("=")
    path = Path(src).expanduser().resolve()
    if not path.exists():
        raise SpareError(f"--adapter {spec}: {path} does not exist here")
    return path, dest or str(path)


def sync_adapter(spare: Spare, spec: str) -> str:
    """rsync one LoRA adapter (a directory or file) to the spare; returns a summary."""
    src, dest = parse_adapter(spec)
    if src.is_dir():
        spare.script(MKDIR_SCRIPT, dest)
        sent = spare.rsync(f"{src}/", f"{dest}/")
    else:
        spare.script(MKDIR_SCRIPT, str(Path(dest).parent))
        sent = spare.rsync(str(src), dest)
    return f"adapter {src} -> {dest}: " + (f"{len(sent)} files updated" if sent else "up to date")


def sync(spare: Spare, adapters: Sequence[str] = (), data: bool = True, repo: Path = REPO_ROOT) -> list[str]:
    """Code (bundle, fast-forward), then data files, then adapters; one summary line each."""
    for spec in adapters:
        parse_adapter(spec)  # fail before touching anything
    lines = []
    if git(repo, "status", "--porcelain", "--untracked-files=no"):
        lines.append("warning: uncommitted changes here are not synced (commit them first)")
    p = probe(spare)
    lines.append(sync_code(spare, p, repo))
    if data:
        lines.append(sync_data(spare, p.path, repo))
    lines += [sync_adapter(spare, spec) for spec in adapters]
    return lines


# --- facts and verify ----------------------------------------------------------------------------
def tree_digest(path: Path) -> str:
    """'N files, sha256' over a file or every file under a directory (relative names + contents)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(path) if f != path else f.name}\0{sha256_file(f)}\n".encode())
    return f"{len(files)} files, {h.hexdigest()[:16]}" if path.exists() else "missing"


def local_facts(
    data_dirs: Sequence[str] = ("data",), adapters: Sequence[str] = (), repo: Path = REPO_ROOT
) -> dict:
    """This host's side of `verify`: git HEAD, data checksums, package versions, patches, adapters."""
    return {
        "host": socket.gethostname(),
        "repo": str(repo),
        "git_head": git(repo, "rev-parse", "HEAD", check=False) or "none",
        "worktree": _worktree(repo),
        "data": {f: sha256_file(repo / f) for f in ignored_data_files(repo, data_dirs)},
        "packages": package_versions(),
        "patches": patch_state(repo).summary(),
        "adapters": [tree_digest(Path(a).expanduser()) for a in adapters],
    }


def _worktree(repo: Path) -> str:
    changed = git(repo, "status", "--porcelain", "--untracked-files=no", check=False)
    return f"{len(changed.splitlines())} changed files" if changed else "clean"


@dataclass
class Row:
    """One line of the verify table."""

    item: str
    primary: str
    spare: str
    ok: bool
    warn_only: bool = False


def compare_facts(primary: dict, spare: dict, adapter_labels: Sequence[str] = ()) -> list[Row]:
    """Primary vs spare, row by row; a row is not ok when the values differ (or patches are not applied)."""
    rows = [
        Row(
            "git HEAD",
            primary["git_head"][:12],
            spare["git_head"][:12],
            primary["git_head"] == spare["git_head"] and primary["git_head"] != "none",
        )
    ]
    rows.append(
        Row(
            "working tree",
            primary["worktree"],
            spare["worktree"],
            primary["worktree"] == spare["worktree"] == "clean",
            warn_only=True,
        )
    )
    for name in sorted(set(primary["data"]) | set(spare["data"])):
        a, b = primary["data"].get(name), spare["data"].get(name)
        if a is None:  # produced on the spare (e.g. eval output): not a mismatch of synced data
            rows.append(Row(name, "-", b[:12], False, warn_only=True))
        else:
            rows.append(Row(name, a[:12], b[:12] if b else "missing", a == b))
    for pkg in sorted(set(primary["packages"]) | set(spare["packages"])):
        a, b = primary["packages"].get(pkg, "missing"), spare["packages"].get(pkg, "missing")
        rows.append(Row(pkg, a, b, a == b))
    a, b = primary["patches"], spare["patches"]
    rows.append(Row("patches", a, b, a == b and not a.startswith("not applied")))
    for label, x, y in zip(adapter_labels, primary["adapters"], spare["adapters"], strict=True):
        rows.append(Row(f"adapter {label}", x, y, x == y and x != "missing"))
    return rows


def render_rows(rows: Sequence[Row], primary_name: str, spare_name: str) -> None:
    """Print the verify table with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="primary vs spare")
    for col in ("item", f"primary ({primary_name})", f"spare ({spare_name})", "status"):
        table.add_column(col)
    for r in rows:
        status = "[green]OK[/]" if r.ok else ("[yellow]WARN[/]" if r.warn_only else "[red]MISMATCH[/]")
        table.add_row(r.item, r.primary, r.spare, status)
    Console(width=max(120, Console().width)).print(table)


def verify(spare: Spare, adapters: Sequence[str] = (), repo: Path = REPO_ROOT) -> list[Row]:
    """Collect facts here and on the spare and compare them."""
    pairs = [parse_adapter(a) for a in adapters]
    mine = local_facts(spare.cfg.data, [str(s) for s, _ in pairs], repo)
    argv = [
        "facts",
        "--json",
        *[f"--data-dir={d}" for d in spare.cfg.data],
        *[f"--adapter={d}" for _, d in pairs],
    ]
    theirs = spare.cli_json(argv)
    return compare_facts(mine, theirs, [str(s) for s, _ in pairs])  # type: ignore[arg-type]
