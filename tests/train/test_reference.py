"""`--ref_from_actor` (rft/train/reference.py, ppo_actor.patch): the patched `PolicyModelActor.forward_reference` on a
LoRA actor gives exactly the log-probs the patched `ReferenceModelActor.forward` gives on a separate copy of the base,
and the patched train() creates no reference group when it is on.

Real: OpenRLHF 0.9.3 + the series (its Actor, both Ray actor classes' own methods, its argparse), PEFT LoRA on a tiny
Llama whose adapter is moved off zero (a trained adapter), in fp32 and bf16.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rft.cpu.standins import install as install_cuda_standins
from rft.fixtures.cpu_trainer import TARGETS, tiny_llama_config, tiny_lora_model, trainer_args
from rft.launch.openrlhf_cli import FlagError
from rft.launch.train_options import uses_actor_as_reference
from rft.train.reference import REFERENCE_FORWARD, ActorAsReference, adapter_disabled

LORA = ["--lora_rank", "8", "--lora_alpha", "16", "--target_modules", *TARGETS]
PROMPT_LEN = 5


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sequences, attention_mask, action_mask): two rows, the first left-padded by one token."""
    gen = torch.Generator().manual_seed(3)
    seqs = torch.randint(3, 96, (2, 11), generator=gen)
    att = torch.ones_like(seqs)
    att[0, 0] = 0
    seqs[0, 0] = 0
    return seqs, att, att[:, PROMPT_LEN:].bool()


def _actors(dtype: torch.dtype):
    """(policy, reference): the patched Ray actor classes' instances, without Ray, around a LoRA actor whose adapter
    is nonzero and a separate plain model holding the same base weights."""
    from openrlhf.models import Actor
    from openrlhf.trainer.ray.launcher import ReferenceModelActor
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor
    from transformers import LlamaForCausalLM

    peft, base = tiny_lora_model(trainer_args(LORA))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    plain = LlamaForCausalLM(tiny_llama_config())
    plain.load_state_dict(base)
    strategy = SimpleNamespace(ring_attn_group=None)
    policy = object.__new__(PolicyModelActor.__ray_actor_class__)
    reference = object.__new__(ReferenceModelActor.__ray_actor_class__)
    policy.actor, reference.model = Actor(peft.to(dtype)), Actor(plain.to(dtype))
    for who in (policy, reference):
        who.strategy = strategy
    for actor in (policy.actor, reference.model):
        actor.packing_samples, actor.temperature = False, 1.0
        actor.eval()
    return policy, reference


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_reference_from_actor_equals_the_reference_model(patched_openrlhf, dtype):
    install_cuda_standins()
    policy, reference = _actors(dtype)
    seqs, att, action_mask = _batch()
    want = reference.forward(seqs, action_mask, att)
    got = getattr(policy, REFERENCE_FORWARD)(seqs, action_mask, att)
    with_adapter = policy.forward(seqs, action_mask, att)
    assert got.dtype == want.dtype and got.shape == want.shape == action_mask.shape
    assert torch.equal(got, want)
    assert (with_adapter - want).abs().max() > 1e-2  # the adapter moves the policy: an enabled adapter would fail
    # the adapter is back on after the reference forward
    assert torch.equal(policy.forward(seqs, action_mask, att), with_adapter)


def test_adapter_disabled_refuses_an_actor_without_lora(patched_openrlhf):
    from openrlhf.models import Actor
    from transformers import LlamaForCausalLM

    with pytest.raises(ValueError, match="needs a LoRA actor"), adapter_disabled(Actor(LlamaForCausalLM(tiny_llama_config()))):
        pass


def test_ref_from_actor_flag_needs_lora_and_a_kl(patched_openrlhf):
    assert uses_actor_as_reference(trainer_args(LORA + ["--ref_from_actor", "--init_kl_coef", "0.01"]))
    assert not uses_actor_as_reference(trainer_args(LORA + ["--init_kl_coef", "0.01"]))
    assert not uses_actor_as_reference(trainer_args(LORA + ["--ref_from_actor", "--init_kl_coef", "0"]))
    with pytest.raises(FlagError, match="--ref_from_actor requires --lora_rank > 0"):
        trainer_args(["--ref_from_actor"])


class _Group:
    """Records the calls a RayActorGroup receives (the actor group the experience maker's reference calls reach)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def async_run_method_batch(self, method_name, **kwargs):
        self.calls.append((method_name, kwargs))
        return ["batch"]

    def async_run_method(self, method_name, *args, **kwargs):
        self.calls.append((method_name, kwargs))
        return ["each"]


def test_actor_as_reference_sends_forward_to_the_adapter_disabled_forward():
    group = _Group()
    ref = ActorAsReference(group)
    assert ref.async_run_method_batch(method_name="forward", sequences=[1]) == ["batch"]
    assert ref.async_run_method(method_name="empty_cache") == ["each"]
    assert group.calls == [(REFERENCE_FORWARD, {"sequences": [1]}), ("empty_cache", {})]

