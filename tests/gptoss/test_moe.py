"""rft/gptoss/moe.py: gpt-oss eval forwards take the training forward's routed expert loop on any device.

The CPU always takes the loop in transformers, so the GPU branch is forced here with hidden states whose device
reports type "cuda" while their storage stays on the CPU; which branch ran is read from the torch ops called.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from rft.fixtures.mxfp4_fixtures import build_mxfp4_checkpoint, tiny_config, zero3_strategy
from rft.gptoss.moe import ROUTED, expert_modules, route_experts_in_eval


class _GpuType(str):
    """A device that reads as CUDA to a `device.type` test and is the CPU to torch."""

    type = "cuda"


class OnGpu(torch.Tensor):
    """CPU storage whose `.device` reports type "cuda": transformers' GPU branch runs on this machine."""

    @property
    def device(self):
        return _GpuType("cpu")


class Ops(TorchFunctionMode):
    """Records the names of the torch functions called."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def run(experts: torch.nn.Module, router: torch.nn.Module, hidden: torch.Tensor) -> tuple[torch.Tensor, set[str]]:
    """(experts output, the torch functions its forward called) for `hidden` as the layer's router routes it."""
    with torch.no_grad():
        scores, indices = router(hidden)
        with Ops() as ops:
            out = experts(hidden.as_subclass(OnGpu), router_indices=indices, routing_weights=scores)
    return out.as_subclass(torch.Tensor), ops.names


@pytest.fixture
def layer():
    from transformers import GptOssForCausalLM

    torch.manual_seed(0)
    model = GptOssForCausalLM(tiny_config()).to(torch.bfloat16)
    mlp = model.model.layers[0].mlp
    return model, mlp.experts, mlp.router, torch.randn(2, 7, 64, dtype=torch.bfloat16)


def test_transformers_eval_on_a_gpu_runs_every_expert(layer):
    """The premise: eval mode on a GPU takes the dense bmm over all experts, training the routed loop."""
    _, experts, router, hidden = layer
    experts.train()
    loop, loop_ops = run(experts, router, hidden)
    experts.eval()
    dense, dense_ops = run(experts, router, hidden)
    assert "index_add_" in loop_ops and "bmm" not in loop_ops
    assert "bmm" in dense_ops and "index_add_" not in dense_ops
    assert torch.allclose(dense.float(), loop.float(), atol=5e-2)  # same function, other arithmetic


def test_routed_eval_is_the_training_forward_bit_for_bit(layer):
    model, experts, router, hidden = layer
    experts.train()
    want, _ = run(experts, router, hidden)
    assert route_experts_in_eval(model) == 2 and all(getattr(m, ROUTED) for m in expert_modules(model))
    model.eval()
    got, ops = run(experts, router, hidden)
    assert "index_add_" in ops and "bmm" not in ops
    assert torch.equal(got, want)
    assert not experts.training  # the mode is the caller's again after the forward


def test_gradients_flow_through_the_routed_eval_path(layer):
    model, experts, router, hidden = layer
    route_experts_in_eval(model)
    model.eval()
    scores, indices = router(hidden)
    experts(hidden, router_indices=indices, routing_weights=scores).float().sum().backward()
    assert experts.gate_up_proj.grad is not None and experts.gate_up_proj.grad.abs().sum() > 0


def test_patched_actor_routes_eval_experts_under_zero3(patched_openrlhf, dist_world, tmp_path):
    """The real patched Actor (the reference model's ZeRO-3 eval config, an MXFP4 checkpoint) gets the routed path."""
    from openrlhf.models import Actor

    path = tmp_path / "mxfp4"
    build_mxfp4_checkpoint(path, tokenizer=False)
    s = zero3_strategy()
    ref = Actor(str(path), attn_implementation="eager", param_dtype="bf16", ds_config=s.get_ds_eval_config())
    experts = expert_modules(ref.model)
    assert len(experts) == 2 and all(getattr(m, ROUTED, False) for m in experts)
