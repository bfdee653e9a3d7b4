#!/usr/bin/env bash
# Attempt 28 A/B, arm A: eps_clip 0.2 on the fixed 400-prompt pool, 1 episode = 200 scheduler steps (25 rollout steps).
# Usage: bash train_grpo_20b_a28a.sh [--dry-run] [any OpenRLHF flag, which overrides these]
set -euo pipefail
export RUN_NAME="${RUN_NAME:-gpt-oss-20b-grpo-a28a}"
RFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The seed-42 400-prompt subset written by prepare_sft_data.py.
export PROMPT_DATA="${PROMPT_DATA:-${DATA_DIR:-$RFT_ROOT/data}/sft_rl_pool_400.jsonl}"
ARGS=(
    --eps_clip 0.2
    # 400 prompts x 8 samples // 16 per optimizer step = 200 scheduler steps in one episode.
    --num_episodes 1
)
exec bash "$RFT_ROOT/train_grpo_20b.sh" "${ARGS[@]}" "$@"
