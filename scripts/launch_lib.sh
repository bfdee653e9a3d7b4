# shellcheck shell=bash
# What the launch scripts need bash for: the repo root, the interpreter, PYTHONPATH, the storage layout (paths).
# Usage: source "$(dirname "${BASH_SOURCE[0]}")/scripts/launch_lib.sh"; exec "$PYTHON" -m rft.launch --profile P -- "${ARGS[@]}" "$@"

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

