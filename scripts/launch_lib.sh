# shellcheck shell=bash
# Shared setup sourced by the launch scripts: repo root, the interpreter, environment for OpenRLHF/Ray.
# Usage: source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"; rft_launch PROFILE "${ARGS[@]}" "$@"

RFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The interpreter: $PYTHON when set, else the first of .venv-train, the active virtualenv / conda env, .venv and
# python3 that can import openrlhf (found, not imported: a half-built directory never wins), else python3.
rft_python() {
    local cand
    if [[ -n "${PYTHON:-}" ]]; then
        echo "$PYTHON"
        return
    fi
    for cand in "$RFT_ROOT/.venv-train/bin/python" "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" \
        "${CONDA_PREFIX:+$CONDA_PREFIX/bin/python}" "$RFT_ROOT/.venv/bin/python" "$(command -v python3)"; do
        if [[ -n "$cand" && -x "$cand" ]] &&
            "$cand" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("openrlhf") is None)' 2>/dev/null; then
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

# SMOKE=1: a smoke run (rft/launch/smoke.py): the launcher rewrites the recipe to a few steps, the run ends with PASS/FAIL.
case "${SMOKE:-0}" in
    0) ;;
    1) export RFT_SMOKE=1 ;;
    *)
        echo "SMOKE=$SMOKE: expected 0 or 1" >&2
        exit 2
        ;;
esac

# rft_run_name NAME: NAME, with -smoke appended in a smoke run (its own directories, never the real run's).
rft_run_name() {
    if [[ "${SMOKE:-0}" == 1 && "$1" != *-smoke ]]; then echo "$1-smoke"; else echo "$1"; fi
}

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

# rft_local_storage RUN_NAME: the single-GPU and CPU layout, everything of a run under $OUT_ROOT/RUN_NAME (default
# runs/ of this checkout): metrics, samples and spike logs here; the script puts its model and checkpoints beside.
# shellcheck disable=SC2034  # OUT_ROOT and RUN_DIR are read by the sourcing script
rft_local_storage() {
    OUT_ROOT="${OUT_ROOT:-$RFT_ROOT/runs}"
    RUN_DIR="$OUT_ROOT/$1"
    export METRICS_LOG_DIR="${METRICS_LOG_DIR:-$RUN_DIR/metrics}"
    export SAMPLES_LOG_DIR="${SAMPLES_LOG_DIR:-$RUN_DIR/samples}"
    export SPIKE_LOG_PATH="${SPIKE_LOG_PATH:-$METRICS_LOG_DIR/spike_log.jsonl}"
}

# rft_metrics_globs: where the launch scripts put a run's metrics directory, one glob per line: the node layout
# (rft_storage) and the local one (rft_local_storage), from the same functions with '*' for the run name.
rft_metrics_globs() {
    (unset METRICS_LOG_DIR SAMPLES_LOG_DIR SPIKE_LOG_PATH; rft_storage '*'; echo "$METRICS_LOG_DIR")
    (unset METRICS_LOG_DIR SAMPLES_LOG_DIR SPIKE_LOG_PATH; rft_local_storage '*'; echo "$METRICS_LOG_DIR")
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
    [[ "${SMOKE:-0}" == 1 ]] && return 0  # a smoke run always starts fresh
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
# settings in reward.toml, see docs/rewards.md); REWARD_FUNC=path overrides both.
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

# rft_gpu_count: GPUs `nvidia-smi -L` lists (0 without nvidia-smi or without a GPU).
rft_gpu_count() {
    local listing
    listing="$(nvidia-smi -L 2>/dev/null)" || { echo 0; return; }
    grep -c '^GPU ' <<<"$listing" || true
}

# rft_refuse_gpu_node WHAT: exit 1 where nvidia-smi lists GPUs (the CPU profile's stand-ins must never run there).
rft_refuse_gpu_node() {
    local n
    n="$(rft_gpu_count)"
    if (( n > 0 )); then
        echo "$1: refused: nvidia-smi lists $n GPU(s) here. The CPU profile replaces torch.cuda with stand-ins and" \
            "skips every GPU, disk and git check; on a GPU node use a GPU launch script or \`make train\`." >&2
        exit 1
    fi
}

# rft_run_forwarding CMD...: run CMD in the background and wait for it. A TERM, INT or HUP to this script goes on
# to CMD as SIGTERM (SIGKILL after RFT_STOP_GRACE seconds, default 30), so CMD never outlives the script (bash
# alone would run its EXIT trap and leave CMD running). Returns CMD's status; RFT_STOPPED=1 after a signal.
rft_run_forwarding() {
    local status=0
    "$@" &
    RFT_CHILD_PID=$!
    trap rft_stop_child TERM INT HUP
    while true; do
        wait "$RFT_CHILD_PID" && status=0 || status=$?
        kill -0 "$RFT_CHILD_PID" 2>/dev/null || break  # wait also returns when a trapped signal arrives
    done
    trap - TERM INT HUP
    return "$status"
}

# rft_stop_child: the signal trap of rft_run_forwarding.
rft_stop_child() {
    # shellcheck disable=SC2034  # read by the sourcing script
    RFT_STOPPED=1
    echo "signal received: stopping pid $RFT_CHILD_PID (SIGTERM, SIGKILL after ${RFT_STOP_GRACE:-30} s)" >&2
    kill -TERM "$RFT_CHILD_PID" 2>/dev/null || return 0
    if [[ -z "${RFT_KILLER_PID:-}" ]]; then
        (  # ends as soon as the child is gone; holds none of the script's output pipes
            for ((i = 0; i < ${RFT_STOP_GRACE:-30} * 10; i++)); do
                kill -0 "$RFT_CHILD_PID" 2>/dev/null || exit 0
                sleep 0.1
            done
            kill -KILL "$RFT_CHILD_PID" 2>/dev/null
        ) </dev/null >/dev/null 2>&1 &
        RFT_KILLER_PID=$!
    fi
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
    local filter="${DYNAMIC_FILTER:-0}" history="${PROMPT_HISTORY:-0}" scheme
    case "$filter" in
        0) ;;
        1)
            ARGS+=(--dynamic_filtering)
            # the scheme the reward files will read: reward.toml's [reward] scheme (rft.reward.settings)
            scheme="$("$PYTHON" -c 'from rft.reward.settings import load_settings; print(load_settings().scheme)')" \
                || exit 2
            if [[ "$(basename "$REWARD_FUNC")" == reward_func_em.py && "$scheme" == binary ]] \
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
    [[ "${SMOKE:-0}" == 1 ]] || exec "$PYTHON" -m rft.launch --profile "$profile" -- "$@"
    local arg
    for arg in "$@"; do [[ "$arg" == --dry-run ]] && exec "$PYTHON" -m rft.launch --profile "$profile" -- "$@"; done
    local status=0 sampler=""
    mkdir -p "$METRICS_LOG_DIR"
    rm -f "$METRICS_LOG_DIR/training_metrics.jsonl" "$METRICS_LOG_DIR/smoke_gpu_memory.json"  # this run's alone
    if (( $(rft_gpu_count) > 0 )); then
        "$PYTHON" -m rft.monitor.gpu_memory "$METRICS_LOG_DIR/smoke_gpu_memory.json" &
        sampler=$!
    fi
    rft_run_forwarding "$PYTHON" -m rft.launch --profile "$profile" -- "$@" || status=$?
    [[ -n "$sampler" ]] && kill "$sampler" 2>/dev/null
    [[ -n "${RFT_STOPPED:-}" ]] && exit "$status"
    rft_smoke_verdict "$status"
}

# rft_smoke_verdict RUN_STATUS: print the smoke verdict of $METRICS_LOG_DIR and exit 0 (PASS) or 1 (FAIL).
rft_smoke_verdict() {
    local status=0
    "$PYTHON" -m rft.monitor.smoke_verdict "$METRICS_LOG_DIR" --run-status "$1" || status=$?
    exit "$status"
}
