"""Seeds derived from the run's one seed: per-request vLLM seeds, the replay shuffle, the LoRA initialisation."""

import torch
from torch.utils.data import DataLoader

from rft.train.seeds import (
    SEED_BITS,
    derive,
    group_seeds,
    lora_init_seed,
    prompt_generator,
    request_seed,
    shuffle_generator,
    with_seed,
)


def test_a_request_seed_is_fixed_by_its_key_alone():
    a = request_seed(42, ("rollout", 3), "What is 3+4?", 5)
    assert a == request_seed(42, ("rollout", 3), "What is 3+4?", 5)
    assert 0 <= a < 2**SEED_BITS
    others = {
        request_seed(43, ("rollout", 3), "What is 3+4?", 5),  # another seed
        request_seed(42, ("rollout", 4), "What is 3+4?", 5),  # another step
        request_seed(42, ("eval", 3), "What is 3+4?", 5),  # eval, not rollout
        request_seed(42, ("rollout", 3), "What is 3+5?", 5),  # another prompt
        request_seed(42, ("rollout", 3), "What is 3+4?", 6),  # another sample
        request_seed(42, ("rollout", 3), "What is 3+4?", 5, occurrence=1),  # the prompt's second copy
    }
    assert a not in others and len(others) == 6


def test_a_group_is_its_samples_seeds_in_order():
    seeds = group_seeds(7, ("eval", 0), "p", 4)
    assert seeds == [request_seed(7, ("eval", 0), "p", i) for i in range(4)] and len(set(seeds)) == 4


def test_the_key_is_unambiguous():
    # ("a", "bc") and ("ab", "c") must not collide (JSON-encoded parts, not concatenated strings)
    assert derive(1, "a", "bc") != derive(1, "ab", "c")
    assert derive(1, 2, 3) != derive(12, 3)


def order(generator: torch.Generator) -> list[int]:
    loader = DataLoader(list(range(32)), batch_size=4, shuffle=True, generator=generator)
    return [int(x) for batch in loader for x in batch]


def test_the_replay_shuffle_ignores_the_process_rng_and_follows_seed_and_step():
    torch.manual_seed(0)
    first = order(shuffle_generator(42, 9))
    torch.manual_seed(12345)  # a resumed process: another RNG state
    torch.rand(100)
    assert order(shuffle_generator(42, 9)) == first
    assert sorted(first) == list(range(32)) and first != list(range(32))
    assert order(shuffle_generator(42, 10)) != first
    assert order(shuffle_generator(43, 9)) != first


def test_without_the_generator_the_order_follows_the_process_rng():
    """Why the generator is needed: DataLoader(shuffle=True) alone draws from the process RNG."""
    torch.manual_seed(0)
    a = order(None)
    torch.manual_seed(1)
    assert order(None) != a


def test_the_lora_initialisation_seed_follows_the_run_seed():
    assert lora_init_seed(42) == lora_init_seed(42) != lora_init_seed(43)
    torch.manual_seed(lora_init_seed(42))
    a = torch.empty(8, 16).uniform_()
    torch.manual_seed(lora_init_seed(42))
    assert torch.equal(a, torch.empty(8, 16).uniform_())


def test_a_seeded_copy_leaves_the_shared_params_alone():
    from types import SimpleNamespace

    shared = SimpleNamespace(temperature=1.0, seed=None)
    copies = [with_seed(shared, s) for s in (3, 4)]
    assert shared.seed is None and [c.seed for c in copies] == [3, 4] and copies[0].temperature == 1.0


def test_the_prompt_order_follows_the_seed():
    assert order(prompt_generator(42)) == order(prompt_generator(42)) != order(prompt_generator(43))


def test_the_patched_dispatch_gives_each_sample_its_seed(patched_openrlhf, monkeypatch):
    """experience_maker.patch: each prompt's n samples carry group_seeds of (--seed, step, prompt, occurrence); a
    prompt sent twice in one step draws other samples; no seed_step, no seeds (the engine's generator)."""
    from types import SimpleNamespace

    from openrlhf.trainer.ppo_utils import experience_maker as em

    calls = []
    engine = SimpleNamespace(get_num_unfinished_requests=SimpleNamespace(remote=lambda: 0),
                             generate_responses=SimpleNamespace(remote=lambda **kw: calls.append(kw) or kw))
    gen = object.__new__(em.SamplesGenerator)
    gen.args = SimpleNamespace(n_samples_per_prompt=3, seed=7)
    gen.vllm_engines, gen.tokenizer = [engine], None
    monkeypatch.setattr("ray.get", lambda refs: refs)
    monkeypatch.setattr("ray.wait", lambda refs, **kw: (list(refs), []))  # the engines' load counts: answered
    gen._rft_sent = {}
    gen._dispatch_prompts_to_vllm(["q1", "q2", "q1"], ["1", "2", "1"], seed_step=("rollout", 5))
    assert [c["seeds"] for c in calls] == [group_seeds(7, ("rollout", 5), "q1", 3),
                                           group_seeds(7, ("rollout", 5), "q2", 3),
                                           group_seeds(7, ("rollout", 5), "q1", 3, occurrence=1)]
    calls.clear()
    gen._dispatch_prompts_to_vllm(["q1"], ["1"])
    assert calls[0]["seeds"] is None


def test_the_patched_collection_keeps_dispatch_order(patched_openrlhf, monkeypatch):
    """Groups come back in the order they were sent, whichever finishes first (ray.wait would name the last)."""
    from types import SimpleNamespace

    from openrlhf.trainer.ppo_utils import experience_maker as em

    monkeypatch.setattr("ray.wait", lambda refs, **kw: (refs[-1:], refs[:-1]))  # completion order: last first
    monkeypatch.setattr("ray.get", lambda ref: ref)
    gen = object.__new__(em.SamplesGenerator)
    gen.args = SimpleNamespace(n_samples_per_prompt=1)
    gen._dispatch_prompts_to_vllm = lambda ps, ls, **kw: [[p] for p in ps]
    gen._process_response_into_experience = lambda response, **kw: response
    loader = iter([(None, [p], ["7"]) for p in ("a", "b", "c", "d")])
    batch, consumed, _ = gen._generate_vllm(dataloader_iter=loader, num_prompts=4, dynamic_filtering=False)
    assert batch == ["a", "b", "c", "d"] and consumed == 4
