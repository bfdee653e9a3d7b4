#!/usr/bin/env bash
# Attempt 27: the attempt-26 recipe (train_grpo_20b.sh) with eps_clip tightened 0.2 -> 0.1 against ratio spikes.
# Usage: bash train_grpo_20b_a27.sh [--dry-run] [any OpenRLHF flag, which overrides these]
set -euo pipefail
export RUN_NAME="${RUN_NAME:-gpt-oss-20b-grpo-a27}"
exec bash "$(dirname "${BASH_SOURCE[0]}")/train_grpo_20b.sh" --eps_clip 0.1 "$@"
