#!/usr/bin/env bash
# Watch a GRPO run: live table (--follow), verdicts with exit code (--check), dashboard (--plot PNG), markdown (--table).
# Usage: bash monitor.sh [METRICS_DIR] [--follow|--check|--plot out.png|--table] [flags]   (python -m rft.monitor --help)
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-$REPO_DIR/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON=python3
export METRICS_LOG_DIR="${METRICS_LOG_DIR:-/mnt/scratch/rft_metrics_20b}"
export PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}"

exec "$PYTHON" -m rft.monitor "$@"
