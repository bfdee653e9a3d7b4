"""Hooks of `openrlhf/trainer/ray/vllm_engine.py` (vllm_engine.patch): the LoRA methods `LLMRayActor` gains,
seeded sample requests, native-LoRA engine arguments and deadlines on engine calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


async def apply_lora_update(self: Any, payload: dict) -> list:
    """`LLMRayActor.apply_lora_update`: forward a LoRA payload (plain dicts + bytes, rft.train.lora_payload) to
    every worker of this engine (`payload` arrives resolved from the Ray object store; bytes cross vLLM's msgpack
    hop intact, unlike a tensor in collective_rpc args). Returns one report per worker."""
    return await self.llm.collective_rpc("apply_lora_update", args=(payload,))


async def load_lora_adapter(self: Any, payload: dict) -> list:
    """`LLMRayActor.load_lora_adapter` (--vllm_sync_lora_native): serve the payload as this engine's LoRA adapter.

    It is written to tmpfs under a fresh adapter id (rft.train.lora_native), added to the engine (every worker loads
    it), used by every later generate(), and the previous adapter is removed. Returns one report per worker: the
    LoRA modules it holds for the new id.
    """
    from vllm.lora.request import LoRARequest

    from rft.train.lora_native import NativeLoraSlot

    slot = getattr(self, "_rft_lora_slot", None)
    if slot is None:
        slot = self._rft_lora_slot = NativeLoraSlot()
    staged = slot.stage(payload)
    request = LoRARequest(staged.name, staged.lora_int_id, staged.path)
    await self.llm.add_lora(request)
    reports = await self.llm.collective_rpc("lora_adapter_report", args=(staged.lora_int_id, staged.version))
    previous = getattr(self, "_rft_lora_staged", None)
    self._rft_lora_request, self._rft_lora_staged = request, staged
    if previous is not None:
        await self.llm.remove_lora(previous.lora_int_id)
        slot.retire(previous)
    return reports


def lora_request(self: Any) -> Any:
    """The synced adapter every request uses (native LoRA mode), else None."""
    return getattr(self, "_rft_lora_request", None)


async def sample_requests(hf_tokenizer: Any, sampling_params: Any, num_samples: int,
                          seeds: Sequence[int] | None) -> tuple[Any, list]:
    """This engine's one copy of the trainer's tokenizer (rft.train.shared_tokenizer) and the sampling parameters
    of each of the `num_samples` requests: sample i seeded with seeds[i] when given (rft.train.seeds)."""
    from rft.train.seeds import with_seed
    from rft.train.shared_tokenizer import local

    params = [sampling_params] * num_samples if seeds is None else [with_seed(sampling_params, s) for s in seeds]
    return await local(hf_tokenizer), params


def wait_placement(group: Any) -> None:
    """Wait for the engines' placement group with a deadline (a group Ray cannot place fails, named)."""
    from rft.train import waits

    waits.get(group.ready(), "placement group of the vLLM engines", waits.PLACEMENT_TIMEOUT_S)


def native_lora_kwargs(lora_rank: int, pretrain: str) -> dict:
    """The engine arguments that serve base + the synced LoRA adapter (--vllm_sync_lora_native), or none."""
    if lora_rank <= 0:
        return {}
    from rft.train.lora_native import native_engine_kwargs

    return native_engine_kwargs(lora_rank, pretrain)


def gather(engines: Sequence[Any], refs: list, method_name: str, call_timeout: float | None) -> list:
    """The engines' answers, failing after `call_timeout` seconds without one, naming the silent engines
    (rft.train.engine_calls)."""
    from rft.train.engine_calls import engine_names
    from rft.train.engine_calls import gather as gather_answers

    return gather_answers(refs, engine_names(engines), method_name, call_timeout)
