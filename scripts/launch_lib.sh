# shellcheck shell=bash
# Shared setup sourced by the launch scripts: repo root, the interpreter, environment for OpenRLHF/Ray.
# Usage: source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"; rft_launch PROFILE "${ARGS[@]}" "$@"

RFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The interpreter: $PYTHON, else the training venv, else the dev venv, else python3 on PATH.
rft_python() {
    local cand
    for cand in "${PYTHON:-}" "$RFT_ROOT/.venv-train/bin/python" "$RFT_ROOT/.venv/bin/python"; do
        if [[ -n "$cand" && -x "$cand" ]]; then
            echo "$cand"
            return
        fi
    done
    command -v python3
}
PYTHON="$(rft_python)"

# Unbuffered logs for `| tee`; rft importable by the reward function inside Ray workers.
export PYTHONUNBUFFERED=1
export PYTHONPATH="$RFT_ROOT${PYTHONPATH:+:$PYTHONPATH}"

# rft_storage RUN_NAME: the node's storage layout, every path overridable from the environment:
# outputs and checkpoints on the data disk, metrics / samples / spike logs on scratch.
# shellcheck disable=SC2034  # SAVE_PATH and CKPT_PATH are read by the sourcing script
rft_storage() {
    DATA_ROOT="${DATA_ROOT:-/mnt/data}"
    SCRATCH="${SCRATCH:-/mnt/scratch}"
    SAVE_PATH="${SAVE_PATH:-$DATA_ROOT/rft_output/$1}"
    CKPT_PATH="${CKPT_PATH:-$DATA_ROOT/rft_checkpoints/$1}"
    export METRICS_LOG_DIR="${METRICS_LOG_DIR:-$SCRATCH/rft_metrics/$1}"
    export SAMPLES_LOG_DIR="${SAMPLES_LOG_DIR:-$SCRATCH/rft_samples/$1}"
    export SPIKE_LOG_PATH="${SPIKE_LOG_PATH:-$METRICS_LOG_DIR/spike_log.jsonl}"
}

# rft_switch VAR DEFAULT FLAG: append the store_true FLAG to ARGS when ${VAR:-DEFAULT} is 1 (VAR=0 drops it).
rft_switch() {
    local value="${!1:-$2}"
    if [[ "$value" == 1 ]]; then
        ARGS+=("$3")
    elif [[ "$value" != 0 ]]; then
        echo "$1=$value: expected 0 or 1" >&2
        exit 2
    fi
}

# rft_resume NAME: relaunching the same command resumes. With a DeepSpeed checkpoint in $CKPT_PATH/_actor (its
# `latest` names the last complete save) append --load_checkpoint: OpenRLHF 0.9.3 then restores the LoRA weights,
# optimizer, scheduler, global step and data position. Only then: 0.9.3 loads whenever _actor exists and raises if
# it has no `latest` (a run killed in its first save). RESUME=0 starts fresh.
rft_resume() {
    case "${RESUME:-1}" in
        0) ;;
        1)
            if [[ -f "$CKPT_PATH/_actor/latest" ]]; then
                echo "$1: resuming from $CKPT_PATH/_actor ($(cat "$CKPT_PATH/_actor/latest"))" >&2
                ARGS+=(--load_checkpoint)
            fi
            ;;
        *)
            echo "RESUME=$RESUME: expected 0 or 1" >&2
            exit 2
            ;;
    esac
}

# rft_reward_func: the reward file for REWARD=em (exact match, default) or REWARD=judge (Gemini-judged quality,
# RFT_JUDGE_* settings, see the README); REWARD_FUNC=path overrides both.
rft_reward_func() {
    case "${REWARD:-em}" in
        em) echo "$RFT_ROOT/reward_func_em.py" ;;
        judge) echo "$RFT_ROOT/reward_func_judge.py" ;;
        *)
            echo "REWARD=$REWARD: expected em or judge" >&2
            return 2
            ;;
    esac
}

# rft_lora_sync: the LoRA weight sync to vLLM, from LORA_SYNC (default merge): `merge` writes W0 + s·B@A into the
# engines' weights (--vllm_sync_lora_via_object_store); `native` has them serve the adapter with enable_lora
# (--vllm_sync_lora_native). Both send only the adapter through the Ray object store. Default and figures: README.
rft_lora_sync() {
    case "${LORA_SYNC:-merge}" in
        merge) ARGS+=(--vllm_sync_lora_via_object_store) ;;
        native) ARGS+=(--vllm_sync_lora_via_object_store --vllm_sync_lora_native) ;;
        *)
            echo "LORA_SYNC=$LORA_SYNC: expected merge or native" >&2
            exit 2
            ;;
    esac
}

# rft_prompt_filter: spend rollouts on prompts that teach (docs/launching.md#prompts-that-teach-nothing).
# DYNAMIC_FILTER=1: OpenRLHF's --dynamic_filtering drops a group whose samples are all right or all wrong and
# rolls out another prompt in its place. The range fits the reward: rft's exact match (binary) logs scores 0/1,
# so 0.9.3's rule on the score mean, range (0, 1), is exact; the judge pays a right answer 0.8-1.0 and the signed
# scheme pays a wrong one -1 or -0.5 (0.9.3 replaces a 0 score by the reward), so those filter on the mean of the
# `correctness` log instead (--dynamic_filtering_key, prompt_filter.patch). PROMPT_HISTORY=1: skip a prompt
# whose last groups were uniform before rollout (--prompt_history). With either the run does the rollout steps
# the LR schedule was built for, over more passes of the pool.
rft_prompt_filter() {
    local filter="${DYNAMIC_FILTER:-0}" history="${PROMPT_HISTORY:-0}"
    case "$filter" in
        0) ;;
        1)
            ARGS+=(--dynamic_filtering)
            if [[ "$(basename "$REWARD_FUNC")" == reward_func_em.py && "${RFT_REWARD_SCHEME:-binary}" == binary ]] \
                || [[ "$(basename "$REWARD_FUNC")" != reward_func_*.py ]]; then
                ARGS+=(--dynamic_filtering_reward_range 0 1)
            else
                ARGS+=(--dynamic_filtering_key correctness --dynamic_filtering_reward_range 0 1)
            fi
            ;;
        *) echo "DYNAMIC_FILTER=$filter: expected 0 or 1" >&2; exit 2 ;;
    esac
    case "$history" in
        0) ;;
        1) ARGS+=(--prompt_history) ;;
        *) echo "PROMPT_HISTORY=$history: expected 0 or 1" >&2; exit 2 ;;
    esac
}

# rft_launch PROFILE FLAGS...: pre-launch checks, then OpenRLHF (a --dry-run among FLAGS stops after the checks).
rft_launch() {
    local profile="$1"
    shift
    exec "$PYTHON" -m rft.launch --profile "$profile" -- "$@"
}
