"""Rotary embeddings kept in fp32 the way vLLM computes them, whatever DeepSpeed does to the model around them.

Two casts break transformers' rotary `inv_freq` buffers in a bf16 DeepSpeed run: under `deepspeed.zero.Init`
the wrapped `torch.arange` returns bf16, so yarn's ramp is built from rounded positions (up to ~5% off at
gpt-oss's yarn factor 32), and the engine's `module.bfloat16()` casts every floating buffer (~0.3% off, a phase
error of radians at position 4096). vLLM builds its cos/sin cache from fp32 frequencies, so either cast puts
the trainer on other positions than the engine. `pin_rotary_fp32` recomputes the frequencies in fp32 outside
any `zero.Init` and holds them as a plain attribute, which `module.to(dtype)` does not touch.
"""

from __future__ import annotations

import torch

PINNED = "_rft_rotary_fp32"
"""Attribute marking a rotary module whose frequencies were pinned (the count in the log and the tests)."""


def rotary_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformers rotary-embedding modules of `model`: they hold `inv_freq`, `rope_init_fn` and `config`."""
    return [m for m in model.modules() if hasattr(m, "inv_freq") and hasattr(m, "rope_init_fn") and hasattr(m, "config")]


def fp32_inv_freq(module: torch.nn.Module) -> tuple[torch.Tensor, float]:
    """(inv_freq, attention scaling) of a rotary module recomputed in fp32 on CPU; refuses a live `zero.Init`."""
    probe = torch.arange(2, dtype=torch.float32).dtype
    if probe != torch.float32:  # zero.Init's tensor-constructor wrappers are live: yarn's ramp would be rounded
        raise RuntimeError(f"torch.arange(dtype=float32) gives {probe} here: call pin_rotary_fp32 outside zero.Init")
    inv_freq, scaling = module.rope_init_fn(module.config, torch.device("cpu"))
    return inv_freq.float(), float(scaling)


def pin_rotary_fp32(model: torch.nn.Module) -> int:
    """Replace every rotary `inv_freq` buffer of `model` by fp32 frequencies no dtype cast reaches; returns the count.

    The forward of transformers' rotary modules reads `self.inv_freq` and moves it to the input's device, so a
    plain attribute serves it like the buffer did (the buffer is non-persistent: checkpoints do not change).
    """
    modules = rotary_modules(model)
    for module in modules:
        old = module.inv_freq
        inv_freq, scaling = fp32_inv_freq(module)
        inv_freq = inv_freq.to(old.device)
        module._buffers.pop("inv_freq", None)
        module.inv_freq = inv_freq
        module.original_inv_freq = inv_freq
        module.attention_scaling = scaling
        setattr(module, PINNED, True)
    return len(modules)
