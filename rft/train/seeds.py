"""Every random draw of a run derived from its one seed (OpenRLHF's --seed), so a run can be reproduced and resumed.

Each vLLM sample is its own request with a seed of its own, derived from (seed, step, prompt, occurrence, sample
index): a prompt's samples then depend on nothing else in the batch or on scheduling. The replay buffer's shuffle
and the LoRA initialisation take generators seeded the same way, so a resumed process draws what the
uninterrupted one would have drawn.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import TypeVar

import torch

P = TypeVar("P")

SEED_BITS = 63
"""Derived seeds are below 2**63: a valid torch and vLLM seed."""


def derive(seed: int, *parts: object) -> int:
    """A seed in [0, 2**63) from SHA-256 of (seed, *parts) (JSON-encoded: str, int, lists and tuples only)."""
    text = json.dumps([int(seed), *parts], ensure_ascii=False, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> (64 - SEED_BITS)


def request_seed(seed: int, step: tuple[str, int], prompt: str, index: int, occurrence: int = 0) -> int:
    """The vLLM seed of sample `index` of `prompt` at `step` (("rollout", n) or ("eval", n)); `occurrence`
    tells apart a prompt sent twice in one step (a duplicate row, a second pass)."""
    return derive(seed, "request", list(step), prompt, occurrence, index)


def group_seeds(seed: int, step: tuple[str, int], prompt: str, n: int, occurrence: int = 0) -> list[int]:
    """The seeds of a prompt's n samples, sample 0 first."""
    return [request_seed(seed, step, prompt, i, occurrence) for i in range(n)]


def with_seed(params: P, seed: int) -> P:
    """A copy of vLLM `SamplingParams` that draws from its own generator seeded with `seed`."""
    out = copy.deepcopy(params)
    out.seed = seed
    return out


def prompt_generator(seed: int) -> torch.Generator:
    """The generator of the prompt order (the prompt dataloader's sampler); its state travels in the checkpoint."""
    return torch.Generator().manual_seed(derive(seed, "prompts"))


def shuffle_generator(seed: int, step: int) -> torch.Generator:
    """The generator of the replay buffer's shuffle at `step`: micro-batch order from (seed, step), not from the
    process RNG (which a resumed process starts afresh)."""
    return torch.Generator().manual_seed(derive(seed, "replay", step))


def lora_init_seed(seed: int) -> int:
    """The torch seed set just before the LoRA adapter is created (its A matrices are drawn from it)."""
    return derive(seed, "lora_init")
