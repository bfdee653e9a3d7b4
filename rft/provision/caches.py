"""Where the caches of a GPU run live: every cache that grows with models or builds goes on the data disk.

`cache_env(env)` gives HF_HOME (model downloads: 13 GB for 20b, 65 GB for 120b), TORCH_EXTENSIONS_DIR (DeepSpeed's
FusedAdam, built once by `make train-env` (or `make train`) and found by every actor rank), VLLM_CACHE_ROOT (torch.compile artifacts),
TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR under $DATA_ROOT/cache (DATA_ROOT default /mnt/data, as the launch
scripts' rft_storage); a value the user set wins. `python3 -m rft.provision.caches` prints them as `export` lines
for bash to eval. Stdlib only: it runs before any environment exists.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping

DEFAULT_DATA_ROOT = "/mnt/data"
CACHE_DIRS = {
    "HF_HOME": "hf",
    "TORCH_EXTENSIONS_DIR": "torch_extensions",
    "VLLM_CACHE_ROOT": "vllm",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
}
"""Variable -> its directory under $DATA_ROOT/cache."""


def cache_env(env: Mapping[str, str]) -> dict[str, str]:
    """Every variable of CACHE_DIRS: the user's value where set (non-empty), else $DATA_ROOT/cache/<dir>."""
    root = os.path.join(env.get("DATA_ROOT") or DEFAULT_DATA_ROOT, "cache")
    return {var: env.get(var) or os.path.join(root, sub) for var, sub in CACHE_DIRS.items()}


def cache_line(caches: Mapping[str, str]) -> str:
    """The dry run's line for the caches a launch exports."""
    return "caches: " + ", ".join(f"{var}={path}" for var, path in caches.items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m rft.provision.caches", description=__doc__.splitlines()[0])
    p.parse_args(argv)
    for var, value in cache_env(os.environ).items():
        print(f"export {var}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
