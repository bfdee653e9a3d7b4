"""rft.eval.generation: the plain functions around the engines, and the HF backend on a real tiny model."""

from __future__ import annotations

import pytest

from rft.eval.generation import (
    HFBackend,
    Request,
    batches,
    check_uniform,
    completion_from_vllm,
    cut_at_stop,
    eos_token_ids,
    make_backend,
    vllm_engine_kwargs,
    vllm_sampling_kwargs,
)
from rft.fixtures.tiny_model import build_tiny_model, build_tokenizer
from rft.prompts import build_input, chat_template_kwargs, encode_prompt


def req(temperature: float, seed: int = 5, max_new_tokens: int = 12, sample_index: int = 0) -> Request:
    return Request("p", sample_index, (1, 2, 3), temperature, 0.95, max_new_tokens, seed)


def test_vllm_sampling_kwargs_greedy_and_sampled():
    greedy = vllm_sampling_kwargs(req(0.0))
    assert greedy == {
        "n": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 12,
        "seed": None,
        "skip_special_tokens": False,
    }
    sampled = vllm_sampling_kwargs(req(0.6, seed=77))
    assert (
        sampled["n"] == 1
        and sampled["seed"] == 77
        and sampled["top_p"] == 0.95
        and sampled["temperature"] == 0.6
    )


def test_vllm_engine_kwargs():
    kw = vllm_engine_kwargs(
        "/m", tensor_parallel_size=4, seed=3, gpu_memory_utilization=0.8, max_model_len=None
    )
    assert kw == {
        "model": "/m",
        "tensor_parallel_size": 4,
        "seed": 3,
        "gpu_memory_utilization": 0.8,
        "generation_config": "auto",
        "enable_prefix_caching": True,
        "dtype": "auto",
    }
    assert (
        vllm_engine_kwargs(
            "/m", tensor_parallel_size=1, seed=0, gpu_memory_utilization=0.9, max_model_len=4096
        )["max_model_len"]
        == 4096
    )


def test_completions_keep_special_tokens_and_finish_flag():
    tok = build_tokenizer()
    ids = tok("So \\boxed{5}.<|im_end|>", add_special_tokens=False)["input_ids"]
    done = completion_from_vllm(tok, ids, "stop")
    assert done.finished and done.text.endswith("<|im_end|>") and done.token_ids == tuple(ids)
    assert not completion_from_vllm(tok, ids[:-1], "length").finished


def test_stop_handling_and_batching():
    assert cut_at_stop([4, 5, 9, 6, 9], [9]) == ([4, 5, 9], True)
    assert cut_at_stop([4, 5, 6], [9, 10]) == ([4, 5, 6], False)
    tok = build_tokenizer()

    class Cfg:
        eos_token_id = [7, tok.eos_token_id]

    assert eos_token_ids(tok, Cfg()) == [7, tok.eos_token_id]
    assert eos_token_ids(tok) == [tok.eos_token_id]
    assert [len(b) for b in batches([req(0.0)] * 5, 2)] == [2, 2, 1]
    check_uniform([req(0.6, seed=1), req(0.6, seed=2)])
    with pytest.raises(ValueError, match="one sampling setting"):
        check_uniform([req(0.0), req(0.6)])
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend(
            "tgi",
            "/m",
            device="cpu",
            dtype="auto",
            batch_size=1,
            tensor_parallel_size=1,
            seed=0,
            gpu_memory_utilization=0.9,
            max_model_len=None,
        )


def test_hf_backend_greedy_is_reproducible_and_sampling_is_seeded(tmp_path):
    path = build_tiny_model(tmp_path / "m")
    backend = HFBackend(path, dtype="float32", batch_size=2)
    prompts = [
        encode_prompt(backend.tokenizer, build_input(q), **chat_template_kwargs("medium", "2025-08-05"))
        for q in ("What is 1+2?", "Compute 3+4, please.", "What is 10+10?")
    ]

    def run(temperature: float, seed: int):
        reqs = [Request(str(i), 0, tuple(p), temperature, 1.0, 6, seed) for i, p in enumerate(prompts)]
        return backend.generate(reqs)

    greedy = run(0.0, 0)
    assert greedy == run(0.0, 99)  # seed irrelevant for greedy
    assert all(
        len(c.token_ids) == 6 and not c.finished for c in greedy
    )  # random weights never stop in 6 tokens
    assert run(1.0, 5) == run(1.0, 5) and run(1.0, 5) != run(1.0, 6)
