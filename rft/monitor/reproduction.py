"""Two runs compared: their metrics in every key but the times, and their sample files byte for byte.

A run reproduced at one seed, or resumed from a checkpoint, must write what the original wrote; the figures
here say how much of it was compared (rows x keys) and list every difference, with no tolerance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rft.monitor.logs import METRICS_FILE


def is_time_key(key: str) -> bool:
    """A wall-clock figure, which no two runs share: timestamp, *_seconds, time_*, *_latency_s, *_per_s."""
    return key == "timestamp" or key.endswith(("_seconds", "_latency_s", "_per_s")) or key.startswith("time_")


def metric_rows(run_dir: Path) -> dict[tuple[str, int], dict]:
    """The rows of a run's metrics log keyed by (event, step) ("train" or "eval"); a repeated key keeps its last."""
    rows = {}
    for line in (run_dir / "metrics" / METRICS_FILE).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[(row.get("event", "train"), int(row["global_step"]))] = row
    return rows


@dataclass
class Comparison:
    """What was compared and every difference found: (what, a's value, b's value)."""

    rows: int = 0
    values: int = 0
    keys: set[str] = field(default_factory=set)
    differences: list[tuple[str, object, object]] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.rows} rows, {len(self.keys)} keys, {self.values} values compared: "
                f"{len(self.differences)} differences")


def compare_metrics(a: Path, b: Path, from_step: int = 0) -> Comparison:
    """Every row of run dirs `a` and `b` at or after `from_step`, in every key but the times, compared exactly."""
    rows_a, rows_b = metric_rows(a), metric_rows(b)
    out = Comparison()
    for key in sorted(set(rows_a) | set(rows_b)):
        if key[1] < from_step:
            continue
        ra, rb = rows_a.get(key), rows_b.get(key)
        if ra is None or rb is None:
            out.differences.append((f"{key[0]} row of step {key[1]}", ra is not None, rb is not None))
            continue
        out.rows += 1
        for name in sorted((set(ra) | set(rb)) - {"event", "global_step"}):
            if is_time_key(name):
                continue
            out.keys.add(name)
            out.values += 1
            if ra.get(name, "<missing>") != rb.get(name, "<missing>"):
                out.differences.append((f"{key[0]} step {key[1]} {name}", ra.get(name), rb.get(name)))
    return out


def sample_steps(run_dir: Path) -> dict[int, Path]:
    """A run's samples_step<N>.jsonl files by N."""
    return {int(p.stem.removeprefix("samples_step")): p for p in (run_dir / "samples").glob("samples_step*.jsonl")}


def compare_samples(a: Path, b: Path, from_step: int = 0) -> Comparison:
    """The sample files of run dirs `a` and `b` at or after `from_step`, byte for byte (one row per file)."""
    files_a, files_b = sample_steps(a), sample_steps(b)
    out = Comparison()
    for step in sorted(set(files_a) | set(files_b)):
        if step < from_step:
            continue
        fa, fb = files_a.get(step), files_b.get(step)
        out.keys.add(f"samples_step{step}")
        if fa is None or fb is None:
            out.differences.append((f"samples_step{step}.jsonl", fa is not None, fb is not None))
            continue
        out.rows += 1
        out.values += 1
        if fa.read_bytes() != fb.read_bytes():
            out.differences.append((f"samples_step{step}.jsonl", fa.stat().st_size, fb.stat().st_size))
    return out
