"""The latest run of a checkout: the newest metrics directory, among the launch scripts' locations, that this
checkout launched (under it, or named by the run record the launcher wrote there)."""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path

from rft.io import flag_value
from rft.launch.record import newest_record
from rft.monitor.logs import METRICS_FILE


@dataclass(frozen=True)
class LatestRun:
    """A run's metrics directory, its newest run record (None if it has none) and when it last wrote."""

    metrics_dir: Path
    record: dict | None
    mtime: float

    def ckpt_path(self) -> str | None:
        """--ckpt_path of the recorded command, if any."""
        return flag_value((self.record or {}).get("command") or [], "--ckpt_path")


def _read_record(path: Path | None) -> tuple[dict | None, float]:
    """(the run record at `path`, None when absent or unreadable; its mtime, 0 when absent)."""
    if path is None:
        return None, 0.0
    try:
        return json.loads(path.read_text(encoding="utf-8")), path.stat().st_mtime
    except (OSError, json.JSONDecodeError):
        return None, path.stat().st_mtime


def of_checkout(d: Path, record: dict | None, root: Path) -> bool:
    """True when `d` lies under `root`, or its run record was written by a launch from `root`."""
    if d.resolve().is_relative_to(root.resolve()):
        return True
    if not record:
        return False
    if record.get("repo"):
        return Path(record["repo"]).resolve() == root.resolve()
    return f"{root.resolve()}/" in str(record.get("command_text", ""))  # without "repo": a path under root in the command


def find_latest(root: Path, globs: list[str]) -> LatestRun | None:
    """The most recently written run directory matching `globs` (metrics file or run record) of checkout `root`."""
    found: list[LatestRun] = []
    for pattern in globs:
        for name in glob.glob(pattern):
            d = Path(name)
            metrics = d / METRICS_FILE
            record, rec_time = _read_record(newest_record(d))
            if not (metrics.is_file() or record):
                continue
            if of_checkout(d, record, root):
                found.append(LatestRun(d, record, max(rec_time, metrics.stat().st_mtime if metrics.is_file() else 0)))
    return max(found, key=lambda r: r.mtime, default=None)


def from_environment() -> tuple[LatestRun | None, list[str]]:
    """find_latest over $RFT_METRICS_GLOBS (one glob per line, set by monitor.sh) for the checkout $RFT_ROOT."""
    globs = [g for g in os.environ.get("RFT_METRICS_GLOBS", "").splitlines() if g.strip()]
    root = os.environ.get("RFT_ROOT")
    if not globs or not root:
        return None, globs
    return find_latest(Path(root), globs), globs
