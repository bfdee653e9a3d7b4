"""Drive the spare node: sync code/data/adapters, verify it matches, and run eval jobs there in tmux.

The spare is reached over ssh and runs this same CLI there with `--host local`; `--host local` also runs
jobs on this machine. Configuration: spare.toml at the repo root (or --config / RFT_SPARE_CONFIG), keys
host, key, port, repo, python, ssh_options, data, tmux_socket and an [env] table of variables every job gets;
--host and --tmux-socket override it.
"""

from __future__ import annotations

import argparse
import base64
import json
import shlex
import socket
import sys
import time
from pathlib import Path

from rft.launch.run_pointer import resolve
from rft.provenance import REPO_ROOT, GitError
from rft.spare.jobs import DEFAULT_SOCKET, JobError, JobInfo, JobRunner, format_age, gpu_summary
from rft.spare.node import (
    ENV_NAME,
    RemoteFailed,
    Spare,
    SpareConfig,
    SpareError,
    load_config,
    local_facts,
    render_rows,
)
from rft.spare.node import sync as sync_spare
from rft.spare.node import verify as verify_spare
from rft.spare.watch import (
    LocalTarget,
    RemoteTarget,
    Target,
    WatchError,
    parse_eval_options,
    run_label,
    table_markdown,
    watch,
)

EPILOG = """examples:
  spare.py sync --adapter /mnt/data/rft_checkpoints/a30/global_step130_hf
  spare.py verify
  spare.py run eval-a30 -- python eval_posthoc.py --model a30=/mnt/scratch/merged_models/a30
  spare.py ls;  spare.py tail eval-a30 -f;  spare.py attach eval-a30;  spare.py kill eval-a30
  spare.py --host local run smoke -- bash -c 'echo "$HOSTNAME"; exit 3'
  spare.py watch -- --model base=openai/gpt-oss-20b --dataset ood --chat-date 2025-08-05   (the latest run)
  spare.py watch --run gpt-oss-20b-grpo-a28a -- --model base=openai/gpt-oss-20b --dataset ood
  spare.py sync --run gpt-oss-20b-grpo-a28a --adapter global_step130_hf
"""


def add_adapter_flag(parser: argparse.ArgumentParser, help_text: str) -> None:
    """The repeatable --adapter SRC[=DEST] flag of sync and verify, and --run for a relative SRC."""
    parser.add_argument("--adapter", action="append", default=[], metavar="SRC[=DEST]", help=help_text)
    parser.add_argument("--run", metavar="RUN_NAME", help="a relative --adapter SRC is in this run's checkpoint "
                        "directory (runs/RUN_NAME/run.json, written by the launch)")


def run_checkpoints(name: str | None) -> Path:
    """The checkpoint directory of run `name` of this checkout (the latest run without one); SpareError names
    what is missing."""
    try:
        run = resolve(REPO_ROOT, name)
    except (FileNotFoundError, ValueError) as e:
        raise SpareError(str(e)) from None
    if run.ckpt_path is None:
        raise SpareError(f"run {run.name}: its launch gave no --ckpt_path ({run.pointer})")
    return run.ckpt_path


def in_run(specs: list[str], name: str | None) -> list[str]:
    """--adapter specs with a relative SRC taken in run `name`'s checkpoint directory (unchanged without --run)."""
    if not name:
        return specs
    ckpt = run_checkpoints(name)
    out = []
    for spec in specs:
        src, sep, dest = spec.partition("=")
        out.append(spec if Path(src).is_absolute() else f"{ckpt / src}{sep}{dest}")
    return out


# (command, help, --adapter help, its one switch, that switch's help) of the commands that take adapters
ADAPTER_COMMANDS = (
    ("sync", "fast-forward the spare's checkout to HEAD (git bundle) and rsync data files and adapters; idempotent",
     "a LoRA adapter dir to rsync (repeatable); DEST on the spare defaults to the same path",
     "--no-data", "skip the gitignored data files"),
    ("verify", "compare git HEAD, data checksums, package versions, patches (and adapters) of primary and spare; "
     "exit 1 on any mismatch", "also compare this adapter's files (repeatable)",
     "--json", "print the comparison as JSON instead of a table"),
)


def build_parser() -> argparse.ArgumentParser:
    """The CLI; `run`'s job command is everything after the first `--` and is never parsed."""
    p = argparse.ArgumentParser(
        prog="spare.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    p.add_argument(
        "--host",
        help="spare as user@host (overrides spare.toml's host), or 'local' to act "
        "on this machine without ssh",
    )
    p.add_argument(
        "--config", help="TOML config file (default: $RFT_SPARE_CONFIG, else spare.toml in the repo)"
    )
    p.add_argument(
        "--tmux-socket",
        help=f"tmux socket name of the dedicated job server (tmux -L NAME; "
        f"default: spare.toml's tmux_socket, else '{DEFAULT_SOCKET}')",
    )
    p.add_argument("--argv-b64", help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    for name, help_, adapter_help, switch, switch_help in ADAPTER_COMMANDS:
        s = sub.add_parser(name, help=help_)
        add_adapter_flag(s, adapter_help)
        s.add_argument(switch, action="store_true", help=switch_help)

    s = sub.add_parser(
        "facts", help="print this host's verify facts as JSON (what verify asks the spare for)"
    )
    s.add_argument("--json", action="store_true", help="accepted for symmetry; output is always JSON")
    s.add_argument("--data-dir", action="append", default=None, help="data dir to checksum (default: data)")
    s.add_argument("--adapter", action="append", default=[], help="adapter path to digest (repeatable)")

    s = sub.add_parser(
        "run",
        help="run COMMAND detached in tmux session NAME in the repo dir: "
        "spare.py run NAME [--wait] -- COMMAND [ARGS...]",
        usage="spare.py run [-h] [--wait] NAME -- COMMAND [ARGS...]",
        description="Everything after `--` is the job's argv, passed through unchanged (no shell): use "
        "`bash -c '...'` for pipes or variables. A bare `python`/`python3` becomes this environment's "
        "Python by absolute path. Output goes to logs/NAME.log; the exit status to logs/NAME.status.json.",
    )
    s.add_argument(
        "name", metavar="NAME", help="job name: letters, digits, '_' and '-'; refused while running"
    )
    s.add_argument("--wait", action="store_true", help="block until the job ends and exit with its status")
    s.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the job (repeatable), over spare.toml [env] and the scratch-disk "
        "cache defaults (HF_HOME, TRANSFORMERS_CACHE, HF_DATASETS_CACHE, VLLM_CACHE_DIR under /mnt/scratch)",
    )

    s = sub.add_parser("ls", help="list jobs: name, running or exit status, age, log path")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")

    s = sub.add_parser("tail", help="print the end of a job's log")
    s.add_argument("name", metavar="NAME", help="job name")
    s.add_argument("-n", "--lines", type=int, default=30, help="number of lines (default 30)")
    s.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")

    s = sub.add_parser("attach", help="attach to a job's tmux session (interactive; detach with Ctrl-B D)")
    s.add_argument("name", metavar="NAME", help="job name")

    s = sub.add_parser("kill", help="stop a job and its tmux session (its status becomes 'killed')")
    s.add_argument("name", metavar="NAME", help="job name")

    s = sub.add_parser(
        "watch",
        help="evaluate each checkpoint of a run as it appears: spare.py watch RUN_DIR [--once] -- "
        "<eval_posthoc.py options>",
        usage="spare.py watch [-h] [--once] [--poll S] [--settle S] [--select DATASET:MODE] [--retry-failed] "
        "[RUN_DIR | --run RUN_NAME] -- <eval_posthoc.py options>",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""Runs on the training node. Finds the run's HF checkpoints (RUN_DIR/global_stepN_hf or
RUN_DIR/ckpt/global_stepN_hf: adapters or full models, written by --save_hf_ckpt every save_steps), and for
each new one whose files have not changed for --settle seconds: syncs it to the spare (the same path there;
code and data once at start), runs `python eval_posthoc.py <options> --model stepN=<checkpoint>` there as the
tmux job watch-<run>-stepN (one at a time), and reads the job's summary.json.

The options after `--` are eval_posthoc.py's and must name the baseline (--model NAME=PATH, --baseline NAME
if it is not the first); its cells are evaluated once and reused. Without --run-dir the eval results go to
runs/watch/<run> in the spare's checkout. An adapter is merged into its base_model_name_or_path, which must
exist at the same path on the spare (or pass --base).

Writes RUN_DIR/checkpoint_eval.json (the state: a restarted watch skips evaluated checkpoints and adopts a
job still running) and RUN_DIR/checkpoint_eval.md: one row per checkpoint, each figure with its 95%
bootstrap interval and its paired-bootstrap delta vs the baseline, and the line `best: <checkpoint>` with
the rule that chose it (the highest headline figure on the first --dataset and --mode, or --select; ties to
the earlier step; whether its delta's interval is above the baseline's).""",
    )
    s.add_argument(
        "run_dir", metavar="RUN_DIR", nargs="?",
        help="the run's checkpoint directory (default: that of --run, else of the latest run of this checkout)"
    )
    s.add_argument("--run", metavar="RUN_NAME", help="the run of this checkout named so (runs/RUN_NAME/run.json)")
    s.add_argument("--once", action="store_true", help="evaluate what is pending now, then exit")
    s.add_argument(
        "--poll", type=float, default=60.0, help="seconds between looks for new checkpoints (default 60)"
    )
    s.add_argument(
        "--settle",
        type=float,
        default=30.0,
        help="a checkpoint counts once its files are unchanged this many seconds (default 30)",
    )
    s.add_argument(
        "--select",
        metavar="DATASET:MODE",
        help="the cell that picks the best checkpoint (default: the first --dataset and --mode)",
    )
    s.add_argument("--retry-failed", action="store_true", help="run again the checkpoints whose job failed")

    s = sub.add_parser("gpus", help="nvidia-smi summary of the target host's GPUs")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(CLI args, job command after the first `--` or None)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, None


def print_jobs(jobs: list[JobInfo], where: str) -> None:
    """Rich table of jobs."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"jobs on {where}")
    for col in ("name", "status", "age", "log", "command"):
        table.add_column(col)
    now = time.time()
    for j in jobs:
        colour = {"running": "cyan", "killed": "yellow", "lost": "red"}.get(
            j.state, "green" if j.exit_code == 0 else "red"
        )
        cmd = shlex.join(j.argv)
        table.add_row(
            j.name,
            f"[{colour}]{j.status_text}[/]",
            format_age(now - j.started_at) if j.started_at else "?",
            j.log,
            cmd if len(cmd) <= 60 else cmd[:57] + "...",
        )
    Console(width=max(140, Console().width)).print(table)


def print_gpus(rows: list[dict], where: str) -> None:
    """Rich table of nvidia-smi rows."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"GPUs on {where}")
    for col in ("index", "name", "util %", "mem used MiB", "mem total MiB"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["index"], r["name"], r["util_pct"], r["mem_used_mib"], r["mem_total_mib"])
    Console().print(table)


def job_variables(cfg: SpareConfig, given: list[str]) -> dict[str, str]:
    """spare.toml [env], then each --env NAME=VALUE over it."""
    out = dict(cfg.env)
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise SpareError(f"--env {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def run_watch(args: argparse.Namespace, opts: list[str], target: Target) -> int:
    """`watch`: evaluate the run's checkpoints through `target`, print the table at the end of each pass."""
    if args.run_dir and args.run:
        raise SpareError("watch: give RUN_DIR or --run RUN_NAME, not both")
    run_dir = Path(args.run_dir) if args.run_dir else run_checkpoints(args.run)
    log_line = f"run {args.run or 'the latest of this checkout'}: {run_dir}" if not args.run_dir else ""
    eval_opts = parse_eval_options(opts, run_label(run_dir))
    select = args.select.replace(":", " ", 1) if args.select else None

    def log(line: str) -> None:
        print(f"watch: {line}", file=sys.stderr, flush=True)

    if log_line:
        log(log_line)

    state = watch(
        run_dir,
        eval_opts,
        target,
        once=args.once,
        poll=args.poll,
        settle=args.settle,
        select=select,
        retry_failed=args.retry_failed,
        log=log,
    )
    print(table_markdown(state, run_label(run_dir), select))
    failed = [n for n, e in state["checkpoints"].items() if e["status"] == "failed"]
    return 1 if failed else 0


def run_local(args: argparse.Namespace, job: list[str] | None, socket_name: str, cfg: SpareConfig) -> int:
    """Job commands on this machine (what the spare runs when called over ssh)."""
    runner = JobRunner(REPO_ROOT, socket_name=socket_name)
    where = socket.gethostname()
    if args.cmd == "watch":
        return run_watch(args, job or [], LocalTarget(runner, dict(cfg.env)))
    if args.cmd == "run":
        info = runner.start(args.name, job or [], env=job_variables(cfg, args.env))
        print(f"started job {info.name} on {where}: log {info.log}")
        if not args.wait:
            return 0
        info = runner.wait(args.name)
        print(f"job {info.name}: {info.status_text}")
        return info.exit_code if info.state == "exited" and info.exit_code is not None else 1
    if args.cmd == "ls":
        jobs = runner.list()
        if args.json:
            print(json.dumps([j.to_json() for j in jobs]))
        else:
            print_jobs(jobs, where)
        return 0
    if args.cmd == "tail":
        info = runner.tail(args.name, args.lines, args.follow)
        if info is not None:
            print(f"[job {info.name}: {info.status_text}]", file=sys.stderr)
        return 0
    if args.cmd == "attach":
        runner.attach(args.name)
        return 0
    if args.cmd == "kill":
        info = runner.kill(args.name)
        print(f"job {info.name}: {info.status_text}")
        return 0
    if args.cmd == "gpus":
        rows = gpu_summary()
        print(json.dumps(rows)) if args.json else print_gpus(rows, where)
        return 0
    if args.cmd == "facts":
        print(json.dumps(local_facts(args.data_dir or ["data"], args.adapter)))
        return 0
    raise SpareError(
        f"`{args.cmd}` compares this machine with the spare: configure one (host in spare.toml, or --host user@host), "
        "not --host local"
    )


def run_remote(args: argparse.Namespace, job: list[str] | None, spare: Spare) -> int:
    """Commands driven from the primary; job commands run this CLI on the spare over ssh."""
    if args.cmd == "watch":
        return run_watch(args, job or [], RemoteTarget(spare))
    if args.cmd == "sync":
        for line in sync_spare(spare, in_run(args.adapter, args.run), data=not args.no_data):
            print(line)
        return 0
    if args.cmd == "verify":
        rows = verify_spare(spare, in_run(args.adapter, args.run))
        if args.json:
            print(json.dumps([r.__dict__ for r in rows]))
        else:
            render_rows(rows, socket.gethostname(), spare.cfg.host or "")
        bad = [r.item for r in rows if not r.ok and not r.warn_only]
        if bad:
            print(
                f"MISMATCH: {', '.join(bad)} (run `spare.py sync`; packages/patches must be fixed on the spare)",
                file=sys.stderr,
            )
        return 1 if bad else 0
    if args.cmd == "ls" and not args.json:
        jobs = [JobInfo(**j) for j in spare.cli_json(["ls", "--json"])]  # type: ignore[union-attr]
        print_jobs(jobs, spare.cfg.host or "")
        return 0
    if args.cmd == "gpus" and not args.json:
        print_gpus(spare.cli_json(["gpus", "--json"]), spare.cfg.host or "")  # type: ignore[arg-type]
        return 0
    forward = {
        "run": lambda: [
            "run", args.name, *(["--wait"] if args.wait else []),
            *[f"--env={k}={v}" for k, v in job_variables(spare.cfg, args.env).items()], "--", *(job or []),
        ],
        "tail": lambda: ["tail", args.name, "-n", str(args.lines), *(["-f"] if args.follow else [])],
        "attach": lambda: ["attach", args.name],
        "kill": lambda: ["kill", args.name],
        "ls": lambda: ["ls", "--json"],
        "gpus": lambda: ["gpus", "--json"],
        "facts": lambda: ["facts", "--json", *[f"--adapter={a}" for a in args.adapter]],
    }[args.cmd]()
    return spare.cli(forward, tty=args.cmd == "attach").returncode


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--argv-b64"] and len(argv) == 2:  # how the primary calls us over ssh
        argv = json.loads(base64.b64decode(argv[1]))
    cli_args, job = split_command(argv)
    parser = build_parser()
    args = parser.parse_args(cli_args)
    if job is not None and args.cmd not in ("run", "watch"):
        parser.error(f"`--` is only for `run` and `watch` (got it with `{args.cmd}`)")
    if args.cmd == "run" and not job:
        parser.error("run needs the command after `--`: spare.py run NAME -- COMMAND [ARGS...]")
    if args.cmd == "watch" and not job:
        parser.error(
            "watch needs eval_posthoc.py's options after `--`: spare.py watch RUN_DIR -- --model base=PATH"
        )
    try:
        cfg = load_config(args.config, host=args.host)
        socket_name = args.tmux_socket or cfg.tmux_socket
        if cfg.is_local:
            return run_local(args, job, socket_name, cfg)
        if args.tmux_socket:
            cfg = type(cfg)(**{**cfg.__dict__, "tmux_socket": args.tmux_socket})
        return run_remote(args, job, Spare(cfg))
    except RemoteFailed as e:  # the spare already printed its error
        return e.returncode
    except (SpareError, JobError, GitError, WatchError) as e:
        print(f"spare.py: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

