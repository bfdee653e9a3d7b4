"""Watch a GRPO run from its metrics directory: live table, health verdicts, dashboard PNG, markdown tables.

python -m rft.monitor [METRICS_DIR] [--follow | --check | --plot out.png | --table]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from rft.io import add_env_flag
from rft.launch.record import newest_record
from rft.launch.run_pointer import resolve
from rft.monitor.diagnosis import Thresholds, Verdict, diagnose, exit_code
from rft.monitor.logs import (
    JsonlTail,
    MetricsLog,
    feed_lines,
    metrics_path,
    read_metrics,
    read_spikes,
    spike_log_path,
)
from rft.monitor.step_phases import comparison, markdown_time_table, predicted_from_record, rich_time_table
from rft.monitor.stop import StopError, StopPlan, end_run, latest_checkpoint, stop_verdict
from rft.monitor.table import markdown_summary, markdown_table, rich_step_table, rich_verdict_table
from rft.options import from_args
from rft.provenance import REPO_ROOT


@dataclass(frozen=True)
class GpuSample:
    """One GPU as nvidia-smi reports it: utilisation in percent, memory in MiB."""

    index: int
    util: float
    used_mib: float
    total_mib: float


def parse_nvidia_smi(text: str) -> list[GpuSample]:
    """Rows of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`."""
    out = []
    for line in text.strip().splitlines():
        cols = [x.strip() for x in line.split(",")]
        if len(cols) != 4:
            continue
        try:
            out.append(GpuSample(int(cols[0]), float(cols[1]), float(cols[2]), float(cols[3])))
        except ValueError:  # "[N/A]" on some boards
            continue
    return out


def gpu_samples() -> list[GpuSample] | str:
    """This machine's GPUs from nvidia-smi, or the reason there are none."""
    if not shutil.which("nvidia-smi"):
        return "no nvidia-smi"
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,utilization.gpu,memory.used,memory.total",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError) as e:
        return e.__class__.__name__
    return parse_nvidia_smi(out)


def gpu_usage(samples: list[GpuSample] | str) -> str:
    """One line: utilisation and memory of every GPU, or 'n/a' and why."""
    if isinstance(samples, str):
        return f"GPU: n/a ({samples})"
    return "GPU " + "  ".join(
        f"{g.index}:{g.util:.0f}% {g.used_mib / 1024:.0f}/{g.total_mib / 1024:.0f}G" for g in samples
    )


@dataclass
class GpuWatch:
    """The guide's GPU warning signs over successive nvidia-smi samples: memory above `mem_warn` of a GPU (OOM
    imminent), and every GPU at 0% utilisation for `idle_seconds` (a deadlock: in the 8-GPU split one group
    idles while the other works, so only all of them idle at once is suspicious)."""

    mem_warn: float = 0.95
    idle_seconds: float = 300.0
    idle_since: float | None = None

    def update(self, now: float, samples: list[GpuSample] | str) -> list[str]:
        """Alerts for this sample (`now` in seconds); an empty list when healthy or without GPUs."""
        if isinstance(samples, str) or not samples:
            self.idle_since = None
            return []
        alerts = [
            f"GPU {g.index} memory {g.used_mib / g.total_mib:.0%} > {self.mem_warn:.0%}: OOM imminent (lower "
            "--micro_train_batch_size or --vllm_gpu_memory_utilization, or offload)"
            for g in samples
            if g.total_mib > 0 and g.used_mib / g.total_mib > self.mem_warn
        ]
        if all(g.util == 0 for g in samples):
            self.idle_since = now if self.idle_since is None else self.idle_since
            idle = now - self.idle_since
            if idle >= self.idle_seconds:
                alerts.append(
                    f"every GPU at 0% utilisation for {idle / 60:.0f} min: possible deadlock (is the metrics log "
                    "still growing? read the Ray worker logs, py-spy dump the actor)"
                )
        else:
            self.idle_since = None
        return alerts


TH, GPU = Thresholds(), GpuWatch()
# The numeric knobs: flag, default, help (each help ends with the default); a Thresholds knob's flag is its
# field name with dashes (thresholds() reads them back by name).
NUMERIC_FLAGS = (
    ("--probe-size", TH.probe_size, "problems in the OOD probe, sets the noise level of a drop"),
    ("--stop-z", TH.stop_z, "a probe drop counts only if larger than this many standard errors"),
    ("--early-steps", TH.early_steps, "first steps judged by the early checks"),
    ("--window", TH.window, "last steps examined by the playbook diagnosis"),
    ("--spike-grad-norm", TH.spike_grad_norm, "grad_norm above this marks a spike (as the spike log)"),
    ("--not-moving-kl", TH.not_moving_kl, "median |kl| to the reference below this after 10 steps = barely moving"),
    ("--judge-fail-warn", TH.judge_fail_warn, "judge reward: warn when a step's judge failure rate (failed / "
     "asked) exceeds this (stop when the last 3 steps all exceed --judge-fail-stop)"),
    ("--judge-fail-stop", TH.judge_fail_stop, "see --judge-fail-warn"),
    ("--high-but-wrong-warn", TH.high_but_wrong_warn, "warn when the share of wrong answers paid above their "
     "group exceeds this"),
    ("--uniform-share-warn", TH.uniform_share_warn, "warn when the share of prompt groups with one reward for "
     "every sample (zero advantage) exceeds this at each of the last 5 steps"),
    ("--interval", 5.0, "seconds between --follow polls"),
    ("--gpu-mem-warn", GPU.mem_warn, "--follow: warn when a GPU's memory use exceeds this share"),
    ("--gpu-idle-minutes", GPU.idle_seconds / 60, "--follow: warn when every GPU sits at 0%% utilisation this "
     "long, a possible deadlock"),
)


# (flag, help) of the mutually exclusive actions; without one, the latest steps and verdicts print once
ACTION_FLAGS = (
    ("--follow", "live view: table and verdicts refreshed as lines arrive (Ctrl-C to quit)"),
    ("--check", "print the verdicts; exit 0 healthy, 1 warnings, 2 stop (FAIL or STOP)"),
)


def build_parser() -> argparse.ArgumentParser:
    """The CLI; every flag explained in --help."""
    p = argparse.ArgumentParser(
        prog="python -m rft.monitor",
        description="Health of a GRPO run from training_metrics.jsonl (+ spike_log.jsonl). Without an action "
        "flag, prints the latest steps and the verdicts once.",
    )
    add_env_flag(p, "metrics", "METRICS_LOG_DIR", "metrics directory (holding training_metrics.jsonl) or the JSONL "
                 "file itself", otherwise=", else the run --run names, else the latest run of this checkout",
                 nargs="?")
    p.add_argument("--run", metavar="RUN_NAME", help="the run of this checkout named so (runs/RUN_NAME/run.json, "
                   "written by the launch): its metrics, checkpoints and outputs")
    act = p.add_mutually_exclusive_group()
    for flag, text in ACTION_FLAGS:
        act.add_argument(flag, action="store_true", help=text)
    p.add_argument("--plot", metavar="PNG", help="write a dashboard PNG of the main curves to this path")
    p.add_argument(
        "--table",
        action="store_true",
        help="print a markdown per-step table and a summary with trends (for rl_grpo_research.md)",
    )
    p.add_argument(
        "--last",
        type=int,
        default=None,
        help="rows in the step tables (default: 12 on the terminal, all steps in --table)",
    )
    p.add_argument(
        "--spike-log",
        default=None,
        help="spike log JSONL (default: $SPIKE_LOG_PATH, else spike_log.jsonl next to the metrics)",
    )
    p.add_argument(
        "--probe-key",
        default=None,
        help="eval key of the OOD probe for early stopping (default: an eval_*ood*pass1 key, "
        "else the first eval_*_pass1)",
    )
    add_env_flag(p, "--ckpt-path", "CKPT_PATH", "OpenRLHF --ckpt_path, to name the best checkpoint's directory")
    p.add_argument(
        "--disk",
        action="append",
        default=None,
        help="path whose free space the live view shows; repeatable (default: $SAVE_PATH, "
        "$CKPT_PATH and the metrics directory)",
    )
    p.add_argument(
        "--end-on-stop",
        action="store_true",
        help="with --follow: on a STOP verdict, wait until a checkpoint at or after that step is on disk "
        "(--ckpt-path), then end the run (SIGINT to the run record's driver_pid) and write the reason into the "
        "run record; the run stays resumable. Without it --follow only reports",
    )
    p.add_argument(
        "--calibrate",
        metavar="TOML",
        help="write the step-time model's figures this run measured (its mean time_*_s after the first step) to "
        "this device-figures file, for RFT_DEVICE_FIGURES of the next dry run, and exit",
    )
    p.add_argument("--record-dir", help="where the run's run_record_*.json is (default: the metrics directory)")
    for flag, default, text in NUMERIC_FLAGS:
        p.add_argument(flag, type=type(default), default=default, help=f"{text} (default: %(default)s)")
    return p


def thresholds(args: argparse.Namespace) -> Thresholds:
    """Thresholds from the parsed flags: every field a flag sets, the dataclass's default for the rest."""
    return from_args(Thresholds, args)


def disk_free(paths: list[str]) -> str:
    """Free space of each existing path."""
    parts = []
    for p in paths:
        if p and Path(p).exists():
            usage = shutil.disk_usage(p)
            parts.append(f"{p}: {usage.free / 2**30:.0f} GiB free ({usage.free / usage.total:.0%})")
    return "disk " + "; ".join(parts) if parts else "disk: no save paths given"


def disk_paths(args: argparse.Namespace) -> list[str]:
    """--disk paths, else $SAVE_PATH, $CKPT_PATH and the metrics directory."""
    if args.disk:
        return args.disk
    metrics_dir = str(metrics_path(args.metrics).parent)
    return [p for p in (os.environ.get("SAVE_PATH"), args.ckpt_path, metrics_dir) if p]


def record_dir(args: argparse.Namespace) -> Path:
    """Where the run's run_record_*.json is: --record-dir, else the metrics directory."""
    return Path(args.record_dir) if args.record_dir else metrics_path(args.metrics).parent


def predicted_vs_measured(log: MetricsLog, args: argparse.Namespace) -> str | None:
    """The run record's `predicted_step_s` next to the measured phases (markdown), None without either."""
    folder = record_dir(args)
    return comparison(log, predicted_from_record(newest_record(folder) if folder.is_dir() else None))


def render(
    log: MetricsLog,
    verdicts: list[Verdict],
    args: argparse.Namespace,
    live: bool,
    gpus: list[GpuSample] | str = "",
    alerts: list[str] = (),
) -> Group:
    """Step table, verdicts and (live only) GPU alerts, GPU and disk lines as one renderable."""
    parts = [rich_step_table(log, args.last or 12)]
    times = rich_time_table(log)
    parts += [times] if times is not None else []
    predicted = predicted_vs_measured(log, args)
    parts += [Text(predicted)] if predicted else []
    parts.append(rich_verdict_table(verdicts))
    if log.notes:
        parts.append(Text(f"log notes ({len(log.notes)}): " + " | ".join(log.notes[-3:]), style="dim"))
    if live:
        parts += [Text(f"WARN  gpu: {a}", style="bold red") for a in alerts]
        parts.append(
            Text(gpu_usage(gpus) + "\n" + disk_free(disk_paths(args)) + f"\nupdated {time.strftime('%H:%M:%S')}")
        )
    return Group(*parts)


def act_on_stop(
    log: MetricsLog, verdicts: list[Verdict], args: argparse.Namespace, plan: StopPlan
) -> str | None:
    """--end-on-stop: a status line while a STOP waits for its checkpoint; ends the run when it is on disk."""
    verdict = stop_verdict(verdicts)
    steps = log.steps()
    ckpt = latest_checkpoint(Path(args.ckpt_path))
    action = plan.update(verdict, steps[-1] if steps else None, ckpt)
    if action == "run":
        return None
    if action == "wait":
        return (
            f"STOP seen at step {plan.seen_at}: the run ends once a checkpoint at step >= {plan.seen_at} is in "
            f"{args.ckpt_path} (newest now: {ckpt})"
        )
    record = newest_record(record_dir(args))
    if record is None:
        raise StopError(
            f"no run_record_*.json in {record_dir(args)}: --end-on-stop needs the run record's driver_pid"
        )
    entry = end_run(record, plan, ckpt)  # type: ignore[arg-type]
    raise RunEnded(
        f"ended the run (driver pid {entry['driver_pid']}) after {entry['checkpoint']}: {entry['reason']}"
    )


class RunEnded(Exception):
    """--end-on-stop ended the run; the message says where and why."""


def follow(args: argparse.Namespace, console: Console) -> int:
    """Live view until Ctrl-C (or, with --end-on-stop, until it ends the run: exit 2); waits for the metrics."""
    path = metrics_path(args.metrics)
    log, tail = MetricsLog(path=path), JsonlTail(path)
    watch = GpuWatch(mem_warn=args.gpu_mem_warn, idle_seconds=args.gpu_idle_minutes * 60)
    resets = 0
    plan = StopPlan()
    with Live(Text(f"waiting for {path} ..."), console=console, refresh_per_second=1) as live:
        try:
            while True:
                lines = tail.read_new()
                if tail.resets != resets:  # the file was truncated or replaced: start over
                    log, resets = MetricsLog(path=path), tail.resets
                feed_lines(log, lines)
                gpus = gpu_samples()
                alerts = watch.update(time.monotonic(), gpus)
                if log.records:
                    spikes, _ = read_spikes(args.spike_log or spike_log_path(args.metrics))
                    verdicts = diagnose(log, spikes, thresholds(args))
                    view = render(log, verdicts, args, live=True, gpus=gpus, alerts=alerts)
                    line = act_on_stop(log, verdicts, args, plan) if args.end_on_stop else None
                    live.update(Group(view, Text(line, style="bold red")) if line else view)
                elif alerts:
                    live.update(Text(f"waiting for {path} ...\n" + "\n".join(f"WARN  gpu: {a}" for a in alerts)))
                time.sleep(args.interval)
        except KeyboardInterrupt:
            return 0
        except RunEnded as e:
            live.stop()
            print(f"monitor: {e}", file=sys.stderr)
            return 2
        except StopError as e:
            live.stop()
            print(f"monitor: cannot end the run: {e}", file=sys.stderr)
            return 3


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if args.run or not args.metrics:
        try:
            run = resolve(REPO_ROOT, args.run)
        except (FileNotFoundError, ValueError) as e:
            build_parser().error(f"no metrics directory: pass one, --run RUN_NAME or set METRICS_LOG_DIR ({e})")
        args.metrics = str(run.metrics_dir)
        args.ckpt_path = args.ckpt_path or (str(run.ckpt_path) if run.ckpt_path else None)
        args.disk = args.disk or [str(p) for p in (run.save_path, run.ckpt_path, run.metrics_dir) if p]
        print(f"monitor: run {run.name}{'' if args.run else ' (the latest of this checkout)'}: {args.metrics}",
              file=sys.stderr)
    console = Console()
    if args.end_on_stop and not (args.follow and args.ckpt_path):
        build_parser().error(
            "--end-on-stop needs --follow and the checkpoint directory (--ckpt-path or CKPT_PATH)"
        )
    if args.follow:
        return follow(args, console)
    try:
        log = read_metrics(args.metrics)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.calibrate:
        from rft.monitor.calibrate import write_calibration

        folder = record_dir(args)
        try:
            found = newest_record(folder) if folder.is_dir() else None
            record = json.loads(found.read_text(encoding="utf-8")) if found else None
            print(write_calibration(log, record, Path(args.calibrate), args.metrics))
        except ValueError as e:
            print(f"error: --calibrate: {e}", file=sys.stderr)
            return 2
        return 0
    spikes, spike_notes = read_spikes(args.spike_log or spike_log_path(args.metrics))
    verdicts = diagnose(log, spikes, thresholds(args))
    for note in log.notes + spike_notes:
        print(f"note: {note}", file=sys.stderr)
    if args.plot:
        from rft.monitor.dashboard import plot_dashboard  # matplotlib only when asked for

        plot_dashboard(log, spikes, args.plot, thresholds(args))
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.table:
        print(markdown_table(log, args.last))
        print()
        print(markdown_summary(log, verdicts))
        print()
        print(markdown_time_table(log, args.last))
        predicted = predicted_vs_measured(log, args)
        if predicted:
            print()
            print(predicted)
    elif args.check:
        for v in verdicts:
            line = f"{v.status:7} {v.group}: {v.check}: {v.evidence}"
            print(line + (f" -> {v.action}" if v.action and v.status not in ("PASS", "INFO") else ""))
    elif not args.plot:
        console.print(render(log, verdicts, args, live=False))
    return exit_code(verdicts) if args.check else 0


def run() -> None:
    """Exit with main()'s status; output piped into head/less that closed early is not an error."""
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(0)


if __name__ == "__main__":
    run()
