"""Hooks of `openrlhf/utils/deepspeed/deepspeed.py` (deepspeed.patch): LoRA saves that hold the adapter only."""

from __future__ import annotations

import gc
import os
from typing import Any


def is_lora(args: Any) -> bool:
    """True for a LoRA run (--lora_rank > 0): the frozen base is no trainable state of a checkpoint."""
    return getattr(args, "lora_rank", 0) > 0


def save_adapter_only(strategy: Any, model: Any, tokenizer: Any, output_dir: str, **kwargs: Any) -> bool:
    """`DeepspeedStrategy.save_model` for a LoRA model under ZeRO-3: gathers only the adapter's parameters (0.9.3
    consolidates the full 16-bit model, frozen base included, into rank 0's RAM) and writes the adapter, its
    config, the model config and the tokenizer. False (nothing done) for every other save."""
    import torch
    from openrlhf.utils.deepspeed import deepspeed as strategy_module
    from peft import PeftModel, get_peft_model_state_dict

    from rft.train.checkpoints import gather_adapter_state, remove_full_weight_shards

    peft_model = strategy._unwrap_model(model)
    if not (is_lora(strategy.args) and strategy.stage == 3 and isinstance(peft_model, PeftModel)):
        return False
    if strategy.is_rank_0():
        os.makedirs(output_dir, exist_ok=True)
    state = gather_adapter_state(peft_model, strategy.is_rank_0())
    if strategy.is_rank_0():
        peft_model.save_pretrained(output_dir, **kwargs)
        torch.save(get_peft_model_state_dict(peft_model, state), os.path.join(output_dir, "adapter_model.bin"))
        safetensors = os.path.join(output_dir, "adapter_model.safetensors")
        if os.path.exists(safetensors):
            os.remove(safetensors)
        removed = remove_full_weight_shards(output_dir, strategy.args.lora_rank)  # a safety net, never the adapter
        if removed:
            strategy.print(f"[rft] removed full-weight files from LoRA save dir {output_dir}: {removed}")
        peft_model.config.to_json_file(os.path.join(output_dir, "config.json"))
        tokenizer.save_pretrained(output_dir)
    del state
    gc.collect()
    strategy_module.torch_dist_barrier_and_cuda_sync()  # the barrier save_model ends with
    return True
