#!/usr/bin/env bash
# Pre-flight check of OpenRLHF 0.9.3's actor LR schedule; exit 1 (with the reason) when it is unusable.
# Usage: bash preflight_lr.sh --pool 400 --n_samples_per_prompt 8 --train_batch_size 16 --rollout_batch_size 16 \
#   --num_episodes 1 --lr_warmup_ratio 0.05 --actor_learning_rate 5e-7
# Any OpenRLHF flag, as on a launch script's command line; --pool N instead of counting --prompt_data; --help.
set -euo pipefail
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"
exec "$PYTHON" -m rft.plan.lr_schedule "$@"
