#!/usr/bin/env bash
# Watch a GRPO run: live table (--follow), verdicts with exit code (--check), dashboard (--plot PNG), markdown (--table).
# Usage: bash monitor.sh [METRICS_DIR] [--follow|--check|--plot out.png|--table] [flags]   (python -m rft.monitor --help)
set -euo pipefail

# The launch scripts' interpreter and PYTHONPATH (scripts/launch_lib.sh), so the monitor runs where training does.
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"
export METRICS_LOG_DIR="${METRICS_LOG_DIR:-/mnt/scratch/rft_metrics_20b}"

exec "$PYTHON" -m rft.monitor "$@"
