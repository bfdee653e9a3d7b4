#!/usr/bin/env bash
# GRPO on ONE GPU, everything colocated (vLLM + DeepSpeed sleep), a 0.5B-1.5B Qwen-class model on GSM8K or the math pool.
# Usage: bash train_grpo_small.sh [--preset fast|1hour|3hour|full|trl] [--dry-run] [any OpenRLHF flag or --no_<flag>]
set -euo pipefail
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"

# --preset is ours (taken out here); everything else goes to OpenRLHF.
PRESET="${PRESET:-fast}"
PASS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --preset)
            [[ $# -ge 2 ]] || { echo "train_grpo_small.sh: --preset needs fast|1hour|3hour|full|trl" >&2; exit 2; }
            PRESET="$2"
            shift 2
            ;;
        --preset=*) PRESET="${1#--preset=}"; shift ;;
        *) PASS+=("$1"); shift ;;
    esac
done
# Presets (from the single-GPU guide): prompts used, episodes, samples per prompt, max new tokens, eval interval.
case "$PRESET" in
    fast) MAX_SAMPLES=200 EPISODES=1 N_SAMPLES=2 MAX_NEW=256 EVAL_STEPS=-1 ;;
    1hour) MAX_SAMPLES=500 EPISODES=2 N_SAMPLES=4 MAX_NEW=512 EVAL_STEPS=10 ;;
    3hour) MAX_SAMPLES=1000 EPISODES=3 N_SAMPLES=4 MAX_NEW=512 EVAL_STEPS=10 ;;
    full) MAX_SAMPLES=100000000 EPISODES=5 N_SAMPLES=4 MAX_NEW=512 EVAL_STEPS=25 ;;
    # The TRL single-GPU guide's recipe (Qwen2.5-Math-1.5B from an SFT checkpoint): 3 epochs, 2 samples per
    # prompt, 2048 new tokens; LoRA and the rest below.
    trl) MAX_SAMPLES=100000000 EPISODES=3 N_SAMPLES=2 MAX_NEW=2048 EVAL_STEPS=25 ;;
    *) echo "train_grpo_small.sh: unknown preset '$PRESET' (fast, 1hour, 3hour, full, trl)" >&2; exit 2 ;;
esac

MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
DATASET="${DATASET:-gsm8k}"
DATA_DIR="${DATA_DIR:-$RFT_ROOT/data}"
case "$DATASET" in
    gsm8k) DEFAULT_TRAIN="$DATA_DIR/gsm8k_rl_pool.jsonl" DEFAULT_EVAL="$DATA_DIR/gsm8k_eval.jsonl" ;;
    math) DEFAULT_TRAIN="$DATA_DIR/sft_rl_pool.jsonl" DEFAULT_EVAL="$DATA_DIR/probe_set_200_ood.jsonl" ;;
    # the TRL guide's CoT JSON, imported once: python -m rft.data.cot_json first_round_final_gsm8k_math.json
    cot) DEFAULT_TRAIN="$DATA_DIR/cot_rl_pool.jsonl" DEFAULT_EVAL="$DATA_DIR/cot_eval.jsonl" ;;
    *) echo "train_grpo_small.sh: DATASET=$DATASET: expected gsm8k, math or cot" >&2; exit 2 ;;
esac
PROMPT_DATA="${PROMPT_DATA:-$DEFAULT_TRAIN}"
EVAL_DATA="${EVAL_DATA:-$DEFAULT_EVAL}"
# The trl preset pays the guide's signed reward: +1 correct, -1 wrong, -0.5 no answer (a reward.toml of your own,
# or RFT_REWARD_CONFIG, wins).
[[ "$PRESET" == trl && -z "${RFT_REWARD_CONFIG:-}" && ! -f "$RFT_ROOT/reward.toml" ]] \
    && export RFT_REWARD_CONFIG="$RFT_ROOT/scripts/reward_signed.toml"
export RUN_NAME="${RUN_NAME:-small-grpo-$DATASET-$PRESET}"   # SMOKE=1: the launcher runs it as ...-smoke
rft_local_storage "$RUN_NAME"  # runs/$RUN_NAME/{metrics,samples} (OUT_ROOT); the model and checkpoints beside
SAVE_PATH="${SAVE_PATH:-$RUN_DIR/model}"
CKPT_PATH="${CKPT_PATH:-$RUN_DIR/ckpt}"

ARGS=(
    --pretrain "$MODEL"
    --prompt_data "$PROMPT_DATA"
    --input_key input
    --label_key label
    --apply_chat_template
    --max_samples "$MAX_SAMPLES"
    --prompt_max_len 512
    --generate_max_len "$MAX_NEW"
    # One GPU shared by actor, reference and one vLLM engine (placement group of 1).
    --actor_num_nodes 1
    --actor_num_gpus_per_node 1
    --ref_num_nodes 1
    --ref_num_gpus_per_node 1
    --vllm_num_engines 1
    --vllm_tensor_parallel_size 1
    --colocate_all_models
    # vLLM sleeps during training, so it may take half the GPU while generating.
    --vllm_enable_sleep
    --deepspeed_enable_sleep
    --vllm_gpu_memory_utilization 0.5
    --zero_stage 3
    --param_dtype bf16
    --gradient_checkpointing
    # Full-parameter training: a 0.5B-1.5B model fits, and it uses OpenRLHF's stock weight sync (no LoRA path).
    --advantage_estimator group_norm
    --actor_learning_rate 1e-6
    --lr_warmup_ratio 0.03
    --init_kl_coef 0.001
    --n_samples_per_prompt "$N_SAMPLES"
    # 8 prompts per step keeps the fast preset above the LR preflight's 20-step floor.
    --rollout_batch_size 8
    --micro_rollout_batch_size 8
    --train_batch_size 8
    --micro_train_batch_size 4
    --num_episodes "$EPISODES"
    --entropy_loss_coef 0
    # vllm_kl every step and TIS on it (docs/lora-sync.md#the-rollouttrainer-gap)
    --enable_vllm_is_correction
    --save_path "$SAVE_PATH"
    --ckpt_path "$CKPT_PATH"
    --save_steps 10
    --max_ckpt_num 2
    --logging_steps 1
)
if [[ "$PRESET" == trl ]]; then
    # The TRL guide: LoRA r16 / alpha 32 / dropout 0.05 on attention (its "~0.28% of parameters" at 1.5B),
    # KL 0.05, LR 5e-6, T 0.7, top_p 0.9; 4 per device x 4 accumulation = 16 samples per optimizer step
    # (8 prompts x 2). Warm-up 0.005 (TRL's default is none): the LR preflight's 20-step rule holds on GSM8K
    # and the CoT pool alike. Later flags win, so these replace the full-parameter recipe above.
    ARGS+=(
        --lora_rank 16
        --lora_alpha 32
        --lora_dropout 0.05
        --target_modules q_proj k_proj v_proj o_proj
        # a frozen base under ZeRO-3 needs the reentrant recompute (rft/launch/rules.py checkpointing_rule)
        --gradient_checkpointing_use_reentrant
        --init_kl_coef 0.05
        --actor_learning_rate 5e-6
        --lr_warmup_ratio 0.005
        --temperature 0.7
        --top_p 0.9
        --train_batch_size 16
        --micro_train_batch_size 4
    )
fi
if [[ "$EVAL_STEPS" != -1 ]]; then
    # Greedy pass@1 on the held-out set.
    ARGS+=(
        --eval_dataset "$EVAL_DATA"
        --eval_steps "$EVAL_STEPS"
        --eval_temperature 0.0
        --eval_n_samples_per_prompt 1
    )
fi

# Decided by the launcher (rft/launch/choices.py; --dry-run prints each): the reward (REWARD=em|judge|PATH), the
# LoRA sync of the trl preset (LORA_SYNC=merge|native), DYNAMIC_FILTER=1, resume (--no_load_checkpoint: fresh),
# SMOKE=1.
exec "$PYTHON" -m rft.launch --profile small -- "${ARGS[@]}" "${PASS[@]}"
