"""Per-step tables of a run: rich (terminal) and markdown (research log / attempt notes), with trends."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.table import Table

from rft.monitor.diagnosis import Verdict, fmt, trend
from rft.monitor.logs import MetricsLog

# (header, display name, kind) in the order the issue lists them; kind picks the number format.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("reward", "reward_mean", "frac"),
    ("correct", "correctness", "frac"),
    ("boxed", "has_boxed", "frac"),
    ("grad_norm", "grad_norm", "num"),
    ("kl", "kl", "num"),
    ("ppo_kl", "ppo_kl", "num"),
    ("clip", "ppo_clip_ratio", "frac"),
    ("entropy", "entropy", "num"),
    ("resp_len", "response_length", "len"),
    ("trunc", "truncated", "frac"),
    ("vllm_kl", "vllm_kl", "num"),
    ("mm_kl", "mismatch_kl", "num"),
    ("mm_kl<512", "mismatch_kl_pos0_512", "num"),
    ("mm_kl<2k", "mismatch_kl_pos512_2048", "num"),
    ("mm_kl>2k", "mismatch_kl_pos2048_", "num"),
    ("out_band", "mismatch_out_of_band", "frac"),
    ("is_clip", "mismatch_is_clipped", "frac"),
    ("mm_max", "mismatch_abs_max", "num"),
    ("uniform", "uniform_group_share", "frac"),
)
BARS = "▁▂▃▄▅▆▇█"
STATUS_STYLE = {
    "PASS": "green",
    "INFO": "cyan",
    "MISSING": "dim",
    "WARN": "yellow",
    "FAIL": "bold red",
    "STOP": "bold red",
}


def cell(value: float | None, kind: str) -> str:
    """Format one value by column kind; None -> '-'."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if kind == "frac":
        return f"{value:.3f}"
    if kind == "len":
        return f"{value:.0f}"
    return fmt(value)


def columns(log: MetricsLog) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Columns present in the log (metric columns, then one per eval key) and the names that are missing."""
    present = [c for c in COLUMNS if log.key_for(c[1])]
    missing = [c[1] for c in COLUMNS if not log.key_for(c[1])]
    evals = [(k.removeprefix("eval_"), k, "frac") for k in log.eval_keys()]
    return present + evals, missing


def value_at(log: MetricsLog, step: int, name: str) -> float | None:
    """A metric's value at one step (display name or raw key), or None."""
    key = log.key_for(name) or name
    return log.records.get(step, {}).get(key)


def sparkline(values: Sequence[float], width: int = 12) -> str:
    """Unicode bars for the last `width` finite values."""
    vals = [v for v in values if math.isfinite(v)][-width:]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    if hi == lo:
        return BARS[3] * len(vals)
    return "".join(BARS[min(7, int((v - lo) / (hi - lo) * 8))] for v in vals)


def arrow(points: Sequence[tuple[int, float]]) -> str:
    """Up/down arrow when the least-squares slope is > 2 standard errors from zero, else flat."""
    slope, se = trend(points)
    if not math.isfinite(se) or abs(slope) <= 2 * se:
        return "→"
    return "↑" if slope > 0 else "↓"


def _md(text: str) -> str:
    """Escape pipes for a markdown table cell."""
    return text.replace("|", "\\|")


def markdown_table(log: MetricsLog, last: int | None = None) -> str:
    """Markdown per-step table (last `last` steps), steps without metrics skipped, missing metrics listed."""
    cols, missing = columns(log)
    steps = log.steps()[-last:] if last else log.steps()
    lines = ["| step | " + " | ".join(h for h, _, _ in cols) + " |", "|---:|" + "---:|" * len(cols)]
    for s in steps:
        vals = [value_at(log, s, name) for _, name, _ in cols]
        if all(v is None for v in vals):
            continue
        lines.append(
            f"| {s} | " + " | ".join(cell(v, kind) for v, (_, _, kind) in zip(vals, cols, strict=True)) + " |"
        )
    if missing:
        lines.append("")
        lines.append("Missing from the log: " + ", ".join(f"`{m}`" for m in missing))
    return "\n".join(lines)


def markdown_summary(log: MetricsLog, verdicts: Sequence[Verdict]) -> str:
    """Per-metric first/last/min/max and trend, then the verdicts, as markdown."""
    cols, _ = columns(log)
    steps = log.steps()
    out = [f"Steps {steps[0]}-{steps[-1]} ({len(steps)} logged)" if steps else "No steps logged", ""]
    out += ["| metric | first | last | min | max | trend | |", "|---|---:|---:|---:|---:|:---:|---|"]
    for header, name, kind in cols:
        pts = log.series(name)
        if not pts:
            continue
        vals = [v for _, v in pts]
        slope, _ = trend(pts)
        out.append(
            f"| {header} | {cell(vals[0], kind)} | {cell(vals[-1], kind)} | {cell(min(vals), kind)} | "
            f"{cell(max(vals), kind)} | {arrow(pts)} {fmt(slope)}/step | {sparkline(vals, 20)} |"
        )
    out += ["", "| status | check | evidence | action |", "|---|---|---|---|"]
    for v in verdicts:
        out.append(
            f"| {v.status} | {v.check} | {_md(v.evidence)} | {_md(v.action)} |"
        )
    return "\n".join(out)


def rich_step_table(log: MetricsLog, last: int = 12) -> Table:
    """Rich table of the last steps plus a trend row (sparkline and arrow per column)."""
    cols, missing = columns(log)
    caption = ("missing: " + ", ".join(missing)) if missing else None
    run = log.path.parent.name if log.path else "run"
    table = Table(title=f"{run}: {len(log.steps())} steps", caption=caption, header_style="bold")
    table.add_column("step", justify="right")
    for header, _, _ in cols:
        table.add_column(header, justify="right")
    for s in log.steps()[-last:]:
        table.add_row(str(s), *(cell(value_at(log, s, name), kind) for _, name, kind in cols))
    trends = []
    for _, name, _ in cols:
        pts = log.series(name)
        trends.append(f"{arrow(pts)}{sparkline([v for _, v in pts], 6)}" if pts else "")
    table.add_row("trend", *trends, style="italic")
    return table


def rich_verdict_table(verdicts: Sequence[Verdict]) -> Table:
    """Rich table of verdicts, coloured by status."""
    table = Table(title="health", header_style="bold", show_lines=False)
    for name in ("status", "check", "evidence", "action"):
        table.add_column(name, overflow="fold")
    for v in verdicts:
        table.add_row(f"[{STATUS_STYLE[v.status]}]{v.status}[/]", v.check, v.evidence, v.action)
    return table
