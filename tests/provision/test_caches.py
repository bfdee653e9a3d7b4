"""rft/provision/caches.py: every cache under $DATA_ROOT/cache unless the user set it, and the export lines bash evals."""

from __future__ import annotations

import os
import subprocess
import sys

from rft.provenance import REPO_ROOT as ROOT
from rft.provision.caches import CACHE_DIRS, cache_env, cache_line


def test_defaults_on_the_data_disk_and_the_users_values_win():
    assert cache_env({}) == {"HF_HOME": "/mnt/data/cache/hf", "TORCH_EXTENSIONS_DIR": "/mnt/data/cache/torch_extensions",
                             "VLLM_CACHE_ROOT": "/mnt/data/cache/vllm", "TRITON_CACHE_DIR": "/mnt/data/cache/triton",
                             "TORCHINDUCTOR_CACHE_DIR": "/mnt/data/cache/torchinductor"}
    got = cache_env({"DATA_ROOT": "/big", "HF_HOME": "/mine/hf", "TRITON_CACHE_DIR": ""})
    assert got["HF_HOME"] == "/mine/hf"  # set by the user: kept
    assert got["TRITON_CACHE_DIR"] == "/big/cache/triton"  # empty counts as unset
    assert all(got[v].startswith("/big/cache/") for v in CACHE_DIRS if v != "HF_HOME")


def test_bash_evals_the_export_lines(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in CACHE_DIRS}
    env.update(DATA_ROOT=str(tmp_path / "a b"), VLLM_CACHE_ROOT="/v", PYTHONPATH=str(ROOT))
    script = f'eval "$({sys.executable} -m rft.provision.caches)"; printf "%s\\n" "$HF_HOME" "$VLLM_CACHE_ROOT"'
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, check=True)
    assert res.stdout.splitlines() == [f"{tmp_path}/a b/cache/hf", "/v"]


def test_the_dry_run_line_names_each_cache():
    assert cache_line(cache_env({"DATA_ROOT": "/d", "HF_HOME": "/h"})) == (
        "caches: HF_HOME=/h, TORCH_EXTENSIONS_DIR=/d/cache/torch_extensions, VLLM_CACHE_ROOT=/d/cache/vllm, "
        "TRITON_CACHE_DIR=/d/cache/triton, TORCHINDUCTOR_CACHE_DIR=/d/cache/torchinductor")
