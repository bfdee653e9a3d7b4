"""A tiny gpt-oss checkpoint in the MXFP4 on-disk format, built in code for the tests.

The expert weights are drawn as random FP4 codes and power-of-two scales and packed the way transformers'
dequantizer reads them (`<proj>_blocks` [E, rows, cols/32, 16] uint8 with two codes per byte, low nibble first;
`<proj>_scales` [E, rows, cols/32] uint8 exponents with bias 127). The exact values are computed here from the
codes, independently of rft.mxfp4, and returned as the expected bf16 parameters ([E, cols, rows]).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

# FP4 e2m1: sign bit 3, exponent bits 1-2 (bias 1), mantissa bit 0; code 0b0001 is the subnormal 0.5.
E2M1 = [(-1.0 if c & 8 else 1.0) * ((c & 1) * 0.5 if (c >> 1) & 3 == 0 else (1 + (c & 1) / 2) * 2.0 ** (((c >> 1) & 3) - 1))
        for c in range(16)]
MODULES_NOT_CONVERTED = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]


def tiny_config(layers: int = 2):
    from transformers import GptOssConfig

    return GptOssConfig(vocab_size=200, hidden_size=64, intermediate_size=64, num_hidden_layers=layers,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                        num_experts_per_tok=2, layer_types=["sliding_attention", "full_attention"][:layers],
                        sliding_window=8, max_position_embeddings=128, rope_scaling=None, tie_word_embeddings=False)


def quantize_codes(codes: torch.Tensor, exps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """codes [E, R, C] in 0..15 and exponents [E, R, C/32] -> (blocks, scales, exact values [E, C, R] float32)."""
    e, r, c = codes.shape
    pairs = codes.reshape(e, r, c // 32, 16, 2).to(torch.uint8)
    blocks = pairs[..., 0] | (pairs[..., 1] << 4)
    scales = (exps + 127).to(torch.uint8)
    values = torch.tensor(E2M1)[codes.long()] * torch.pow(2.0, exps.float()).repeat_interleave(32, dim=-1)
    return blocks.contiguous(), scales.contiguous(), values.transpose(1, 2).contiguous()


def build_mxfp4_checkpoint(path: Path, *, layers: int = 2, seed: int = 0, split_shards: bool = True,
                           tokenizer: bool = True) -> dict[str, torch.Tensor]:
    """Write the checkpoint at `path`; returns the expected dequantized bf16 state dict."""
    from safetensors.torch import save_file
    from transformers import GenerationConfig, GptOssForCausalLM

    torch.manual_seed(seed)
    cfg = tiny_config(layers)
    model = GptOssForCausalLM(cfg).to(torch.bfloat16)
    expected = {k: v.detach().clone() for k, v in model.state_dict().items()}
    packed: dict[str, torch.Tensor] = {k: v.contiguous() for k, v in expected.items()}
    g = torch.Generator().manual_seed(seed + 1)
    for name in [k for k in expected if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        n_exp, cols, rows = expected[name].shape  # parameter [E, in, out]; stored transposed as [E, out, in]
        codes = torch.randint(0, 16, (n_exp, rows, cols), generator=g)
        exps = torch.randint(-6, 3, (n_exp, rows, cols // 32), generator=g)
        blocks, scales, values = quantize_codes(codes, exps)
        del packed[name]
        packed[name + "_blocks"], packed[name + "_scales"] = blocks, scales
        expected[name] = values.to(torch.bfloat16)
        assert torch.equal(expected[name].float(), values)  # the fixture itself is exact in bf16
    path.mkdir(parents=True, exist_ok=True)
    keys = sorted(packed)
    groups = [keys[::2], keys[1::2]] if split_shards else [keys]  # blocks and their scales in different files
    weight_map = {}
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" if split_shards else "model.safetensors"
        save_file({k: packed[k] for k in group}, str(path / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, fname))
    if split_shards:
        (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = cfg.to_dict()
    config.update(architectures=["GptOssForCausalLM"], torch_dtype="bfloat16",
                  quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": MODULES_NOT_CONVERTED})
    (path / "config.json").write_text(json.dumps(config, indent=2))
    GenerationConfig(eos_token_id=[1, 2], do_sample=True, temperature=1.0).save_pretrained(path)
    if tokenizer:
        from rft.fixtures.tiny_model import build_tokenizer

        build_tokenizer().save_pretrained(path)
    return expected
