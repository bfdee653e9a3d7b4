"""The CPU profile's hook (train_grpo_cpu.sh): stand-in environment, demo inputs, a private Ray, then the outputs.

Later stages (rft.cpu, rft.monitor) run as `python -m` subprocesses: the launcher never imports them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rft.io import flag_value
from rft.launch.choices import ChoiceError
from rft.launch.supervise import python_module
from rft.provenance import REPO_ROOT
from rft.provision.host import gpu_count

SITE = REPO_ROOT / "rft" / "cpu" / "site"
# Ray resources per NODES: (head GPUs, head CPUs) and the second node's, None for one node
CLUSTERS = {"1": ((4, 8), None), "2": ((2, 6), (1, 2))}
# NODES=2: the reference shares the actor's placement group (2 bundles, PACK), which only the head's 2 GPUs hold;
# the engine's GPU is then on the second node alone (0.9.3 has no flag naming a node for a role)
NODE_FLAGS = {"1": [], "2": ["--colocate_actor_ref", "--ref_num_gpus_per_node", "2"]}


class GpuNode(RuntimeError):
    """The CPU profile started where nvidia-smi lists GPUs."""


def nodes(env: dict[str, str]) -> str:
    """NODES, 1 or 2 Ray nodes on 127.0.0.1."""
    value = env.get("NODES") or "1"
    if value not in CLUSTERS:
        raise ChoiceError(f"NODES={value}: expected 1 or 2")
    return value


def refuse_gpu_node() -> None:
    """GpuNode where nvidia-smi lists GPUs: the stand-ins replace torch.cuda and must never run there."""
    n = gpu_count()
    if n > 0:
        raise GpuNode(f"CPU profile: refused: nvidia-smi lists {n} GPU(s) here. The CPU profile replaces torch.cuda "
                      "with stand-ins and skips every GPU, disk and git check; on a GPU node use a GPU launch "
                      "script or `make train`.")


def standin_env(env: dict[str, str]) -> dict[str, str]:
    """The environment every Ray worker and vLLM engine inherits from the raylet: stand-ins, loopback, one thread."""
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (str(SITE), env.get("PYTHONPATH", "")) if p),
        "RFT_CPU_STANDINS": "1",
        "TORCHDYNAMO_DISABLE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
        "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
        # DeepSpeed JIT-builds its CPU ops once (~100 s): kept across runs
        "TORCH_EXTENSIONS_DIR": env.get("TORCH_EXTENSIONS_DIR") or f"{cache}/rft/torch_extensions",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "VLLM_HOST_IP": "127.0.0.1", "RAY_DEDUP_LOGS": "0",
        "SAMPLES_LOG_EVERY": env.get("SAMPLES_LOG_EVERY") or "4",
    }


def plan_lines(argv: list[str], env: dict[str, str]) -> list[str]:
    """What the hook does, for --dry-run."""
    inputs = Path(flag_value(argv, "--pretrain") or "model").parent
    n = nodes(env)
    (gpus, cpus), second = CLUSTERS[n]
    ray = (f"joins RAY_ADDRESS={env['RAY_ADDRESS']}" if env.get("RAY_ADDRESS") else
           f"a private Ray head on 127.0.0.1 ({gpus} logical GPUs, {cpus} CPUs)"
           + (f" and a second node ({second[0]} GPU, {second[1]} CPUs)" if second else ""))
    made = "exists" if (inputs / "model" / "config.json").is_file() else f"built once (--arch {env.get('ARCH') or 'qwen2'})"
    return [f"CPU profile: torch.cuda stand-ins ({SITE}); inputs {inputs} {made}; {ray}; NODES={n}"]


def run_module(module: str, *args: str, env: dict[str, str], capture: bool = False) -> str:
    """Run `python -m module args`; its stdout when `capture`; CalledProcessError when it fails."""
    res = subprocess.run(python_module(module, *args), env=env, check=True, text=True,
                         stdout=subprocess.PIPE if capture else None)
    return (res.stdout or "").strip()


def build_inputs(argv: list[str], env: dict[str, str]) -> None:
    """The demo model and prompts (once), and DeepSpeed's CPU ops (here, not by 3 actors at the same time)."""
    inputs = Path(flag_value(argv, "--pretrain") or "model").parent
    if not (inputs / "model" / "config.json").is_file():
        run_module("rft.cpu.demo", str(inputs), "--arch", env.get("ARCH") or "qwen2", env=env)
    run_module("rft.cpu.demo", "--deepspeed-ops", env=env)


@contextmanager
def private_ray(env: dict[str, str]) -> Iterator[str]:
    """RAY_ADDRESS when set, else a head (and NODES=2 a second node) on 127.0.0.1, stopped on the way out."""
    if env.get("RAY_ADDRESS"):
        yield env["RAY_ADDRESS"]
        return
    (gpus, cpus), second = CLUSTERS[nodes(env)]
    temp = env.get("RAY_TEMP") or f"/tmp/rft-ray-{os.getpid()}"  # short: Ray's socket paths stay under 108 chars
    address = ""
    try:
        address = run_module("rft.cpu.local_ray", "start", temp, "--num-gpus", str(gpus), "--num-cpus", str(cpus),
                             env=env, capture=True)
        if second:
            run_module("rft.cpu.local_ray", "join", address, "--num-gpus", str(second[0]), "--num-cpus",
                       str(second[1]), env=env)
        yield address
    finally:
        subprocess.run(python_module("rft.cpu.local_ray", "stop", temp, *([address] if address else [])), env=env)
        shutil.rmtree(temp, ignore_errors=True)


def prepare_dirs(run_dir: Path, env: dict[str, str]) -> None:
    """The run directory, its metrics directory and an empty spike log (no line = no spike)."""
    metrics = Path(env["METRICS_LOG_DIR"])
    for d in (run_dir, metrics):
        d.mkdir(parents=True, exist_ok=True)
    Path(env.get("SPIKE_LOG_PATH") or metrics / "spike_log.jsonl").touch()


def finish(status: int, run_dir: Path, address: str, env: dict[str, str]) -> None:
    """After the driver: each role's Ray node into the run record, the dashboard and table, where the run is."""
    metrics = Path(env["METRICS_LOG_DIR"])
    subprocess.run(python_module("rft.launch.placement", "--address", address, "--record-dir", str(metrics)), env=env)
    if (metrics / "training_metrics.jsonl").is_file() and (metrics / "training_metrics.jsonl").stat().st_size:
        subprocess.run(python_module("rft.monitor", str(metrics), "--plot", str(run_dir / "dashboard.png")), env=env)
        subprocess.run(python_module("rft.monitor", str(metrics), "--table"), env=env)
    print("CPU demonstration on a tiny random model (the real patched OpenRLHF loop, not training): "
          f"exit status {status}", flush=True)
    print(f"run dir: {run_dir}", flush=True)
    sys.stdout.flush()
