"""Hooks of `openrlhf/trainer/ray/vllm_worker_wrap.py` (vllm_worker_wrap.patch): the methods `WorkerWrap` gains,
run in every vLLM worker by `collective_rpc`. Imports stay inside the functions (the module loads in the worker)."""

from __future__ import annotations

from typing import Any


def apply_lora_update(self: Any, payload: dict) -> dict:
    """`WorkerWrap.apply_lora_update`: write W0 + scaling * B @ A for every LoRA target of `payload`
    (rft.train.lora_payload.build_payload). The applier keeps a pristine copy of each touched base weight and learns
    where every HF weight lands in vLLM's fused / tensor-parallel parameters from the model's own load_weights.
    Returns a plain report; a target vLLM does not hold raises LoraSyncError."""
    import torch

    from rft.train.lora_merge import LoraMergeApplier

    applier = getattr(self, "_rft_lora_applier", None)
    if applier is None:
        applier = LoraMergeApplier(self.model_runner.model, tp_size=self.parallel_config.tensor_parallel_size)
        self._rft_lora_applier = applier
    report = applier.apply(payload)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return report


def lora_adapter_report(self: Any, lora_int_id: int, version: int) -> dict:
    """`WorkerWrap.lora_adapter_report` (--vllm_sync_lora_native): the LoRA target modules this worker holds for
    adapter `lora_int_id`."""
    from rft.train.lora_native import loaded_lora_modules

    return {"version": version, "modules": loaded_lora_modules(self.model_runner, lora_int_id)}
