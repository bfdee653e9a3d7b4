"""Evaluate every checkpoint of a run as it appears: sync it to the spare, one eval_posthoc.py job at a time.

`spare.py watch RUN_DIR -- <eval_posthoc.py options>` finds the run's HF checkpoints (`global_stepN_hf`, what
`--save_hf_ckpt` writes every `save_steps`), syncs each new one to the spare, runs
`eval_posthoc.py <options> --model stepN=<checkpoint>` there as a tmux job (rft/spare/jobs.py), reads the job's
`summary.json` and keeps `RUN_DIR/checkpoint_eval.json` (the state: a restarted watch skips what it holds) and
`RUN_DIR/checkpoint_eval.md` (the table and the `best:` line).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rft.eval.report import fig, pct
from rft.io import atomic_write_json, atomic_write_text
from rft.spare.jobs import JobError, JobInfo
from rft.train.checkpoints import Checkpoint, find_checkpoints

STATE_NAME = "checkpoint_eval.json"
TABLE_NAME = "checkpoint_eval.md"


class WatchError(RuntimeError):
    """A watch that cannot proceed; the message says what to do."""


def run_label(run_dir: Path) -> str:
    """The run's name: RUN_DIR's name, or its parent's for the runs/NAME/ckpt layout."""
    run_dir = run_dir.resolve()
    return run_dir.parent.name if run_dir.name == "ckpt" else run_dir.name


def job_name(run_name: str, ckpt: Checkpoint) -> str:
    """A tmux job name (letters, digits, '_', '-'; at most 64) for this run's checkpoint."""
    suffix = f"-{ckpt.label}"
    base = re.sub(r"[^A-Za-z0-9_-]", "-", f"watch-{run_name}")[: 64 - len(suffix)]
    return base + suffix


@dataclass(frozen=True)
class EvalOptions:
    """The eval_posthoc.py options of a watch and what the watch reads from them."""

    opts: tuple[str, ...]
    baseline: str
    run_dir: str
    run_dir_given: bool  # the options name --run-dir themselves

    def argv(self, ckpt: Checkpoint, path_there: str) -> list[str]:
        """The job's command: eval_posthoc.py with the options, the checkpoint and the eval run dir."""
        out = ["python", "eval_posthoc.py", *self.opts, "--model", f"{ckpt.label}={path_there}"]
        return out if self.run_dir_given else [*out, "--run-dir", self.run_dir]


def parse_eval_options(opts: Sequence[str], run_name: str) -> EvalOptions:
    """Check the options with eval_posthoc.py's own parser; the baseline is --baseline or the first --model."""
    parser = eval_parser()
    if not any(o == "--model" or o.startswith("--model=") for o in opts):
        raise WatchError("the eval options need the baseline: -- --model base=PATH [--baseline base] ...")
    try:
        args = parser.parse_args(list(opts))
    except SystemExit:  # argparse printed what is wrong
        raise WatchError("eval_posthoc.py refuses the options after `--` (its message is above)") from None
    names = [m.partition("=")[0] for m in args.model]
    baseline = args.baseline or names[0]
    if baseline not in names:
        raise WatchError(f"--baseline {baseline!r} is not one of the --model names {names}")
    clash = [n for n in names if re.fullmatch(r"step\d+", n)]
    if clash:
        raise WatchError(f"--model names {clash} clash with the checkpoints' names (stepN): rename them")
    given = any(o == "--run-dir" or o.startswith("--run-dir=") for o in opts)
    run_dir = args.run_dir if given else f"runs/watch/{re.sub(r'[^A-Za-z0-9_.-]', '-', run_name)}"
    return EvalOptions(tuple(opts), baseline, run_dir, given)


def eval_parser():
    """eval_posthoc.py's own argument parser (imported here only: the evaluation's imports are heavy)."""
    from rft.eval.cli import build_parser

    return build_parser()


class Target:
    """Where the eval jobs run: sync a checkpoint there, start and query jobs, read a result file."""

    where: str

    def prepare(self) -> list[str]:
        """Once per watch (code and data to the spare); summary lines."""
        return []

    def sync(self, ckpt: Checkpoint) -> str:
        """Make the checkpoint available there; returns its path there."""
        raise NotImplementedError

    def start(self, name: str, argv: list[str]) -> None:
        raise NotImplementedError

    def info(self, name: str) -> JobInfo | None:
        """The job's state, None when there is no such job."""
        raise NotImplementedError

    def read_json(self, path: str) -> dict:
        """A JSON file there (a relative path is under the repo)."""
        raise NotImplementedError


class LocalTarget(Target):
    """Jobs on this machine (`--host local`): the checkpoint is used where it is; each job gets `env`."""

    def __init__(self, runner, env: dict[str, str]):
        self.runner = runner
        self.env = env
        self.where = "this machine"

    def sync(self, ckpt: Checkpoint) -> str:
        return str(ckpt.path)

    def start(self, name: str, argv: list[str]) -> None:
        self.runner.start(name, argv, env=self.env)

    def info(self, name: str) -> JobInfo | None:
        try:
            return self.runner.info(name)
        except JobError:
            return None

    def read_json(self, path: str) -> dict:
        p = Path(path)
        p = p if p.is_absolute() else self.runner.repo / p
        return json.loads(p.read_text(encoding="utf-8"))


class RemoteTarget(Target):
    """Jobs on the spare over ssh: code and data synced once, each checkpoint rsynced to the same path; each job
    gets spare.toml [env]."""

    def __init__(self, spare):
        self.spare = spare
        self.where = spare.where()

    def prepare(self) -> list[str]:
        from rft.spare.node import sync

        return sync(self.spare, (), data=True)

    def sync(self, ckpt: Checkpoint) -> str:
        from rft.spare.node import sync_adapter

        sync_adapter(self.spare, str(ckpt.path))
        return str(ckpt.path)

    def start(self, name: str, argv: list[str]) -> None:
        from rft.spare.node import RemoteFailed

        env = [f"--env={k}={v}" for k, v in self.spare.cfg.env]
        proc = self.spare.cli(["run", name, *env, "--", *argv])
        if proc.returncode != 0:
            raise RemoteFailed(proc.returncode)

    def info(self, name: str) -> JobInfo | None:
        jobs = self.spare.cli_json(["ls", "--json"])
        return next((JobInfo(**j) for j in jobs if j["name"] == name), None)  # type: ignore[union-attr]

    def read_json(self, path: str) -> dict:
        from rft.spare.node import READ_SCRIPT

        proc = self.spare.script(READ_SCRIPT, self.spare.cfg.repo, path)
        if proc.returncode != 0:
            raise WatchError(f"cannot read {path} on the spare {self.where} (exit {proc.returncode})")
        return json.loads(proc.stdout)


def load_state(run_dir: Path) -> dict:
    """The watch state of RUN_DIR (empty when none)."""
    path = run_dir / STATE_NAME
    if not path.is_file():
        return {"checkpoints": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def cells_of(summary: dict, model: str) -> list[dict]:
    """The summary cells of one model, each reduced to dataset, mode, headline, figures, rates and the delta."""
    keep = ("dataset", "mode", "headline", "n_problems", "figures", "rates", "vs_baseline")
    return [{k: c[k] for k in keep if k in c} for c in summary["cells"] if c["model"] == model]


def collect(state: dict, summary: dict, ckpt: Checkpoint, opts: EvalOptions, info: JobInfo) -> None:
    """Record a finished job's cells (and the baseline's, once) in the state."""
    state["baseline"] = {"name": opts.baseline, "cells": cells_of(summary, opts.baseline)}
    state["checkpoints"][ckpt.name] = {
        "step": ckpt.step,
        "path": str(ckpt.path),
        "label": ckpt.label,
        "status": "evaluated",
        "job": info.name,
        "log": info.log,
        "cells": cells_of(summary, ckpt.label),
        "evaluated_at": time.time(),
    }


def evaluate(
    target: Target,
    state: dict,
    ckpt: Checkpoint,
    opts: EvalOptions,
    run_name: str,
    log: Callable[[str], None],
    poll: float = 5.0,
) -> bool:
    """Sync, run (or adopt a job already started for it) and collect one checkpoint; True when evaluated."""
    name = job_name(run_name, ckpt)
    path_there = target.sync(ckpt)
    argv = opts.argv(ckpt, path_there)
    info = target.info(name)
    same = info is not None and info.argv[1:] == argv[1:]  # argv[0]: python, resolved to a path there
    if same and info.state == "running":
        log(f"{ckpt.name}: job {name} already running on {target.where}; waiting for it")
    elif same and info.state == "exited" and info.exit_code == 0:
        log(f"{ckpt.name}: job {name} finished earlier on {target.where}; collecting it")
    else:
        target.start(name, argv)
        log(f"{ckpt.name}: started job {name} on {target.where} (log logs/{name}.log)")
    while True:
        info = target.info(name)
        if info is not None and info.state != "running":
            break
        time.sleep(poll)
    if info.state != "exited" or info.exit_code != 0:
        state["checkpoints"][ckpt.name] = {
            "step": ckpt.step,
            "path": str(ckpt.path),
            "label": ckpt.label,
            "status": "failed",
            "job": name,
            "log": info.log,
            "job_status": info.status_text,
        }
        log(f"{ckpt.name}: job {name} {info.status_text}: see `spare.py tail {name}`")
        return False
    summary = target.read_json(f"{opts.run_dir}/summary.json")
    collect(state, summary, ckpt, opts, info)
    return True


# --- the table and the best checkpoint ------------------------------------------------------------------------
def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def _delta(vs: dict | None) -> str:
    if not vs:
        return "n/a"
    return f"{_pp(vs['delta'])} pp [{_pp(vs['ci95'][0])}, {_pp(vs['ci95'][1])}]"


def cell_key(cell: dict) -> str:
    return f"{cell['dataset']} {cell['mode']}"


def pick_best(state: dict, select: str | None = None) -> tuple[str, dict, dict] | None:
    """(checkpoint name, entry, selected cell) with the highest headline on the selected cell; ties: earlier step.

    The selected cell is `select` ("DATASET MODE") or the first cell (first --dataset, first --mode).
    """
    done = [(n, e) for n, e in state["checkpoints"].items() if e["status"] == "evaluated" and e["cells"]]
    if not done:
        return None
    key = select or cell_key(done[0][1]["cells"][0])
    best = None
    for name, entry in sorted(done, key=lambda ne: ne[1]["step"]):
        cell = next((c for c in entry["cells"] if cell_key(c) == key), None)
        if cell is None:
            continue
        value = cell["figures"][cell["headline"]]["value"]
        if best is None or value > best[3]:
            best = (name, entry, cell, value)
    return None if best is None else best[:3]


def best_line(state: dict, select: str | None = None) -> str:
    """`best: <checkpoint> ...` with its figure, its delta and the rule that chose it."""
    picked = pick_best(state, select)
    if picked is None:
        return "best: none (no checkpoint evaluated yet)"
    name, entry, cell = picked
    head = cell["headline"]
    vs = cell.get("vs_baseline")
    if vs is None:
        verdict = "no baseline comparison"
    elif vs["ci95"][0] > 0:
        verdict = f"above {vs['baseline']} at 95%"
    elif vs["ci95"][1] < 0:
        verdict = f"below {vs['baseline']} at 95%"
    else:
        verdict = f"not distinguishable from {vs['baseline']} at 95%"
    return (
        f"best: {name} (step {entry['step']}): {cell_key(cell)} {head} {fig(cell['figures'][head])}, "
        f"Δ {_delta(vs)} ({verdict}); rule: the highest {head} on {cell_key(cell)} among evaluated checkpoints, "
        "ties to the earlier step"
    )


def table_markdown(state: dict, run_name: str, select: str | None = None) -> str:
    """The checkpoint table: one row per checkpoint, per cell its headline [95% CI] and Δ vs the baseline."""
    base = state.get("baseline") or {"name": "baseline", "cells": []}
    entries = sorted(state["checkpoints"].items(), key=lambda ne: ne[1]["step"])
    keys = [cell_key(c) for c in base["cells"]]
    for _, e in entries:
        keys += [cell_key(c) for c in e.get("cells", []) if cell_key(c) not in keys]
    header = ["checkpoint", "step"]
    for k in keys:
        header += [k, f"Δ vs {base['name']} [95% CI]"]
    header.append("boxed")
    lines = [
        f"### Checkpoints of {run_name}",
        "",
        f"Evaluated by `spare.py watch` with eval_posthoc.py. Brackets: 95% bootstrap interval over problems; Δ: "
        f"paired bootstrap against `{base['name']}` on the same problems.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]

    def row(label: str, step: str, cells: list[dict], is_base: bool) -> str:
        by = {cell_key(c): c for c in cells}
        out = [label, step]
        for k in keys:
            c = by.get(k)
            out.append(fig(c["figures"][c["headline"]]) if c else "-")
            out.append("baseline" if is_base else (_delta(c.get("vs_baseline")) if c else "-"))
        boxed = [c["rates"]["boxed"] for c in cells if "rates" in c]
        out.append(pct(sum(boxed) / len(boxed)) if boxed else "-")
        return "| " + " | ".join(out) + " |"

    lines.append(row(f"{base['name']} (baseline)", "-", base["cells"], True))
    for name, e in entries:
        if e["status"] == "evaluated":
            lines.append(row(name, str(e["step"]), e["cells"], False))
        else:
            lines.append(
                f"| {name} | {e['step']} | {e['status']}: {e.get('job_status', '')}, log {e['log']} |"
            )
    lines += ["", best_line(state, select), ""]
    return "\n".join(lines)


def write_outputs(run_dir: Path, state: dict, run_name: str, select: str | None = None) -> Path:
    """Write the state and the table atomically; returns the table's path."""
    atomic_write_json(run_dir / STATE_NAME, state)
    md = run_dir / TABLE_NAME
    atomic_write_text(md, table_markdown(state, run_name, select))
    return md


def watch(
    run_dir: Path,
    opts: EvalOptions,
    target: Target,
    *,
    once: bool = False,
    poll: float = 60.0,
    settle: float = 30.0,
    select: str | None = None,
    retry_failed: bool = False,
    job_poll: float = 5.0,
    log: Callable[[str], None] = print,
) -> dict:
    """Evaluate each settled checkpoint not evaluated yet, one job at a time; `once`: what is pending, then return."""
    run_dir = run_dir.resolve()
    if not run_dir.is_dir():
        raise WatchError(f"run directory {run_dir} not found")
    run_name = run_label(run_dir)
    state = load_state(run_dir)
    before = state.get("eval", {}).get("options")
    if before is not None and before != list(opts.opts) and state["checkpoints"]:
        log(
            f"the eval options differ from those of {run_dir / STATE_NAME}: every checkpoint is evaluated again"
        )
        state = {"checkpoints": {}}
    state["eval"] = {"options": list(opts.opts), "run_dir": opts.run_dir, "baseline": opts.baseline}
    for line in target.prepare():
        log(line)
    while True:
        for ckpt in find_checkpoints(run_dir, settle):
            entry = state["checkpoints"].get(ckpt.name)
            if entry and (
                entry["status"] == "evaluated" or (entry["status"] == "failed" and not retry_failed)
            ):
                continue
            evaluate(target, state, ckpt, opts, run_name, log, job_poll)
            md = write_outputs(run_dir, state, run_name, select)
            log(f"{ckpt.name}: {state['checkpoints'][ckpt.name]['status']}; table {md}")
        write_outputs(run_dir, state, run_name, select)
        if once:
            return state
        time.sleep(poll)
