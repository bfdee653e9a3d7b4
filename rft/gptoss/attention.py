"""The trainer's gpt-oss attention paths, chosen with OpenRLHF's own `--attn_implementation` (docs/attention.md).

- `eager`: transformers 4.57.6's `eager_attention_forward`: QK^T, the sink logits and the softmax in the model's
  dtype (bf16), the router's top-k softmax on bf16 logits.
- `rft_eager_fp32`: the same arithmetic with QK^T accumulated into fp32 scores, the softmax over scores and sinks
  in fp32 and the probabilities cast back for the PV product (what a fused kernel does); router in fp32.
- `rft_flex`: torch's `flex_attention` (compiled on a GPU, no T x T tensor) with the sinks folded in from its fp32
  log-sum-exp (transformers' `flex_attention` rounds that to bf16 first, and refuses sinks on CPU); router in fp32.

Importing this module registers the rft names with transformers' `AttentionInterface` and `AttentionMaskInterface`,
so `from_pretrained(attn_implementation="rft_eager_fp32")` accepts them; `install_attention_path(model)` then gives
the model's routers the fp32 softmax its path names (the actor and the reference: actor.patch).
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask, flex_attention_mask

EAGER_FP32 = "rft_eager_fp32"
FLEX = "rft_flex"
PATHS = ("eager", EAGER_FP32, FLEX)
"""The `--attn_implementation` values a gpt-oss recipe may train with."""
FP32_ROUTER = "_rft_router_fp32"
"""Attribute marking a router whose logits, top-k and softmax run in fp32."""


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(b, kv_heads, t, d) -> (b, kv_heads * n_rep, t, d), heads of a group adjacent (transformers' repeat_kv)."""
    if n_rep == 1:
        return x
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def eager_fp32_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                         s_aux: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """gpt-oss eager attention with fp32 scores, sinks and softmax; probabilities cast to the value dtype for PV."""
    n_rep = query.shape[1] // key.shape[1]
    k = _repeat_kv(key, n_rep)
    v = _repeat_kv(value, n_rep)
    scores = torch.matmul(query.float(), k.float().transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : k.shape[-2]].float()
    sinks = s_aux if s_aux is not None else module.sinks
    sinks = sinks.float().reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], 1)
    probs = F.softmax(torch.cat([scores, sinks], dim=-1), dim=-1)
    weights = probs[..., :-1].to(value.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights, v)
    return out.transpose(1, 2).contiguous(), weights


def _flex(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, block_mask, scale: float,
          training: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's flex_attention returning (output, fp32 log-sum-exp): compiled on a GPU; on CPU the unfused reference
    (inductor's CPU flex supports neither the LSE nor a backward)."""
    from torch.nn.attention.flex_attention import flex_attention

    kw = dict(block_mask=block_mask, scale=scale, enable_gqa=query.shape[1] != key.shape[1], return_lse=True)
    if query.device.type == "cpu":
        return flex_attention(query, key, value, **kw)
    from transformers.integrations.flex_attention import compile_friendly_flex_attention

    return compile_friendly_flex_attention(query, key, value, training=training, **kw)


def flex_sink_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask, scaling: float, dropout: float = 0.0, s_aux: torch.Tensor | None = None,
                        **kwargs) -> tuple[torch.Tensor, None]:
    """flex attention over a BlockMask, the sinks added to its normalizer in fp32: out * exp(lse - logaddexp(lse, sink))."""
    if dropout > 0:
        raise ValueError(f"{FLEX} has no attention dropout (got {dropout})")
    if attention_mask is not None and not hasattr(attention_mask, "mask_mod"):
        raise ValueError(f"{FLEX} needs a flex BlockMask, got {type(attention_mask).__name__}")
    out, lse = _flex(query, key, value, attention_mask, scaling, module.training)
    sinks = s_aux if s_aux is not None else module.sinks
    lse = lse.float().unsqueeze(-1)
    renorm = torch.exp(lse - torch.logaddexp(lse, sinks.float().reshape(1, -1, 1, 1)))
    out = (out.float() * renorm).to(value.dtype)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(EAGER_FP32, eager_fp32_attention)
AttentionMaskInterface.register(EAGER_FP32, eager_mask)
AttentionInterface.register(FLEX, flex_sink_attention)
AttentionMaskInterface.register(FLEX, flex_attention_mask)


def router_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The gpt-oss routers of `model` (transformers' `GptOssTopKRouter`)."""
    return [m for m in model.modules() if type(m).__name__ == "GptOssTopKRouter"]


def _fp32_router_forward(self: torch.nn.Module, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GptOssTopKRouter.forward in fp32: logits of the upcast inputs, top-k and softmax; fp32 routing weights."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    logits = F.linear(hidden_states.float(), self.weight.float(), self.bias.float())
    top_value, indices = torch.topk(logits, self.top_k, dim=-1)
    top_value = F.softmax(top_value, dim=1)
    scores = torch.zeros_like(logits).scatter_(1, indices, top_value)
    return scores, indices


def fp32_routers(model: torch.nn.Module) -> int:
    """Give every gpt-oss router of `model` the fp32 forward; returns the count. The experts weight their bf16
    outputs by the fp32 scores and add them back in the hidden dtype."""
    modules = router_modules(model)
    for module in modules:
        module.forward = types.MethodType(_fp32_router_forward, module)
        setattr(module, FP32_ROUTER, True)
    return len(modules)


def install_attention_path(model: torch.nn.Module) -> str:
    """Complete the path `model` was loaded with (its config's attention implementation): the rft paths get the
    fp32 router; returns the path's name. Refuses an rft name on a model with no gpt-oss router."""
    path = str(getattr(model.config, "_attn_implementation", None) or "eager")
    if path in (EAGER_FP32, FLEX):
        if not fp32_routers(model):
            raise ValueError(f"--attn_implementation {path} is rft's gpt-oss path; {type(model).__name__} has no router")
    return path
