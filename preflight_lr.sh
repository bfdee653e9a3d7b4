#!/usr/bin/env bash
# Pre-flight check of OpenRLHF 0.9.3's actor LR schedule; exit 1 (with the reason) when it is unusable.
# Usage: POOL=400 NS=8 TBS=16 EP=1 WARMUP=0.05 LR=5e-7 bash preflight_lr.sh   |   bash preflight_lr.sh <OpenRLHF flags>
set -euo pipefail
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"
exec "$PYTHON" -m rft.plan.lr_schedule "$@"
