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

# rft_launch PROFILE FLAGS...: pre-launch checks, then OpenRLHF (a --dry-run among FLAGS stops after the checks).
rft_launch() {
    local profile="$1"
    shift
    exec "$PYTHON" -m rft.launch --profile "$profile" -- "$@"
}
