"""rft/gptoss/rope.py: rotary frequencies stay fp32 through a real ZeRO-3 bf16 load (the patched Actor, zero.Init) and
DeepSpeed's engine cast, for a gpt-oss yarn config as the real checkpoints have, bf16 and MXFP4 alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rft.fixtures.mxfp4_fixtures import build_mxfp4_checkpoint, tiny_config, zero3_strategy
from rft.gptoss.rope import PINNED, fp32_inv_freq, pin_rotary_fp32, rotary_modules

# gpt-oss's own rope settings (config.json of openai/gpt-oss-20b and -120b).
YARN = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 4096}
POSITIONS = torch.arange(0, 4097, 64).unsqueeze(0)


def yarn_config():
    """The tiny gpt-oss config with gpt-oss's rope theta and yarn scaling."""
    cfg = tiny_config()
    cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings = 150000.0, dict(YARN), 131072
    return cfg


def reference_rotary(cfg):
    """A rotary module built plainly in fp32 (no zero.Init, no cast): what vLLM's frequencies equal."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    return GptOssRotaryEmbedding(cfg)


def cos_sin(rotary) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.zeros(1, POSITIONS.shape[1], 8, dtype=torch.float32)
    return rotary(x, POSITIONS)


def test_pin_survives_a_bf16_cast():
    """`module.bfloat16()` (what DeepSpeed's engine does) rounds the buffer; pinned frequencies stay exact."""
    from transformers import GptOssForCausalLM

    cfg = yarn_config()
    want = reference_rotary(cfg).inv_freq
    model = GptOssForCausalLM(cfg).bfloat16()
    assert not torch.equal(model.model.rotary_emb.inv_freq.float(), want)  # the cast this module exists for
    assert pin_rotary_fp32(model) == 1
    model.bfloat16()
    model.to(torch.bfloat16)
    rot = model.model.rotary_emb
    assert getattr(rot, PINNED) and rot.inv_freq.dtype == torch.float32 and torch.equal(rot.inv_freq, want)
    assert "inv_freq" not in dict(model.named_buffers(recurse=True)) and "inv_freq" not in str(model.state_dict().keys())
    for got, ref in zip(cos_sin(rot), cos_sin(reference_rotary(cfg)), strict=True):
        assert torch.equal(got, ref)


def test_a_model_without_rotary_is_left_alone():
    assert pin_rotary_fp32(torch.nn.Linear(2, 2)) == 0 and rotary_modules(torch.nn.Linear(2, 2)) == []


def test_recomputing_inside_zero_init_is_refused(dist_world):
    """Under zero.Init's bf16 tensor constructors the frequencies would be rounded again: an error, not a value."""
    import deepspeed

    rot = reference_rotary(yarn_config())
    with deepspeed.zero.Init(config_dict_or_path={"train_batch_size": 1, "bf16": {"enabled": True},
                                                  "zero_optimization": {"stage": 3}}):
        with pytest.raises(RuntimeError, match="outside zero.Init"):
            fp32_inv_freq(rot)


def checkpoint(kind: str, path: Path) -> Path:
    """A tiny gpt-oss checkpoint with yarn rope: a bf16 copy (what convert_mxfp4.py writes) or MXFP4."""
    from transformers import GptOssForCausalLM

    if kind == "bf16":
        GptOssForCausalLM(yarn_config()).to(torch.bfloat16).save_pretrained(path)
    else:
        build_mxfp4_checkpoint(path, tokenizer=False)
        config = json.loads((path / "config.json").read_text())
        config.update(rope_theta=150000.0, rope_scaling=dict(YARN), max_position_embeddings=131072)
        (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("kind", ["bf16", "mxfp4"])
def test_patched_actor_under_zero3_matches_fp32_rope(patched_openrlhf, dist_world, tmp_path, kind):
    """The real patched Actor (ZeRO-3, bf16) and DeepSpeed's engine: frequencies, cos and sin equal the fp32 init."""
    import deepspeed
    from openrlhf.models import Actor

    path = checkpoint(kind, tmp_path / kind)
    s = zero3_strategy()
    actor = Actor(str(path), attn_implementation="eager", param_dtype="bf16", lora_rank=4, lora_alpha=8,
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], ds_config=s.get_ds_train_config(True))
    engine, *_ = deepspeed.initialize(model=actor, config=s.get_ds_eval_config())
    (rot,) = rotary_modules(engine.module)
    ref = reference_rotary(yarn_config())
    assert rot.inv_freq.dtype == torch.float32
    assert torch.equal(rot.inv_freq, ref.inv_freq), (rot.inv_freq - ref.inv_freq).abs().max()
    assert rot.attention_scaling == ref.attention_scaling
    for got, want in zip(cos_sin(rot), cos_sin(ref), strict=True):
        assert torch.equal(got, want)
