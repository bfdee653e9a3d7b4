"""Where a step's wall time goes, from the `time_*_s` keys: the time table (rich and markdown), each role's idle
share, and the predicted-vs-measured comparison against a step-time model's `predicted_step_s`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.table import Table

from rft.monitor.logs import MetricsLog
from rft.train.step_timer import PHASES, STEP_KEY, phase_key

OTHER = "other"
"""Step time in no measured phase (bookkeeping between phases: sample dumps, metrics lines, Ray calls)."""
PREDICTED_KEY = "predicted_step_s"
"""Run-record key of a step-time model's prediction: {phase: seconds}, phases as in PHASES (and optionally
"step" for the whole step)."""
DEFAULT_LAST = 8


def timed_steps(log: MetricsLog) -> list[int]:
    """Steps whose line holds `time_step_s`, ascending."""
    return [s for s in log.steps() if math.isfinite(log.records[s].get(STEP_KEY, math.nan))]


def phase_seconds(log: MetricsLog, step: int) -> dict[str, float]:
    """One step's seconds per phase (0.0 when absent), `other` (the rest of the step) and `step`."""
    row = log.records[step]
    out = {p: row.get(phase_key(p), 0.0) for p in PHASES}
    out["step"] = row[STEP_KEY]
    out[OTHER] = max(0.0, out["step"] - sum(out[p] for p in PHASES))
    return out


def mean_seconds(log: MetricsLog, steps: Sequence[int]) -> dict[str, float]:
    """Mean seconds per phase (and `other`, `step`) over `steps`."""
    rows = [phase_seconds(log, s) for s in steps]
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} if rows else {}


def idle_shares(seconds: Mapping[str, float]) -> dict[str, float]:
    """The share of the step each role's devices wait in the synchronous layout: the vLLM devices all but
    generation; the trainer devices during generation and the reward."""
    step = seconds["step"]
    if step <= 0:
        return {"vllm": math.nan, "trainer": math.nan}
    return {
        "vllm": max(0.0, step - seconds["generate"]) / step,
        "trainer": min(step, seconds["generate"] + seconds["reward"]) / step,
    }


COLUMNS = (*PHASES, OTHER, "step")


def _row_cells(seconds: Mapping[str, float]) -> list[str]:
    """Seconds per column, then the two idle shares."""
    idle = idle_shares(seconds)
    return [f"{seconds[c]:.1f}" for c in COLUMNS] + [f"{idle['vllm']:.0%}", f"{idle['trainer']:.0%}"]


def _header() -> list[str]:
    """Column names after `step`: the phases, other, the whole step (total) and the idle shares."""
    return [*COLUMNS[:-1], "total", "vLLM idle", "trainer idle"]


def table_rows(log: MetricsLog, last: int = DEFAULT_LAST) -> list[tuple[str, list[str]]]:
    """(label, cells): the last `last` timed steps, their mean and each phase's share of the mean step."""
    steps = timed_steps(log)[-last:]
    if not steps:
        return []
    rows = [(str(s), _row_cells(phase_seconds(log, s))) for s in steps]
    mean = mean_seconds(log, steps)
    rows.append((f"mean {len(steps)}", _row_cells(mean)))
    share = [f"{mean[c] / mean['step']:.0%}" if mean["step"] > 0 else "-" for c in COLUMNS]
    rows.append(("share", share + ["", ""]))
    return rows


def throughput_line(log: MetricsLog, last: int = DEFAULT_LAST) -> str:
    """Mean tokens/s and the response-length tail of the last steps, one line."""
    steps = timed_steps(log)[-last:]
    parts = []
    for key, label in (("tokens_generated_per_s", "generated tok/s"), ("tokens_trained_per_s", "trained tok/s"),
                       ("response_len_p50", "response p50"), ("response_len_p90", "p90"),
                       ("response_len_max", "max")):
        vals = [log.records[s][key] for s in steps if math.isfinite(log.records[s].get(key, math.nan))]
        if vals:
            parts.append(f"{label} {sum(vals) / len(vals):.0f}")
    return ", ".join(parts)


def rich_time_table(log: MetricsLog, last: int = DEFAULT_LAST) -> Table | None:
    """Rich table of seconds per phase of the last steps, their mean and shares; None without time keys."""
    rows = table_rows(log, last)
    if not rows:
        return None
    table = Table(title="where the step goes (seconds)", caption=throughput_line(log, last) or None,
                  header_style="bold")
    table.add_column("step", justify="right")
    for name in _header():
        table.add_column(name, justify="right")
    for label, cells in rows:
        table.add_row(label, *cells, style="italic" if not label.isdigit() else None)
    return table


def markdown_time_table(log: MetricsLog, last: int | None = None) -> str:
    """The time table as markdown (every timed step unless `last`); a line saying so without time keys."""
    rows = table_rows(log, last or len(timed_steps(log)) or 1)
    if not rows:
        return "No `time_*_s` keys in the log (a run before step timing)."
    lines = ["| step | " + " | ".join(_header()) + " |", "|---:|" + "---:|" * len(_header())]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    extra = throughput_line(log, last or len(timed_steps(log)))
    return "\n".join(lines + ([f"\n{extra}"] if extra else []))


def predicted_vs_measured(
    predicted: Mapping[str, float], measured: Mapping[str, float]
) -> list[tuple[str, float, float, float]]:
    """(phase, predicted s, measured s, measured / predicted) for every predicted phase the run measured;
    the ratio is NaN where the prediction is 0."""
    out = []
    for phase, pred in predicted.items():
        if phase not in measured:
            continue
        meas = measured[phase]
        out.append((phase, float(pred), float(meas), meas / pred if pred > 0 else math.nan))
    return out


def format_predicted_vs_measured(predicted: Mapping[str, float], measured: Mapping[str, float]) -> str:
    """Markdown table of predicted vs measured seconds per phase with the ratio (measured / predicted)."""
    lines = ["| phase | predicted s | measured s | measured / predicted |", "|---|---:|---:|---:|"]
    for phase, pred, meas, ratio in predicted_vs_measured(predicted, measured):
        lines.append(f"| {phase} | {pred:.1f} | {meas:.1f} | {ratio:.2f} |")
    return "\n".join(lines)


def predicted_from_record(record: Path | None) -> dict[str, float] | None:
    """`predicted_step_s` of a run record: {phase: seconds}; None when absent or not that shape."""
    if record is None or not record.exists():
        return None
    try:
        value = json.loads(record.read_text(encoding="utf-8")).get(PREDICTED_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(value, dict):
        return None
    out = {str(k): float(v) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return out or None


def comparison(log: MetricsLog, predicted: Mapping[str, float] | None, last: int = DEFAULT_LAST) -> str | None:
    """Predicted vs measured (mean of the last `last` timed steps) as markdown, or None without both."""
    steps = timed_steps(log)[-last:]
    if not predicted or not steps:
        return None
    head = f"Predicted vs measured (mean of steps {steps[0]}-{steps[-1]}):"
    return head + "\n\n" + format_predicted_vs_measured(predicted, mean_seconds(log, steps))
