"""Hooks of `openrlhf/models/actor.py` (actor.patch): how `Actor` loads a pretrained model."""

from __future__ import annotations

from typing import Any

import torch

from rft.gptoss.attention import install_attention_path
from rft.gptoss.moe import route_experts_in_eval
from rft.gptoss.mxfp4 import is_mxfp4_checkpoint, load_dequantized
from rft.gptoss.rope import pin_rotary_fp32


def load_model(model_class: Any, pretrain: str, *, ds_config: dict | None, lora_seed: int | None,
               **from_pretrained: Any) -> torch.nn.Module:
    """`model_class.from_pretrained(pretrain, **from_pretrained)`, or an MXFP4 (gpt-oss) checkpoint dequantized by
    rft.gptoss.mxfp4.load_dequantized; then fp32 rotary frequencies, routed experts in eval forwards, rft's attention path,
    and the RNG seeded from `lora_seed` (the adapter's initial A) when given."""
    if is_mxfp4_checkpoint(pretrain):
        if from_pretrained.get("quantization_config") is not None:
            raise ValueError(f"{pretrain} is an MXFP4 checkpoint: it cannot be loaded with --load_in_4bit")
        # load_dequantized partitions the model itself and refuses a live HfDeepSpeedConfig (Actor's dschf)
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
        model = load_dequantized(
            pretrain,
            ds_config=ds_config,
            model_class=model_class,
            dtype=from_pretrained["torch_dtype"],
            attn_implementation=from_pretrained["attn_implementation"],
            device_map=from_pretrained.get("device_map"),
        )
    else:
        model = model_class.from_pretrained(pretrain, **from_pretrained)
    pin_rotary_fp32(model)  # as vLLM computes them, out of reach of zero.Init's bf16 arange (rft/gptoss/rope.py)
    route_experts_in_eval(model)  # reference / old log-probs take the training forward's expert loop (rft/gptoss/moe.py)
    install_attention_path(model)  # the fp32 router of --attn_implementation rft_* (rft/gptoss/attention.py)
    if lora_seed is not None:
        torch.manual_seed(lora_seed)
    return model
