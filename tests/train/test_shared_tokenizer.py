"""The trainer's tokenizer reaches each engine once: the real patched dispatch and engine method on real Ray."""

from __future__ import annotations

import asyncio
import os
import pickle
from types import SimpleNamespace

import pytest

from rft.train.shared_tokenizer import TokenizerRef, local, shared
from tests.support.ray_local import patched_ray
from tests.train.tokenizer_standins import VOCAB, CountingTokenizer, large_vocab_tokenizer


@pytest.fixture(scope="module")
def ray_local(patched_openrlhf):
    """A local Ray whose workers import the patched openrlhf, the stubs and the repository."""
    yield from patched_ray(patched_openrlhf)


def engine_class():
    """The real (patched) LLMRayActor, its vLLM replaced by an executor that tokenizes with what it is given."""
    import ray
    from openrlhf.trainer.ray.vllm_engine import LLMRayActor

    class Executor:
        async def execute(self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine):
            ids = hf_tokenizer(prompt, add_special_tokens=False)["input_ids"]
            return {"pid": os.getpid(), "tokenizer": id(hf_tokenizer), "ids": ids, "vocab": len(hf_tokenizer)}

    class EngineUnderTest(LLMRayActor.__ray_metadata__.modified_class):
        def __init__(self):
            self.executor = Executor()

        def get_num_unfinished_requests(self):
            return 0

        def tokenizer_loads(self):
            return CountingTokenizer.loads

    return ray.remote(num_cpus=0)(EngineUnderTest)


def test_each_engine_loads_the_tokenizer_once_and_no_step_pickles_it(ray_local):
    """Three steps of 4 prompts x 2 samples over 2 engines: the tokenizer is serialized at most once (the first
    step) and loaded at most once per engine; 0.9.3's by-value argument pickles it in every call."""
    from openrlhf.trainer.ppo_utils import experience_maker as em

    engines = [engine_class().remote() for _ in range(2)]
    gen = object.__new__(em.SamplesGenerator)
    gen.args = SimpleNamespace(n_samples_per_prompt=2, seed=1, vllm_call_timeout=60)
    gen.vllm_engines, gen.tokenizer, gen._rft_sent = engines, large_vocab_tokenizer(), {}
    per_step, seen = [], set()
    for step in range(3):
        before = CountingTokenizer.dumps
        refs = gen._dispatch_prompts_to_vllm([f"t{step} t{i} t{VOCAB - 1}" for i in range(4)], ["1"] * 4)
        for group in ray_local.get(refs, timeout=120):
            for out in group:
                assert out["vocab"] == VOCAB and out["ids"][-1] == VOCAB - 1
                seen.add((out["pid"], out["tokenizer"]))
        per_step.append(CountingTokenizer.dumps - before)
    loads = ray_local.get([e.tokenizer_loads.remote() for e in engines], timeout=60)
    assert per_step[1:] == [0, 0], f"tokenizer serializations per step: {per_step}"
    assert per_step[0] <= 1 and all(n <= 1 for n in loads), (per_step, loads)
    assert len(seen) == len({pid for pid, _ in seen}), f"one tokenizer object per engine process: {seen}"


def test_the_ref_pickles_small_and_resolves_to_one_copy(ray_local):
    tok = large_vocab_tokenizer(1000)
    owner = SimpleNamespace()
    handle = shared(owner, tok)
    assert shared(owner, tok) is handle and shared(owner, None) is None
    assert len(pickle.dumps(handle)) < 1000 < len(pickle.dumps(tok))
    other = shared(owner, large_vocab_tokenizer(10))
    assert other is not handle  # a new tokenizer object is put anew

    async def twice():
        return await asyncio.gather(local(handle), local(handle), local("as given"))

    a, b, same = asyncio.run(twice())
    assert a is b and len(a) == 1000 and same == "as given" and isinstance(handle, TokenizerRef)
