"""A tiny Llama in vLLM's parameter layout (one tensor-parallel rank per instance), for LoRA sync tests.

``VllmLayoutLlama`` mirrors vLLM's Llama loaders: ``stacked_params_mapping`` into fused ``qkv_proj`` /
``gate_up_proj``, ``QKVParallelLinear`` narrowing (k/v shard = tp_rank // kv_replicas),
``MergedColumnParallelLinear`` and ``RowParallelLinear`` (input dim), unknown names silently skipped,
``load_weights`` returning the loaded parameter names. ``tp_logits`` runs a forward over all ranks.
"""

from __future__ import annotations

import torch
from torch import nn


def param_holder(**tensors: torch.Tensor) -> nn.Module:
    """A module holding the given tensors as frozen parameters."""
    m = nn.Module()
    for k, t in tensors.items():
        m.register_parameter(k, nn.Parameter(t, requires_grad=False))
    return m


class VllmLayoutLlama(nn.Module):
    """One tensor-parallel rank of a Llama in vLLM's parameter layout (fused qkv/gate_up, TP-narrowed)."""

    def __init__(self, cfg, tp_rank: int, tp_size: int, dtype: torch.dtype):
        super().__init__()
        h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
        self.cfg, self.tp_rank, self.tp_size = cfg, tp_rank, tp_size
        self.hd = cfg.head_dim
        nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.nh = nh // tp_size
        self.kv_replicas = max(1, tp_size // nkv)  # vLLM replicates kv heads when nkv < tp
        self.nkv = max(1, nkv // tp_size)
        self.inter = i // tp_size

        def z(*s):
            return torch.zeros(*s, dtype=dtype)

        self.model = nn.Module()
        self.model.embed_tokens = param_holder(weight=z(v, h))
        self.model.layers = nn.ModuleList()
        for _ in range(cfg.num_hidden_layers):
            layer = nn.Module()
            layer.input_layernorm = param_holder(weight=z(h))
            layer.post_attention_layernorm = param_holder(weight=z(h))
            layer.self_attn = nn.Module()
            layer.self_attn.qkv_proj = param_holder(weight=z((self.nh + 2 * self.nkv) * self.hd, h))
            layer.self_attn.o_proj = param_holder(weight=z(h, self.nh * self.hd))
            layer.mlp = nn.Module()
            layer.mlp.gate_up_proj = param_holder(weight=z(2 * self.inter, h))
            layer.mlp.down_proj = param_holder(weight=z(h, self.inter))
            self.model.layers.append(layer)
        self.model.norm = param_holder(weight=z(h))
        self.lm_head = param_holder(weight=z(v, h))

    # -- vLLM-style loading --------------------------------------------------------------------------------
    def _qkv_loader(self, param, w, shard):
        q, kv = self.nh * self.hd, self.nkv * self.hd
        off, size, idx = {"q": (0, q, self.tp_rank),
                          "k": (q, kv, self.tp_rank // self.kv_replicas),
                          "v": (q + kv, kv, self.tp_rank // self.kv_replicas)}[shard]
        dst, src = param.data.narrow(0, off, size), w.narrow(0, idx * size, size)
        assert dst.shape == src.shape
        dst.copy_(src)

    def _merged_loader(self, param, w, shard):
        dst = param.data.narrow(0, shard * self.inter, self.inter)
        src = w.narrow(0, self.tp_rank * self.inter, self.inter)
        assert dst.shape == src.shape
        dst.copy_(src)

    def _row_loader(self, param, w):
        size = param.shape[1]
        src = w.narrow(1, self.tp_rank * size, size)
        assert param.data.shape == src.shape
        param.data.copy_(src)

    def load_weights(self, weights):
        stacked = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
                   (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            for pname, wname, shard in stacked:
                if wname not in name:
                    continue
                name = name.replace(wname, pname)
                if name in params:
                    (self._qkv_loader if shard in ("q", "k", "v") else self._merged_loader)(params[name], w, shard)
                    loaded.add(name)
                break
            else:
                if name not in params:
                    continue  # vLLM skips unknown names silently
                if name.endswith(("o_proj.weight", "down_proj.weight")):
                    self._row_loader(params[name], w)
                else:
                    assert params[name].shape == w.shape
                    params[name].data.copy_(w)
                loaded.add(name)
        return loaded


def _rms(x, w, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


def tp_logits(shards: list[VllmLayoutLlama], ids: torch.Tensor) -> torch.Tensor:
    """Forward through all TP ranks; partial o_proj/down_proj outputs are summed (vLLM's all-reduce)."""
    s0, cfg = shards[0], shards[0].cfg
    eps, hd = cfg.rms_norm_eps, s0.hd
    bsz, t = ids.shape
    x = s0.model.embed_tokens.weight[ids]
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    causal = torch.full((t, t), float("-inf")).triu(1)
    for li in range(cfg.num_hidden_layers):
        h = _rms(x, s0.model.layers[li].input_layernorm.weight, eps)
        attn = 0
        for s in shards:
            lay = s.model.layers[li]
            q, k, v = (h @ lay.self_attn.qkv_proj.weight.T).split([s.nh * hd, s.nkv * hd, s.nkv * hd], -1)
            q = _rope(q.view(bsz, t, s.nh, hd).transpose(1, 2), cos, sin)
            k = _rope(k.view(bsz, t, s.nkv, hd).transpose(1, 2), cos, sin)
            v = v.view(bsz, t, s.nkv, hd).transpose(1, 2)
            k, v = (z.repeat_interleave(s.nh // s.nkv, dim=1) for z in (k, v))
            scores = (q @ k.transpose(-1, -2)) * hd**-0.5 + causal
            o = (scores.float().softmax(-1).to(q.dtype) @ v).transpose(1, 2).reshape(bsz, t, s.nh * hd)
            attn = attn + o @ lay.self_attn.o_proj.weight.T
        x = x + attn
        h = _rms(x, s0.model.layers[li].post_attention_layernorm.weight, eps)
        mlp = 0
        for s in shards:
            lay = s.model.layers[li]
            g, u = (h @ lay.mlp.gate_up_proj.weight.T).split(s.inter, -1)
            mlp = mlp + (nn.functional.silu(g) * u) @ lay.mlp.down_proj.weight.T
        x = x + mlp
    return _rms(x, s0.model.norm.weight, eps) @ s0.lm_head.weight.T
