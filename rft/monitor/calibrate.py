"""A finished run's measured seconds per phase turned into the step-time model's figures (`--calibrate FILE`):
a device-figures file `RFT_DEVICE_FIGURES` reads, so the next dry run predicts from what this run measured."""

from __future__ import annotations

import datetime
from pathlib import Path

from rft.monitor.logs import MetricsLog
from rft.monitor.step_phases import mean_seconds, timed_steps
from rft.plan.step_time import calibrate, figures_text


def openrlhf_argv(record: dict) -> list[str]:
    """The OpenRLHF flags of a run record's command (what follows the launcher's own prefix)."""
    command = list(record.get("command") or [])
    first = next((i for i, t in enumerate(command) if t.startswith("--")), len(command))
    return command[first:]


def measured(log: MetricsLog) -> tuple[dict[str, float], list[int]]:
    """Mean seconds per phase over the timed steps after the first (its start-up is not a step's cost)."""
    steps = timed_steps(log)
    steps = steps[1:] if len(steps) > 1 else steps
    if not steps:
        raise ValueError("no step of this run holds time_step_s: nothing to calibrate from")
    return mean_seconds(log, steps), steps


def write_calibration(log: MetricsLog, record: dict | None, path: Path, run: str) -> str:
    """Calibrate on `log` and write the figures file to `path`; returns a one-line summary."""
    if record is None:
        raise ValueError("no run_record_*.json: calibration needs the run's command (--record-dir)")
    means, steps = measured(log)
    figures = calibrate(openrlhf_argv(record), means)
    day = datetime.date.today().isoformat()
    source = f"calibrated on {run}: mean of steps {steps[0]}-{steps[-1]} ({len(steps)}), {day}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(figures_text(figures, source), encoding="utf-8")
    return (f"wrote {path}: {', '.join(f'{k} = {v:.4g}' for k, v in sorted(figures.items()))} (measured step "
            f"{means['step']:.2f} s); RFT_DEVICE_FIGURES={path} for the next dry run")
