"""A `spare.py watch` state file (checkpoint_eval.json): a baseline and one evaluated checkpoint above it."""

from __future__ import annotations

import json
from pathlib import Path

CELL = {
    "dataset": "ood",
    "mode": "greedy_pass@1",
    "headline": "pass@1",
    "figures": {"pass@1": {"value": 0.5, "ci95": [0.4, 0.6]}},
    "rates": {"boxed": 1.0},
}


def write_watch_state(run_dir: Path) -> Path:
    """checkpoint_eval.json in `run_dir` as the watch writes it: base at 50%, global_step10_hf at 60% (+10 pp)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    step10 = {**CELL, "figures": {"pass@1": {"value": 0.6, "ci95": [0.5, 0.7]}},
              "vs_baseline": {"baseline": "base", "delta": 0.1, "ci95": [0.02, 0.18]}}
    state = {"baseline": {"name": "base", "cells": [CELL]},
             "checkpoints": {"global_step10_hf": {"step": 10, "status": "evaluated", "log": "l", "cells": [step10]}}}
    path = run_dir / "checkpoint_eval.json"
    path.write_text(json.dumps(state))
    return path
