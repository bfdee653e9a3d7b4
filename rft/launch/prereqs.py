"""What the 8-GPU node must have before the training environment is built: one line per gap, naming the fix.

Read before anything downloads (`make train`, `make train DRY_RUN=1`): the interpreter the venv is built from,
the NVIDIA driver, a CUDA 12 `nvcc` (DeepSpeed JIT-builds FusedAdam at actor start-up and raises without one),
/dev/shm (NCCL and Ray's object store), the open-file limit, host RAM (rank 0 of the actor and of the reference
each dequantize the MXFP4 checkpoint on the host at once) and disk for the model cache and the venv.
Stdlib only: it runs before any environment exists, on the node's python3 whatever its version.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

MIN_PYTHON = (3, 11)  # pyproject's requires-python
MIN_DRIVER = (525, 60, 13)  # CUDA 12.x minor-version compatibility floor (NVIDIA's CUDA compatibility guide)
GOOD_DRIVER = (570, 26)  # CUDA 12.8's own driver (torch 2.9.1's PyPI wheel is cu128): below it, PTX JIT is off
CUDA_MAJOR = 12  # torch 2.9.1+cu128: DeepSpeed refuses a toolkit of another major for its JIT ops
MIN_SHM_GIB = 1.0  # docker's default 64 MiB breaks NCCL's shared-memory transport
MIN_NOFILE = 65536  # Ray's recommendation for a node running many workers
VENV_GIB = 25.0  # torch + vLLM + the rest, built once

GIB_PER_GB = 1e9 / 2**30
# Per profile: (GiB of host RAM needed at once, GiB of model cache). 20b: actor and reference rank 0 each
# dequantize 21B params to bf16 (2 x 42 GB), plus 8 GiB for the rest. 120b: a save consolidates the 16-bit model
# on rank 0 (~234 GB), plus 16 GiB. The caches: openai/gpt-oss-20b and -120b without original/ and metal/.
NEEDS = {"20b": (2 * 42 * GIB_PER_GB + 8, 13 * GIB_PER_GB), "120b": (234 * GIB_PER_GB + 16, 65 * GIB_PER_GB)}


@dataclass
class Host:
    """What `read_host` found; every field is plain data so the checks can be tested on any machine."""

    python_version: tuple[int, ...] | None
    python: str
    gpus: int
    driver: tuple[int, ...] | None
    nvcc_release: tuple[int, int] | None
    shm_gib: float | None
    nofile: tuple[int, int]
    mem_available_gib: float | None
    cache_dir: Path
    cache_free_gib: float | None
    venv_free_gib: float | None
    notes: list[str] = field(default_factory=list)


def _run(argv: list[str], env: dict[str, str]) -> str | None:
    """stdout of argv, or None when it cannot run or fails."""
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout + res.stderr if res.returncode == 0 else None


def _version(text: str | None, pattern: str) -> tuple[int, ...] | None:
    m = re.search(pattern, text or "")
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def _free_gib(path: Path) -> float | None:
    """Free GiB on the filesystem that holds `path` (its nearest existing parent)."""
    for p in [path, *path.parents]:
        if p.exists():
            st = os.statvfs(p)
            return st.f_bavail * st.f_frsize / 2**30
    return None


def _mem_available_gib(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    m = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo.read_text(), re.M) if meminfo.exists() else None
    return int(m.group(1)) / 2**20 if m else None


def cache_dir(env: dict[str, str]) -> Path:
    """Where the Hugging Face cache lives: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface."""
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"])
    return Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME", "~")).expanduser() / ".cache") / "huggingface"


def find_nvcc(env: dict[str, str]) -> str | None:
    """nvcc on PATH, else under $CUDA_HOME/bin (where DeepSpeed's op builder also looks)."""
    found = shutil.which("nvcc", path=env.get("PATH", ""))
    if found:
        return found
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    return str(Path(home) / "bin" / "nvcc") if home and (Path(home) / "bin" / "nvcc").exists() else None


def read_host(env: dict[str, str], python: str, venv: Path) -> Host:
    """Probe this machine: nothing is installed, downloaded or changed."""
    smi = _run(["nvidia-smi", "-L"], env) if shutil.which("nvidia-smi", path=env.get("PATH", "")) else None
    gpus = sum(line.startswith("GPU ") for line in (smi or "").splitlines())
    driver_text = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], env) if gpus else None
    nvcc = find_nvcc(env)
    shm = Path("/dev/shm")
    return Host(
        python_version=_version(_run([python, "--version"], env), r"Python (\d+)\.(\d+)\.?(\d+)?"),
        python=python,
        gpus=gpus,
        driver=_version(driver_text, r"(\d+)\.(\d+)\.?(\d+)?"),
        nvcc_release=_version(_run([nvcc, "--version"], env), r"release (\d+)\.(\d+)") if nvcc else None,
        shm_gib=_free_gib(shm) if shm.exists() else None,
        nofile=resource.getrlimit(resource.RLIMIT_NOFILE),
        mem_available_gib=_mem_available_gib(),
        cache_dir=cache_dir(env),
        cache_free_gib=_free_gib(cache_dir(env)),
        venv_free_gib=_free_gib(venv),
    )


def _dotted(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def problems(host: Host, profile: str = "20b", building: bool = True) -> tuple[list[str], list[str]]:
    """(blocking problems, warnings), each one line naming the fix. `building`: the venv is still to be built."""
    bad, warn = [], []
    ram_gib, cache_gib = NEEDS[profile]
    if not building:
        pass  # the environment found runs already: its interpreter is the one that counts
    elif host.python_version is None:
        bad.append(f"python: {host.python} did not answer --version: set PYTHON=python3.11 (or newer)")
    elif host.python_version[:2] < MIN_PYTHON:
        bad.append(f"python: {host.python} is {_dotted(host.python_version)}; rft needs >= {_dotted(MIN_PYTHON)}: "
                   "install python3.11 or newer (Ubuntu 22.04: apt install python3.11 python3.11-venv) and run "
                   "make train PYTHON=python3.11")
    if host.gpus and host.driver is None:
        bad.append("driver: nvidia-smi lists GPUs but no driver version: check `nvidia-smi` works")
    elif host.gpus and host.driver < MIN_DRIVER:
        bad.append(f"driver: {_dotted(host.driver)} is below {_dotted(MIN_DRIVER)}, the oldest that runs CUDA 12 "
                   "(torch 2.9.1+cu128): upgrade the NVIDIA driver")
    elif host.gpus and host.driver[:2] < GOOD_DRIVER:
        warn.append(f"driver: {_dotted(host.driver)} runs CUDA 12.8 by minor-version compatibility only (no PTX JIT); "
                    f"{_dotted(GOOD_DRIVER)} or newer is CUDA 12.8's own")
    if host.nvcc_release is None:
        bad.append(f"nvcc: no CUDA compiler on PATH or under $CUDA_HOME/bin: DeepSpeed builds FusedAdam at actor "
                   f"start-up and fails without one: install the CUDA {CUDA_MAJOR}.8 toolkit (apt install "
                   f"cuda-toolkit-{CUDA_MAJOR}-8) and export CUDA_HOME=/usr/local/cuda-{CUDA_MAJOR}.8")
    elif host.nvcc_release[0] != CUDA_MAJOR:
        bad.append(f"nvcc: CUDA {_dotted(host.nvcc_release)}, torch is built for CUDA {CUDA_MAJOR}: DeepSpeed refuses "
                   f"the mismatch: install the CUDA {CUDA_MAJOR}.8 toolkit and put it first (CUDA_HOME, PATH)")
    if host.shm_gib is not None and host.shm_gib < MIN_SHM_GIB:
        bad.append(f"/dev/shm: {host.shm_gib:.2f} GiB free; NCCL and Ray need more: in a container start it with "
                   "--shm-size=64g (or --ipc=host)")
    soft, hard = host.nofile
    if 0 <= hard < MIN_NOFILE:
        bad.append(f"ulimit -n: hard limit {hard} < {MIN_NOFILE}: raise nofile in /etc/security/limits.conf "
                   "(or docker --ulimit nofile=1048576)")
    elif 0 <= soft < MIN_NOFILE:
        warn.append(f"ulimit -n: {soft} < {MIN_NOFILE}: run `ulimit -n {min(hard, 1048576) if hard > 0 else MIN_NOFILE}` "
                    "before launching")
    if host.mem_available_gib is not None and host.mem_available_gib < ram_gib:
        bad.append(f"host RAM: {host.mem_available_gib:.0f} GiB available, the {profile} recipe needs ~{ram_gib:.0f} "
                   "GiB at once (rank 0 dequantizing / consolidating on the host): free memory or use a bigger node")
    if host.cache_free_gib is not None and host.cache_free_gib < cache_gib:
        bad.append(f"disk: {host.cache_free_gib:.0f} GiB free at {host.cache_dir} for a {cache_gib:.0f} GiB "
                   f"checkpoint: export HF_HOME=/mnt/data/hf (a disk with room)")
    if building and host.venv_free_gib is not None and host.venv_free_gib < VENV_GIB:
        bad.append(f"disk: {host.venv_free_gib:.0f} GiB free for the venv, it needs ~{VENV_GIB:.0f} GiB: "
                   "make train TRAIN_VENV=/mnt/data/rft-venv")
    return bad, warn
