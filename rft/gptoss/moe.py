"""One expert path for every trainer forward of a gpt-oss model: the routed per-expert loop training uses.

transformers' `GptOssExperts.forward` loops over the routed experts only `if device.type == "cpu" or
self.training`; in eval mode on a GPU it runs every expert for every token (8x the expert FLOPs at 20b, 32x at
120b) and sums with zero weights. The reference and old-log-prob forwards run in eval mode, so they would take
another kernel path than the training forward (a ratio off 1 before any update) and hold a transient the size
of all experts' activations. `route_experts_in_eval` makes eval forwards take the training loop on any device.
"""

from __future__ import annotations

import types

import torch

ROUTED = "_rft_routed_eval"
"""Attribute marking an experts module whose eval forward takes the routed loop."""


def expert_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The gpt-oss experts modules of `model` (transformers' `GptOssExperts`)."""
    return [m for m in model.modules() if type(m).__name__ == "GptOssExperts"]


def _routed_forward(self: torch.nn.Module, *args, **kwargs) -> torch.Tensor:
    """The class's forward with `training` set for its branch alone: the routed loop, gradients as the caller has."""
    was = self.training
    self.training = True
    try:
        return type(self).forward(self, *args, **kwargs)
    finally:
        self.training = was


def route_experts_in_eval(model: torch.nn.Module) -> int:
    """Give every gpt-oss experts module of `model` the routed loop in eval mode too; returns the count.

    The experts module reads `training` for nothing but the choice of path, so the loop is exactly the training
    forward's arithmetic; nothing else of the model changes mode.
    """
    modules = expert_modules(model)
    for module in modules:
        module.forward = types.MethodType(_routed_forward, module)
        setattr(module, ROUTED, True)
    return len(modules)
