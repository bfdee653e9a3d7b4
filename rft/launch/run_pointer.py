"""Where a launched run's folders are: `runs/RUN_NAME/run.json` in the checkout, written by the launcher when it
launches, read by monitor.sh, spare.py and `python -m rft.attempt` (`--run NAME`, or the latest run without one).

`runs/` is git-ignored; in the single-GPU and CPU layouts it is also the run's own directory.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rft.io import atomic_write_json, flag_value

RUNS = "runs"
POINTER = "run.json"
METRICS_FILE = "training_metrics.jsonl"


@dataclass(frozen=True)
class RunPaths:
    """One launched run: its name, metrics directory, checkpoint and output paths, and the pointer they came from."""

    name: str
    metrics_dir: Path
    ckpt_path: Path | None
    save_path: Path | None
    pointer: Path

    def last_write(self) -> float:
        """When the run last wrote its metrics log (the pointer's time before its first step)."""
        metrics = self.metrics_dir / METRICS_FILE
        return max(self.pointer.stat().st_mtime, metrics.stat().st_mtime if metrics.is_file() else 0.0)


def pointer_path(root: Path, run_name: str) -> Path:
    """runs/RUN_NAME/run.json of checkout `root`."""
    return Path(root) / RUNS / run_name / POINTER


def write_pointer(root: Path, run_name: str, env: Mapping[str, str], flags: list[str]) -> Path:
    """Record where run `run_name` writes (METRICS_LOG_DIR, --ckpt_path, --save_path) under `root`/runs."""
    path = pointer_path(root, run_name)
    atomic_write_json(path, {
        "run_name": run_name,
        "metrics_dir": env.get("METRICS_LOG_DIR"),
        "ckpt_path": flag_value(flags, "--ckpt_path"),
        "save_path": flag_value(flags, "--save_path"),
        "launched": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    })
    return path


def read_pointer(path: Path) -> RunPaths:
    """The run a pointer file names; ValueError names the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a run pointer ({e})") from None
    if not isinstance(data, dict) or not data.get("metrics_dir"):
        raise ValueError(f"{path}: not a run pointer (no metrics_dir)")

    def optional(key: str) -> Path | None:
        return Path(data[key]) if data.get(key) else None

    return RunPaths(str(data.get("run_name") or path.parent.name), Path(data["metrics_dir"]),
                    optional("ckpt_path"), optional("save_path"), path)


def launched(root: Path) -> list[RunPaths]:
    """Every run `root` launched that has a readable pointer, by name."""
    runs = []
    for path in sorted((Path(root) / RUNS).glob(f"*/{POINTER}")):
        try:
            runs.append(read_pointer(path))
        except ValueError:
            continue
    return runs


def find_run(root: Path, name: str) -> RunPaths:
    """Run `name` of checkout `root`; FileNotFoundError lists the runs there are."""
    path = pointer_path(root, name)
    if not path.is_file():
        names = ", ".join(r.name for r in launched(root)) or "none yet"
        raise FileNotFoundError(f"no run {name!r}: {path} not found (the launcher writes it at launch; "
                                f"runs of this checkout: {names})")
    return read_pointer(path)


def latest_run(root: Path) -> RunPaths | None:
    """The run of `root` that wrote last, None when it launched none."""
    return max(launched(root), key=RunPaths.last_write, default=None)


def resolve(root: Path, name: str | None) -> RunPaths:
    """`--run NAME`, or the latest run without one; FileNotFoundError says what is missing."""
    if name:
        return find_run(root, name)
    run = latest_run(root)
    if run is None:
        raise FileNotFoundError(f"no run launched from this checkout yet ({Path(root) / RUNS}/*/{POINTER})")
    return run
