#!/usr/bin/env bash
# Attempt 28 A/B, arm B: arm A (train_grpo_20b_a28a.sh) with eps_clip tightened to 0.1; nothing else differs.
# Usage: bash train_grpo_20b_a28b.sh [--dry-run] [any OpenRLHF flag, which overrides these]
set -euo pipefail
export RUN_NAME="${RUN_NAME:-gpt-oss-20b-grpo-a28b}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/train_grpo_20b_a28a.sh" --eps_clip 0.1 "$@"
