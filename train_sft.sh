#!/usr/bin/env bash
# LoRA SFT fallback for gpt-oss-20b on data/sft_train.jsonl (OpenRLHF's train_sft via the DeepSpeed launcher).
# Usage: bash train_sft.sh [--dry-run] [any OpenRLHF train_sft flag, or --no_<flag>, which overrides]   (only when \boxed{} rate < 95%)
set -euo pipefail
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"

MODEL="${MODEL:-openai/gpt-oss-20b}"
export RUN_NAME="${RUN_NAME:-gpt-oss-20b-sft}"
DATA_DIR="${DATA_DIR:-$RFT_ROOT/data}"
SFT_DATA="${SFT_DATA:-$DATA_DIR/sft_train.jsonl}"
SFT_EVAL="${SFT_EVAL:-$DATA_DIR/sft_dev.jsonl}"
# Paths as for GRPO; the launcher writes the run record to METRICS_LOG_DIR (OpenRLHF's SFT writes no metrics JSONL).
rft_storage "$RUN_NAME"
# GPUs the DeepSpeed launcher uses on this node.
export NUM_GPUS="${NUM_GPUS:-8}"

ARGS=(
    --pretrain "$MODEL"
    --dataset "$SFT_DATA"
    --eval_dataset "$SFT_EVAL"
    --input_key input
    --output_key output
    # Solutions end in \boxed{}; 4096 tokens covers NuminaMath solutions with the chat template.
    --max_len 4096
    --zero_stage 3
    --param_dtype bf16
    # gpt-oss attention sinks: eager only (flash_attention_2 and --packing_samples drop them).
    --attn_implementation eager
    # Same adapter shape as the RL runs, so the SFT adapter is a drop-in start point.
    --lora_rank 32
    --lora_alpha 64
    --target_modules q_proj k_proj v_proj o_proj
    # LoRA SFT: 1e-5 is the usual LoRA range; 2 epochs over 5k examples.
    --learning_rate 1e-5
    --lr_warmup_ratio 0.03
    --max_epochs 2
    --train_batch_size 64
    --micro_train_batch_size 1
    --apply_chat_template
    --gradient_checkpointing
    # ZeRO-3 with a frozen base needs the reentrant recompute (rft/launch/rules.py checkpointing_rule)
    --gradient_checkpointing_use_reentrant
    # an HF adapter per checkpoint, no DeepSpeed state (nothing to resume: the SFT fallback is short)
    --save_hf_ckpt
    --disable_ds_ckpt
    --save_path "$SAVE_PATH"
    --ckpt_path "$CKPT_PATH"
    --save_steps 50
    --eval_steps 50
    --max_ckpt_num 3
    --logging_steps 1
)

exec "$PYTHON" -m rft.launch --profile sft -- "${ARGS[@]}" "$@"
