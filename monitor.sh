#!/usr/bin/env bash
# Watch a GRPO run: live table (--follow), verdicts with exit code (--check), dashboard (--plot PNG), markdown (--table).
# Usage: bash monitor.sh [METRICS_DIR] [--follow|--check|--plot out.png|--table] [flags]   (python -m rft.monitor --help)
set -euo pipefail

# The launch scripts' interpreter and PYTHONPATH (scripts/launch_lib.sh), so the monitor runs where training does.
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"
# Without a directory and without METRICS_LOG_DIR: the latest run of this checkout, looked for where the launch
# scripts put it (rft_metrics_globs: $SCRATCH/rft_metrics/* and runs/*/metrics).
RFT_METRICS_GLOBS="$(rft_metrics_globs)"
export RFT_ROOT RFT_METRICS_GLOBS

exec "$PYTHON" -m rft.monitor "$@"
