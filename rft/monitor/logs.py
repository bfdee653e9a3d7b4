"""Tolerant readers for the trainer's metrics and spike logs (JSONL written while a run is live).

The writer (rft/train/metrics.py, not imported here: it needs torch) blanks non-finite values to null and writes
held-out eval results as a second record for the same global_step. Real logs also contain a partially
written last line, lines from a crashed writer, NaN/inf, records without some keys, and restarts that
repeat steps; the reader keeps what it can, notes what it skipped, and lets the last occurrence of a
step win (a restart supersedes the abandoned steps)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

METRICS_FILE = "training_metrics.jsonl"
SPIKE_FILE = "spike_log.jsonl"

# Display name -> log keys that carry it, first present wins. OpenRLHF 0.9.3 keys (`reward`, `kl`,
# `entropy_loss`, `truncated`, `group_reward_std`, ...) sit next to the keys our patches add.
ALIASES: dict[str, tuple[str, ...]] = {
    "reward_mean": ("reward_mean", "reward"),
    "correctness": ("correctness",),
    "has_boxed": ("has_boxed",),
    "has_answer": ("has_answer",),
    "grad_norm": ("grad_norm",),
    "policy_loss": ("policy_loss",),
    "kl": ("kl",),
    "logprobs_diff": ("logprobs_diff",),
    "vllm_kl": ("vllm_kl",),
    "ppo_kl": ("ppo_kl",),
    "ppo_clip_ratio": ("ppo_clip_ratio",),
    "entropy": ("entropy_mean", "entropy_loss", "entropy"),
    "response_length": ("response_length", "response_length_mean"),
    "truncated": ("truncated", "truncated_response", "response_clip_ratio"),
    "advantage_std": ("advantage_std", "group_reward_std"),
    "actor_lr": ("actor_lr",),
    "logratio_raw_max": ("logratio_raw_max", "log_ratio_raw_max"),
    "ratio_max": ("ratio_max",),
    "logratio_abs_p99": ("logratio_abs_p99", "log_ratio_abs_p99"),
}


def _number(value: object) -> float | None:
    """A JSON value as float (null = a non-finite value the writer blanked -> NaN); None if not numeric."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in {"nan", "inf", "-inf", "infinity", "-infinity"}:
        return float(value.strip().lower().replace("infinity", "inf"))
    return None


def _is_eval_key(key: str) -> bool:
    """Keys of an eval record: eval results and the bookkeeping that comes with them."""
    return key.startswith("eval_") or key in ("event", "timestamp")


def _step_of(obj: dict) -> int | None:
    """The record's global step (`global_step`, else `step`), or None."""
    for key in ("global_step", "step"):
        value = _number(obj.get(key))
        if value is not None and math.isfinite(value):
            return int(value)
    return None


@dataclass
class MetricsLog:
    """Per-step metrics of one run: `records[step][key] = value` (non-finite values kept)."""

    path: Path | None = None
    records: dict[int, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    restarts: int = 0
    _last_step: int | None = None

    def add(self, obj: object, where: str) -> None:
        """Fold one parsed line into the log (restart = step going backwards; later records win)."""
        if not isinstance(obj, dict):
            self.notes.append(f"{where}: not a JSON object, skipped")
            return
        step = _step_of(obj)
        if step is None:
            self.notes.append(f"{where}: no global_step, skipped")
            return
        if self._last_step is not None and step < self._last_step:
            self.restarts += 1
            dropped = [s for s in self.records if s >= step]
            for s in dropped:
                del self.records[s]
            self.notes.append(
                f"{where}: restart at step {step}; steps {min(dropped, default=step)}-"
                f"{max(dropped, default=step)} of the earlier run superseded"
            )
        self._last_step = step
        row = self.records.setdefault(step, {})
        for key, value in obj.items():
            number = _number(value)
            if number is not None and key not in ("global_step", "step"):
                row[key] = number

    def steps(self) -> list[int]:
        """Logged steps, ascending."""
        return sorted(self.records)

    def train_steps(self) -> list[int]:
        """Steps with a training metric, ascending: not a step holding only eval results (the step-0 baseline)."""
        return [s for s in self.steps() if any(not _is_eval_key(k) for k in self.records[s])]

    def keys(self) -> set[str]:
        """Every metric key seen in any record."""
        return {k for row in self.records.values() for k in row}

    def key_for(self, name: str) -> str | None:
        """The log key that carries display name `name` (see ALIASES), or None if absent."""
        present = self.keys()
        for key in ALIASES.get(name, (name,)):
            if key in present:
                return key
        return None

    def series(self, name: str, *, finite: bool = True) -> list[tuple[int, float]]:
        """(step, value) pairs of a metric, ascending; non-finite values dropped unless finite=False."""
        key = self.key_for(name)
        if key is None:
            return []
        out = [(s, self.records[s][key]) for s in self.steps() if key in self.records[s]]
        return [(s, v) for s, v in out if math.isfinite(v)] if finite else out

    def values(self, name: str) -> list[float]:
        """Finite values of a metric in step order."""
        return [v for _, v in self.series(name)]

    def latest(self, name: str) -> tuple[int, float] | None:
        """The last (step, value) of a metric, non-finite included, or None."""
        series = self.series(name, finite=False)
        return series[-1] if series else None

    def eval_keys(self) -> list[str]:
        """Keys of held-out eval results (`eval_<datasource>_pass1`, ...), sorted."""
        return sorted(k for k in self.keys() if k.startswith("eval_") and k != "eval_global_step")


class JsonlTail:
    """Incremental reader of a growing JSONL file: complete lines only, survives truncation/rotation."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.offset = 0
        self.lineno = 0
        self.pending = b""
        self.inode: int | None = None
        self.resets = 0

    def read_new(self) -> list[tuple[str, str]]:
        """(line text, 'file:line') for each newly completed line since the last call."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return []
        if stat.st_ino != self.inode or stat.st_size < self.offset:
            self.resets += self.inode is not None
            self.offset, self.lineno, self.pending, self.inode = 0, 0, b"", stat.st_ino
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        self.offset += len(chunk)
        data = self.pending + chunk
        *complete, self.pending = data.split(b"\n")
        out = []
        for raw in complete:
            self.lineno += 1
            out.append((raw.decode("utf-8", errors="replace"), f"{self.path}:{self.lineno}"))
        return out

    def pending_line(self) -> tuple[str, str] | None:
        """The trailing text not yet ended by a newline (maybe a partial write), with its location."""
        if not self.pending.strip():
            return None
        return self.pending.decode("utf-8", errors="replace"), f"{self.path}:{self.lineno + 1}"


def _parse(text: str) -> object:
    """json.loads that also accepts bare NaN/Infinity (Python's json does by default)."""
    return json.loads(text)


def feed_lines(log: MetricsLog, lines: list[tuple[str, str]]) -> None:
    """Parse complete lines into `log`, noting (not raising on) bad ones."""
    for text, where in lines:
        if not text.strip():
            continue
        try:
            obj = _parse(text)
        except json.JSONDecodeError as e:
            log.notes.append(f"{where}: not valid JSON ({e.msg}), skipped")
            continue
        log.add(obj, where)


def feed_pending(log: MetricsLog, tail: JsonlTail) -> None:
    """Use a newline-less last line if it parses; otherwise note it as partially written."""
    pending = tail.pending_line()
    if pending is None:
        return
    text, where = pending
    try:
        obj = _parse(text)
    except json.JSONDecodeError:
        log.notes.append(f"{where}: partially written last line ignored")
        return
    log.add(obj, where)


def metrics_path(path: str | os.PathLike) -> Path:
    """The metrics JSONL for a run directory or a direct file path."""
    path = Path(path)
    return path / METRICS_FILE if path.is_dir() else path


def read_metrics(path: str | os.PathLike) -> MetricsLog:
    """Read a metrics JSONL (or the one in a directory); raises FileNotFoundError naming the path."""
    file = metrics_path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no metrics log (set METRICS_LOG_DIR or pass the run's metrics dir)")
    log = MetricsLog(path=file)
    tail = JsonlTail(file)
    feed_lines(log, tail.read_new())
    feed_pending(log, tail)
    return log


@dataclass
class Spike:
    """One spike-log entry: the step, its grad norm, and the remaining numeric ratio statistics."""

    step: int
    grad_norm: float | None
    stats: dict[str, float]
    prompt_hashes: list[str]


def read_spikes(path: str | os.PathLike | None) -> tuple[list[Spike], list[str]]:
    """Spike-log entries (restarts: the later run's entries win) and notes; missing file = none."""
    if path is None or not Path(path).is_file():
        return [], []
    tail = JsonlTail(path)
    lines = tail.read_new()
    pending = tail.pending_line()
    notes: list[str] = []
    spikes: list[Spike] = []
    last_step: int | None = None
    for i, (text, where) in enumerate(lines + ([pending] if pending else [])):
        if not text.strip():
            continue
        try:
            obj = _parse(text)
        except json.JSONDecodeError:
            partial = pending is not None and i == len(lines)
            notes.append(
                f"{where}: "
                + ("partially written last line ignored" if partial else "not valid JSON, skipped")
            )
            continue
        step = _step_of(obj) if isinstance(obj, dict) else None
        if step is None:
            notes.append(f"{where}: no global_step, skipped")
            continue
        if last_step is not None and step < last_step:
            spikes = [s for s in spikes if s.step < step]
        last_step = step
        stats = {
            k: n for k, v in obj.items() if (n := _number(v)) is not None and k not in ("global_step", "step")
        }
        hashes = obj.get("prompt_hashes")
        spikes.append(
            Spike(
                step=step,
                grad_norm=stats.pop("grad_norm", None),
                stats=stats,
                prompt_hashes=[str(h) for h in hashes] if isinstance(hashes, list) else [],
            )
        )
    return spikes, notes


def spike_log_path(metrics_dir: str | os.PathLike) -> Path:
    """$SPIKE_LOG_PATH if set, else spike_log.jsonl next to the metrics log."""
    env = os.environ.get("SPIKE_LOG_PATH")
    if env:
        return Path(env)
    return metrics_path(metrics_dir).parent / SPIKE_FILE
