"""The host's facts, each read here and nowhere else: the GPUs (`nvidia-smi`), the driver, the GPU topology,
free disk, available RAM, /dev/shm and the open-file limit.

Read by the node's prerequisites (rft/provision/prereqs.py) and by the launch rules (rft/launch/rules.py).
Stdlib only: it runs before any environment exists.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

GIB = 2**30
SHM = Path("/dev/shm")
MEMINFO = Path("/proc/meminfo")


def run(argv: list[str], env: Mapping[str, str]) -> str | None:
    """stdout and stderr of argv, or None when it cannot run or fails."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(env))
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout + res.stderr if res.returncode == 0 else None


def _smi(env: Mapping[str, str] | None, *args: str) -> str | None:
    """stdout of `nvidia-smi args` found on env's PATH (default: this process's environment); None without it."""
    env = os.environ if env is None else env
    if not shutil.which("nvidia-smi", path=env.get("PATH", "")):
        return None
    try:
        res = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60, env=dict(env))
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def gpu_count(env: Mapping[str, str] | None = None) -> int:
    """GPUs `nvidia-smi -L` lists, found on `env`'s PATH (default: this process's environment); 0 without
    nvidia-smi, without a GPU, or when it fails."""
    return sum(line.startswith("GPU ") for line in (_smi(env, "-L") or "").splitlines())


def gpu_inventory(env: Mapping[str, str] | None = None) -> list[dict] | None:
    """[{index, name, memory_gib}] from nvidia-smi (the run record keeps it), or None when there is no usable
    nvidia-smi."""
    out = _smi(env, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits")
    if out is None:
        return None
    gpus = []
    for line in out.strip().splitlines():
        idx, name, mem = (x.strip() for x in line.split(",", 2))
        gpus.append({"index": int(idx), "name": name, "memory_gib": round(float(mem) / 1024, 1)})
    return gpus


def driver_version(env: Mapping[str, str] | None = None) -> tuple[int, ...] | None:
    """The NVIDIA driver's version (`nvidia-smi --query-gpu=driver_version`), None where none is reported."""
    out = _smi(env, "--query-gpu=driver_version", "--format=csv,noheader")
    m = re.search(r"(\d+)\.(\d+)\.?(\d+)?", out or "")
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def gpu_topology(env: Mapping[str, str] | None = None) -> str | None:
    """`nvidia-smi topo -m`'s text (parsed by rft/provision/transport.py); None without nvidia-smi or on failure."""
    return _smi(env, "topo", "-m")


def existing_ancestor(path: str | Path) -> Path:
    """The nearest existing directory at or above `path`."""
    p = Path(path).expanduser().absolute()
    while not p.exists():
        p = p.parent
    return p


def free_gib(path: str | Path) -> float:
    """Free GiB, for an unprivileged user, on the filesystem that holds `path` (its nearest existing parent)."""
    st = os.statvfs(existing_ancestor(path))
    return st.f_bavail * st.f_frsize / GIB


def mem_available_gib(meminfo: Path = MEMINFO) -> float | None:
    """MemAvailable of /proc/meminfo in GiB (None where there is none)."""
    m = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo.read_text(), re.M) if meminfo.exists() else None
    return int(m.group(1)) / 2**20 if m else None


def shm_free_gib(shm: Path = SHM) -> float | None:
    """Free GiB in /dev/shm (NCCL's shared-memory transport, Ray's object store); None where there is none."""
    return free_gib(shm) if shm.exists() else None


def open_file_limit() -> tuple[int, int]:
    """RLIMIT_NOFILE: (soft, hard)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)
