#!/usr/bin/env bash
# Watch a GRPO run: live table (--follow), verdicts with exit code (--check), dashboard (--plot PNG), markdown (--table).
# Usage: bash monitor.sh [METRICS_DIR | --run RUN_NAME] [--follow|--check|--plot out.png|--table] [flags]
# Without either: the latest run this checkout launched (runs/*/run.json). python -m rft.monitor --help
set -euo pipefail

# The launch scripts' interpreter and PYTHONPATH (scripts/launch_lib.sh), so the monitor runs where training does.
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"
exec "$PYTHON" -m rft.monitor "$@"
