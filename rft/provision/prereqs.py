"""What the 8-GPU node must have before the training environment is built: one line per gap, naming the fix.

Read before anything downloads (`make train`, `make train-env`, `make train DRY_RUN=1`): the interpreter the venv is
built from and its C headers (`Python.h`), a GPU at all (`nvidia-smi -L`), the NVIDIA driver, a CUDA 12 `nvcc` and
a C++ compiler (DeepSpeed JIT-builds FusedAdam and raises without them),
/dev/shm (NCCL and Ray's object store), the GPU topology and the NCCL_* variables that turn a transport off
(warnings, rft/provision/transport.py), the open-file limit, host RAM (rank 0 of the actor and of the reference
each dequantize the MXFP4 checkpoint on the host at once) and disk for the model cache and the venv.
The host's facts come from rft/provision/host.py, which the launch rules read too. Stdlib only: it runs before any
environment exists, on the node's python3 whatever its version.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from rft.provision.caches import cache_env
from rft.provision.host import (
    driver_version,
    free_gib,
    gpu_count,
    gpu_topology,
    mem_available_gib,
    open_file_limit,
    run,
    shm_free_gib,
)
from rft.provision.transport import env_warnings, nccl_env, topology_warnings

MIN_PYTHON = (3, 11)  # pyproject's requires-python
MIN_DRIVER = (525, 60, 13)  # CUDA 12.x minor-version compatibility floor (NVIDIA's CUDA compatibility guide)
GOOD_DRIVER = (570, 26)  # CUDA 12.8's own driver (torch 2.9.1's PyPI wheel is cu128): below it, PTX JIT is off
CUDA_MAJOR = 12  # torch 2.9.1+cu128: DeepSpeed refuses a toolkit of another major for its JIT ops
MIN_SHM_GIB = 1.0  # docker's default 64 MiB breaks NCCL's shared-memory transport
MIN_NOFILE = 65536  # Ray's recommendation for a node running many workers
VENV_GIB = 25.0  # torch + vLLM + the rest, built once

GIB_PER_GB = 1e9 / 2**30
SHARD_GIB = 5.0  # convert_mxfp4.py --max-shard-gib: what one rank holds while the stock ZeRO-3 load streams a shard
BF16_GB = {"20b": 42, "120b": 234}  # the dequantized bf16 model one full load holds (21B / 117B params x 2 B)
# Model cache per profile: openai/gpt-oss-20b and -120b without original/ and metal/.
CACHE_GIB = {"20b": 13 * GIB_PER_GB, "120b": 65 * GIB_PER_GB}


def host_ram_terms(profile: str, offload: bool | None = None, zero_stage: int = 3,
                   ref_from_actor: bool = False) -> list[tuple[float, str]]:
    """What a profile holds in one node's host RAM at once, term by term: [(GiB, what)].

    `offload`: --offload (ZeRO-3 parameters on the host); None takes the profile's default layout (120b on one
    node offloads, train_grpo_120b.sh). `zero_stage` below 3: no zero.Init, so every actor rank loads (and
    dequantizes) the whole model on the host at once, and the reference (stage 0 then) every one of its ranks too;
    `ref_from_actor`: no reference model is loaded at all (20b; 120b has none). A LoRA save gathers the adapter only (deepspeed.patch,
    rft/train/checkpoints.py gather_adapter_state: r64 on q/k/v/o at 120b is 36 x 64 x 20736 x 2 B = 0.1 GB), so
    no term counts a consolidated 16-bit model (21B x 2 B = 42 GB at 20b, 117B x 2 B = 234 GB at 120b).
    """
    if zero_stage < 3:
        return _full_load_terms(profile, 8 if profile == "120b" and offload is False else 4, ref_from_actor)
    if profile == "20b":
        loads = 1 if ref_from_actor else 2
        who = "actor rank 0 dequantizes" if ref_from_actor else "actor and reference rank 0 each dequantize"
        return [(loads * 42 * GIB_PER_GB, f"{who} 21B MXFP4 params to bf16 ({loads} x 42 GB)"),
                (8.0, "Ray, the vLLM engine processes, data")]
    if profile == "120b":
        offload = True if offload is None else offload
        ranks = 4 if offload else 8  # actor GPUs on the node: NODES=1 (offload) or NODES=2
        terms = [(ranks * SHARD_GIB, f"{ranks} actor ranks each streaming one {SHARD_GIB:g} GiB shard of the bf16 "
                                     "copy while loading")]
        if offload:
            terms.append((234 * GIB_PER_GB, "--offload: the actor's 117B bf16 parameters on the host (234 GB)"))
        return [*terms, (16.0, "Ray, the vLLM engine processes, data")]
    raise ValueError(f"no host RAM figures for profile {profile!r} (known: 20b, 120b)")


def _full_load_terms(profile: str, actor_ranks: int, ref_from_actor: bool) -> list[tuple[float, str]]:
    """ZeRO-2 (or 1, 0): each actor rank, and each reference rank of the 20b layout, loads the full bf16 model."""
    if profile not in BF16_GB:
        raise ValueError(f"no host RAM figures for profile {profile!r} (known: 20b, 120b)")
    gb = BF16_GB[profile]
    loads = actor_ranks + (actor_ranks if profile == "20b" and not ref_from_actor else 0)
    who = "actor ranks" if loads == actor_ranks else "actor and reference ranks"
    return [(loads * gb * GIB_PER_GB, f"ZeRO-2: {loads} {who} each load the whole bf16 model ({loads} x {gb} GB)"),
            (8.0 if profile == "20b" else 16.0, "Ray, the vLLM engine processes, data")]


def host_ram_need(profile: str, offload: bool | None = None, zero_stage: int = 3,
                  ref_from_actor: bool = False) -> tuple[float, str]:
    """(GiB of host RAM the profile needs at once, the terms as one line `what: N GiB; ...`)."""
    terms = host_ram_terms(profile, offload, zero_stage, ref_from_actor)
    return sum(g for g, _ in terms), "; ".join(f"{what}: {g:.0f} GiB" for g, what in terms)


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
    topology: str | None = None  # `nvidia-smi topo -m` (rft/provision/transport.py)
    nccl: dict[str, str] = field(default_factory=dict)  # the NCCL_* environment
    nodes: int = 1  # $NODES: the network transports matter from 2
    cxx: str | None = None  # the C++ compiler torch's JIT builds call ($CXX, else c++ on PATH)
    python_include: str | None = None  # the build interpreter's sysconfig include directory
    python_h: bool = False  # Python.h is in python_include


def _version(text: str | None, pattern: str) -> tuple[int, ...] | None:
    m = re.search(pattern, text or "")
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def cache_dir(env: dict[str, str]) -> Path:
    """Where the launch keeps the Hugging Face cache: $HF_HOME, else $DATA_ROOT/cache/hf (rft/provision/caches.py)."""
    return Path(cache_env(env)["HF_HOME"])


def find_nvcc(env: dict[str, str]) -> str | None:
    """nvcc on PATH, else under $CUDA_HOME/bin (where DeepSpeed's op builder also looks)."""
    found = shutil.which("nvcc", path=env.get("PATH", ""))
    if found:
        return found
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    return str(Path(home) / "bin" / "nvcc") if home and (Path(home) / "bin" / "nvcc").exists() else None


def find_cxx(env: dict[str, str]) -> str | None:
    """The C++ compiler torch.utils.cpp_extension calls: $CXX, else `c++` on PATH (g++ on Ubuntu)."""
    name = env.get("CXX") or "c++"
    return name if Path(name).is_absolute() and Path(name).exists() else shutil.which(name, path=env.get("PATH", ""))


def python_include(python: str, env: dict[str, str]) -> str | None:
    """The directory sysconfig names for `python`'s C headers (the venv built from it shares it)."""
    out = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"], env)
    return out.strip().splitlines()[-1] if out and out.strip() else None


def read_host(env: dict[str, str], python: str, venv: Path) -> Host:
    """Probe this machine: nothing is installed, downloaded or changed."""
    gpus = gpu_count(env)
    nvcc = find_nvcc(env)
    include = python_include(python, env)
    return Host(
        python_version=_version(run([python, "--version"], env), r"Python (\d+)\.(\d+)\.?(\d+)?"),
        python=python,
        gpus=gpus,
        driver=driver_version(env) if gpus else None,
        nvcc_release=_version(run([nvcc, "--version"], env), r"release (\d+)\.(\d+)") if nvcc else None,
        shm_gib=shm_free_gib(),
        nofile=open_file_limit(),
        mem_available_gib=mem_available_gib(),
        cache_dir=cache_dir(env),
        cache_free_gib=free_gib(cache_dir(env)),
        venv_free_gib=free_gib(venv),
        topology=gpu_topology(env) if gpus else None,
        nccl=nccl_env(env),
        nodes=int(env.get("NODES") or 1) if (env.get("NODES") or "1").isdigit() else 1,
        cxx=find_cxx(env),
        python_include=include,
        python_h=include is not None and (Path(include) / "Python.h").exists(),
    )


def _dotted(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def host_ram_problem(available_gib: float | None, profile: str, offload: bool | None = None, zero_stage: int = 3,
                     ref_from_actor: bool = False) -> str | None:
    """One line when `available_gib` is below what the profile needs at once (host_ram_need), else None."""
    need, terms = host_ram_need(profile, offload, zero_stage, ref_from_actor)
    if available_gib is None or available_gib >= need:
        return None
    return (f"host RAM: {available_gib:.0f} GiB available, the {profile} recipe needs ~{need:.0f} GiB at once "
            f"({terms}): free memory or use a bigger node")


def problems(host: Host, profile: str = "20b", building: bool = True,
             offload: bool | None = None) -> tuple[list[str], list[str]]:
    """(blocking problems, warnings), each one line naming the fix. `building`: the venv is still to be built;
    `offload`: as host_ram_terms."""
    bad, warn = [], []
    cache_gib = CACHE_GIB[profile]
    if not building:
        pass  # the environment found runs already: its interpreter is the one that counts
    elif host.python_version is None:
        bad.append(f"python: {host.python} did not answer --version: set PYTHON=python3.11 (or newer)")
    elif host.python_version[:2] < MIN_PYTHON:
        bad.append(f"python: {host.python} is {_dotted(host.python_version)}; rft needs >= {_dotted(MIN_PYTHON)}: "
                   "install python3.11 or newer (Ubuntu 22.04: apt install python3.11 python3.11-dev "
                   "python3.11-venv) and run make train-env PYTHON=python3.11")
    elif not host.python_h:
        pkg = f"python{_dotted(host.python_version[:2])}-dev"
        where = host.python_include or "(sysconfig named no include directory)"
        bad.append(f"Python.h: not in {where}, {host.python}'s headers; DeepSpeed's FusedAdam build includes it: "
                   f"apt install {pkg} (or make train-env PYTHON=<an interpreter with its headers>)")
    if not host.gpus:
        bad.insert(0, "gpu: no GPU here (`nvidia-smi -L` lists none: no driver, or no device): the training environment "
                      "needs the GPU node; without GPUs `make demo` runs the CPU demonstration")
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
    if host.cxx is None:
        bad.append("c++: no C++ compiler ($CXX, or c++ on PATH): DeepSpeed's JIT build of FusedAdam calls one: "
                   "apt install g++")
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
    ram = host_ram_problem(host.mem_available_gib, profile, offload)
    if ram:
        bad.append(ram)
    if host.cache_free_gib is not None and host.cache_free_gib < cache_gib:
        bad.append(f"disk: {host.cache_free_gib:.0f} GiB free at {host.cache_dir} for a {cache_gib:.0f} GiB "
                   f"checkpoint: set DATA_ROOT (or HF_HOME) to a disk with room")
    if building and host.venv_free_gib is not None and host.venv_free_gib < VENV_GIB:
        bad.append(f"disk: {host.venv_free_gib:.0f} GiB free for the venv, it needs ~{VENV_GIB:.0f} GiB: "
                   "make train-env TRAIN_VENV=/mnt/data/rft-venv")
    if host.gpus:
        warn += topology_warnings(host.topology, host.gpus)
    warn += env_warnings(host.nccl, host.nodes)
    return bad, warn
