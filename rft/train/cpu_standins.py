"""torch.cuda stand-ins for the CPU profile (train_grpo_cpu.sh): OpenRLHF 0.9.3's Ray actors on a machine without a GPU.

Active only when the CPU profile's `scripts/cpu_profile` directory is on PYTHONPATH and RFT_CPU_STANDINS=1:
its `sitecustomize.py` calls `install_on_torch_import()` at the start of every process that inherits that
environment (the driver, Ray's workers, vLLM's engine core). The GPU path never imports this module, and the
patches do not know about it. Each call site was shown necessary by switching its stand-in off alone
(line numbers: pristine 0.9.3, patched in brackets):

- `torch.cuda.set_device(local_rank)`: `utils/deepspeed/deepspeed.py:94` (95), `setup_distributed`; without a
  driver it raises "Found no NVIDIA driver". Stand-in: nothing to select.
- `torch.cuda.current_device()`: `trainer/ppo_utils/replay_buffer.py:191` (`f"cuda:{...}"`, the first failure),
  `utils/deepspeed/deepspeed.py:424` (429), `trainer/ray/ppo_actor.py:171` (192) and `:531` (630),
  `trainer/ray/launcher.py:134` (reference model); used as a device for `.to()` / `device=`. Stand-in:
  `CPU_DEVICE`, a str equal to "cpu" (torch parses it as the CPU) that formats as "0" (the f-string stays valid).
- `torch.cuda.synchronize()`: `utils/distributed_util.py:10` (at actor init and after every sync),
  `trainer/ray/ppo_actor.py:510` (609). Stand-in: nothing to wait for.

Not needed: `init_device_mesh("cuda")` (works on gloo), `torch.cuda.empty_cache` (a no-op without CUDA).
NCCL is never reached: DeepSpeed picks its CPU accelerator and gloo by itself, and the LoRA sync goes
through the Ray object store (`--vllm_sync_lora_via_object_store`), not a process group.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType

ENV = "RFT_CPU_STANDINS"


class _CpuDeviceIndex(str):
    """Equal to "cpu" for torch's device parsing; prints and formats as "0"."""

    def __new__(cls):
        return super().__new__(cls, "cpu")

    def __str__(self) -> str:
        return "0"

    def __format__(self, spec: str) -> str:
        return format("0", spec)

    def __repr__(self) -> str:
        return "CPU_DEVICE"


CPU_DEVICE = _CpuDeviceIndex()


def _set_device(device: object) -> None:
    return None


def _current_device() -> str:
    return CPU_DEVICE


def _synchronize(device: object = None) -> None:
    return None


def install(torch: ModuleType | None = None) -> None:
    """Replace the three torch.cuda functions of an imported torch (idempotent)."""
    torch = torch if torch is not None else sys.modules["torch"]
    cuda = torch.cuda
    if getattr(cuda, "_rft_cpu_standins", False):
        return
    cuda.set_device = _set_device
    cuda.current_device = _current_device
    cuda.synchronize = _synchronize
    cuda._rft_cpu_standins = True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of one module so a callback runs right after it executes."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                run = spec.loader.exec_module

                def exec_module(module, _run=run):
                    _run(module)
                    self.callback(module)

                spec.loader.exec_module = exec_module
                return spec
        return None


def install_on_torch_import() -> None:
    """Install now if torch is imported, else right after it is (importing nothing itself)."""
    if "torch" in sys.modules:
        install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterImport("torch", install))
