"""CPU stand-ins for the CPU profile (train_grpo_cpu.sh): OpenRLHF 0.9.3's Ray actors on a machine without a GPU.

Active only when the CPU profile's `rft/cpu/site` directory is on PYTHONPATH and RFT_CPU_STANDINS=1:
its `sitecustomize.py` calls `install_on_import()` at the start of every process that inherits that
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
- NCCL's in-order completion, which DeepSpeed 0.18.5's blocking `Init._allgather_params_coalesced`
  (`runtime/zero/partition_parameters.py:1892`, behind every `GatheredParameters` of 2+ parameters, e.g.
  transformers' ZeRO-3 `from_pretrained` of a Linear with a bias) relies on: it launches one async all-gather per
  parameter and waits only for the last ("Wait ensures the operation is enqueued"); on CUDA the accelerator then
  synchronizes the stream. Gloo finishes async work out of order on its own threads and the CPU accelerator skips
  that synchronize, so the weight's gather could land after rank 0 loaded the checkpoint into it: about 1 load in
  4 left garbage (sometimes NaN) in a q/k/v_proj partition. Stand-in: DeepSpeed's own blocking per-parameter
  gather (`_allgather_params_sequential`).
- vLLM 0.15.1's rewind of a seeded request's generator after a draw it discards (a chunked prefill's partial
  step): `gen.set_offset(gen.get_offset() - 4)` in `GPUModelRunner._bookkeeping_sync`
  (`vllm/v1/worker/gpu_model_runner.py:2875`), a CUDA (Philox) generator's call; a CPU generator raises "CPU
  Generator does not use offset" and the engine dies at the first seeded rollout (experience_maker.patch).
  Stand-in: the state of each such generator saved before the draw and restored instead.

Not needed: `init_device_mesh("cuda")` (works on gloo), `torch.cuda.empty_cache` (a no-op without CUDA).
NCCL is never reached: DeepSpeed picks its CPU accelerator and gloo by itself, and the LoRA sync goes
through the Ray object store (`--vllm_sync_lora_via_object_store`), not a process group.
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType

ZERO_PARAMS = "deepspeed.runtime.zero.partition_parameters"
VLLM_RUNNER = "vllm.v1.worker.gpu_model_runner"


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


class StandinsOnGpuError(RuntimeError):
    """The CPU stand-ins were asked to install in a process that sees a CUDA GPU."""


def refuse_on_gpu(torch: ModuleType) -> None:
    """Raise when CUDA is available: the stand-ins would turn every device call of a GPU run into the CPU."""
    if torch.cuda.is_available():
        raise StandinsOnGpuError(
            f"the CPU stand-ins (RFT_CPU_STANDINS=1 with rft/cpu/site on PYTHONPATH) refuse to install: CUDA sees "
            f"{torch.cuda.device_count()} GPU(s) here; they are for the CPU profile only. Unset RFT_CPU_STANDINS "
            "and remove rft/cpu/site from PYTHONPATH"
        )


def install(torch: ModuleType | None = None, setattr_: Callable = setattr) -> None:
    """Replace the three torch.cuda functions of an imported torch (idempotent); tests pass monkeypatch.setattr.

    Refuses (StandinsOnGpuError) where CUDA is available."""
    torch = torch if torch is not None else sys.modules["torch"]
    refuse_on_gpu(torch)
    cuda = torch.cuda
    for name, standin in (("set_device", _set_device), ("current_device", _current_device),
                          ("synchronize", _synchronize)):
        if getattr(cuda, name) is not standin:
            setattr_(cuda, name, standin)


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


def _allgather_params_in_order(self, param_list, hierarchy=0, quantize=False):
    """Blocking gather of each parameter in turn (DeepSpeed's own sequential path): complete on return, on gloo."""
    return self._allgather_params_sequential(param_list, hierarchy=hierarchy)


def install_in_order_allgather(partition_parameters: ModuleType | None = None, setattr_: Callable = setattr) -> None:
    """Route DeepSpeed's blocking coalesced all-gather through its sequential one (see the module docstring)."""
    refuse_on_gpu(sys.modules["torch"] if "torch" in sys.modules else importlib.import_module("torch"))
    module = partition_parameters or importlib.import_module(ZERO_PARAMS)
    if module.Init._allgather_params_coalesced is not _allgather_params_in_order:
        setattr_(module.Init, "_allgather_params_coalesced", _allgather_params_in_order)


def _discarded_generators(runner) -> dict:
    """The generators of the requests whose draw this step is discarded (index in the batch -> generator)."""
    mask = runner.discard_request_mask.np[: runner.input_batch.num_reqs]
    gens = runner.input_batch.generators
    return {i: gens[i] for i in (int(j) for j in mask.nonzero()[0]) if i in gens}


def install_cpu_generator_rewind(module: ModuleType | None = None, setattr_: Callable = setattr) -> None:
    """Rewind a discarded draw of a seeded request by restoring its CPU generator's state (see the docstring)."""
    runner = (module or importlib.import_module(VLLM_RUNNER)).GPUModelRunner
    if getattr(runner._sample, "rft_rewind", False):
        return
    sample, bookkeeping = runner._sample, runner._bookkeeping_sync

    def _sample(self, *args, **kwargs):
        self.rft_generator_states = {i: g.get_state() for i, g in _discarded_generators(self).items()}
        return sample(self, *args, **kwargs)

    def _bookkeeping_sync(self, *args, **kwargs):
        saved, gens = getattr(self, "rft_generator_states", {}), self.input_batch.generators
        held = {i: gens.pop(i) for i in saved if i in gens}  # vLLM's set_offset loop finds none of them
        try:
            return bookkeeping(self, *args, **kwargs)
        finally:
            for i, gen in held.items():
                gen.set_state(saved[i])
                gens[i] = gen
            self.rft_generator_states = {}

    _sample.rft_rewind = True
    setattr_(runner, "_sample", _sample)
    setattr_(runner, "_bookkeeping_sync", _bookkeeping_sync)


def install_on_import() -> None:
    """Install each stand-in now if its module is imported, else right after it is (importing nothing itself)."""
    for name, hook in (("torch", install), (ZERO_PARAMS, install_in_order_allgather),
                       (VLLM_RUNNER, install_cpu_generator_rewind)):
        if name in sys.modules:
            hook(sys.modules[name])
        else:
            sys.meta_path.insert(0, _AfterImport(name, hook))
