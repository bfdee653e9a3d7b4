#!/usr/bin/env bash
# GRPO (dr_grpo) LoRA training of gpt-oss-20b on one 8xH100 node: vLLM 2 engines x TP=2 on GPUs 0-3, actor ZeRO-3 on 4-7.
# Usage: bash train_grpo_20b.sh [--dry-run] [any OpenRLHF flag, or --no_<flag>, which overrides the script's] 2>&1 | tee train_20b.log
set -euo pipefail
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"

# Machine settings and paths (override from the environment).
MODEL="${MODEL:-openai/gpt-oss-20b}"
# The actor/reference load ACTOR_MODEL (default MODEL: MXFP4, dequantized in process by our actor.patch);
# point it at a bf16 copy from convert_mxfp4.py to skip that. vLLM always serves MODEL.
ACTOR_MODEL="${ACTOR_MODEL:-$MODEL}"
export RUN_NAME="${RUN_NAME:-gpt-oss-20b-grpo}"   # SMOKE=1: the launcher runs it as ...-smoke
DATA_DIR="${DATA_DIR:-$RFT_ROOT/data}"
PROMPT_DATA="${PROMPT_DATA:-$DATA_DIR/sft_rl_pool.jsonl}"
EVAL_DATA="${EVAL_DATA:-$DATA_DIR/probe_set_200_ood.jsonl}"
rft_storage "$RUN_NAME"  # SAVE_PATH, CKPT_PATH on $DATA_ROOT; METRICS_LOG_DIR, SAMPLES_LOG_DIR, SPIKE_LOG_PATH on $SCRATCH
# RAY_ADDRESS (if set) makes OpenRLHF join that cluster; unset starts a fresh local Ray.

ARGS=(
    --pretrain "$ACTOR_MODEL"
    --vllm_pretrain "$MODEL"
    --prompt_data "$PROMPT_DATA"
    --input_key input
    --label_key label
    # Rows hold problem + instruction; OpenRLHF ignores --input_template under the chat template.
    --apply_chat_template
    --prompt_max_len 1024
    --generate_max_len 4096
    # Held-out OOD probe: greedy_pass@1 every 5 rollout steps (temp 0 with n>1 only measures nondeterminism).
    --eval_dataset "$EVAL_DATA"
    --eval_steps 5
    --eval_temperature 0.0
    --eval_n_samples_per_prompt 1
    # Placement: 2 vLLM engines x TP=2 (MXFP4 native) on GPUs 0-3; actor + reference on GPUs 4-7
    # (colocated); more nodes: --actor_num_nodes/--ref_num_nodes/--vllm_num_engines.
    --vllm_num_engines 2
    --vllm_tensor_parallel_size 2
    --vllm_gpu_memory_utilization 0.85
    --actor_num_nodes 1
    --actor_num_gpus_per_node 4
    --ref_num_nodes 1
    --ref_num_gpus_per_node 4
    --colocate_actor_ref
    # 20b fits ZeRO-3 without CPU offload (21 GB/GPU of bf16 weights).
    --zero_stage 3
    --param_dtype bf16
    --gradient_checkpointing
    # Reentrant: with a frozen base under ZeRO-3, DeepSpeed 0.18.5 frees the frozen weights before the
    # non-reentrant recompute and the first backward raises CheckpointError (make gpu-check's trainer phase).
    --gradient_checkpointing_use_reentrant
    # gpt-oss attention sinks: eager honours them, flash_attention_2 drops them (never --packing_samples).
    --attn_implementation eager
    # LoRA on attention only (experts stay frozen: MoE routing stability); scaling alpha/rank = 2.
    --lora_rank 32
    --lora_alpha 64
    --target_modules q_proj k_proj v_proj o_proj
    # Attempt-26 recipe: dr_grpo, lr 5e-7, weak KL guard, group of 8, clip 0.2 (attempt scripts tighten it).
    --advantage_estimator dr_grpo
    --actor_learning_rate 5e-7
    --lr_warmup_ratio 0.05
    --init_kl_coef 0.001
    --n_samples_per_prompt 8
    --rollout_batch_size 16
    --micro_rollout_batch_size 1
    --train_batch_size 16
    --micro_train_batch_size 1
    --eps_clip 0.2
    --num_episodes 20
    # Entropy logged, not optimised.
    --entropy_loss_coef 0
    # The rollout/trainer gap, every step: vllm_kl (the number that proves the sync) and 0.9.3's truncated importance
    # sampling on it (TIS, weights clamped to [0.5, 5]): MXFP4 engine vs bf16 trainer kernels never agree exactly
    # (docs/lora-sync.md#the-rollouttrainer-gap). --no_enable_vllm_is_correction drops both (attempts 26-28).
    --enable_vllm_is_correction
    # Checkpoints on the data disk every 5 rollout steps (~1 h at 10-13 min/step; an HF adapter for every probe
    # point): DeepSpeed state for resume, LoRA + Adam only with our deepspeed.patch (~0.2 GB/save at 20b,
    # benchmarks/bench_ckpt_size.py; 0.9.3 added the frozen base), the last 3 kept; plus a
    # {tag}_hf LoRA adapter for eval (all kept). --disable_ds_ckpt saves adapters only: nothing to resume from.
    --save_path "$SAVE_PATH"
    --ckpt_path "$CKPT_PATH"
    --save_steps 5
    --max_ckpt_num 3
    --save_hf_ckpt
    --logging_steps 1
)

# Decided by the launcher (rft/launch/choices.py; --dry-run prints each): the reward (REWARD=em|judge|PATH), the
# LoRA sync to vLLM (LORA_SYNC=merge|native: our patched adapter-only sync; 0.9.3's own sends PEFT names vLLM
# ignores), DYNAMIC_FILTER=1 / PROMPT_HISTORY=1, resume from $CKPT_PATH (RESUME=0: fresh), SMOKE=1.
exec "$PYTHON" -m rft.launch --profile "${RFT_PROFILE:-20b}" -- "${ARGS[@]}" "$@"
