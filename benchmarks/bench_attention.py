"""The trainer's gpt-oss attention paths against an fp32 reference at gpt-oss-20b's layer shapes and 512-4,608 tokens.

Two gpt-oss-20b decoder layers (hidden 2880, 64 q / 8 kv heads x 64, sinks, yarn RoPE as the config ships, a
sliding-window-128 layer then a full one, a 32-expert top-4 router), then the final norm and a random lm_head at a
reduced vocab. The same bf16-representable weights run in fp32 (the reference) and in bf16 through each path:

- `eager`: transformers 4.57.6's `eager_attention_forward` (bf16 QK^T, sinks and softmax), its bf16 router;
- `eager_fp32`: `rft.gptoss.attention.eager_fp32_attention` and the fp32 router (`--attn_implementation rft_eager_fp32`);
- `flex_hf`: torch's flex_attention with transformers' sink renormalization as its integration runs it on a GPU
  (the log-sum-exp cast to bf16 first; on CPU transformers refuses sinks), bf16 router;
- `flex_rft`: the same flex output, the sinks folded in from the fp32 log-sum-exp, fp32 router (`rft_flex`).

Per token: |log p_path(y) - log p_ref(y)| for y drawn from the reference's distribution (a rollout's tokens), and
whether the token's top-4 expert set in either layer differs from the reference's. Attention is computed one kv
group (8 q heads) at a time to bound memory; rows are independent, so the arithmetic is the full layer's.

`python benchmarks/bench_attention.py --out runs/bench-attention` (~6 min on 2 cores; --lengths 512 for a quick look).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # rft from this checkout

from rft.gptoss.attention import _fp32_router_forward, eager_fp32_attention  # noqa: E402

PATHS = ("eager", "eager_fp32", "flex_hf", "flex_rft")
FP32_ROUTER = {"eager": False, "eager_fp32": True, "flex_hf": False, "flex_rft": True}


@dataclass
class Shape:
    """The benchmark's layer shapes (gpt-oss-20b's except where the flags reduce them)."""

    hidden: int = 2880
    heads: int = 64
    kv_heads: int = 8
    head_dim: int = 64
    experts: int = 32
    top_k: int = 4
    intermediate: int = 720
    window: int = 128
    vocab: int = 8192


def build(shape: Shape, peak: float, head_scale: float, seed: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(fp32 model, bf16 model) with the same bf16-representable weights: 2 GptOss layers at init scale, q and k
    projections scaled by sqrt(`peak`) each (attention logits x `peak`), sinks drawn N(0, 1), lm_head x `head_scale`."""
    from transformers import GptOssConfig, GptOssForCausalLM

    cfg = GptOssConfig(hidden_size=shape.hidden, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                       head_dim=shape.head_dim, num_local_experts=shape.experts, num_experts_per_tok=shape.top_k,
                       intermediate_size=shape.intermediate, num_hidden_layers=2, sliding_window=shape.window,
                       layer_types=["sliding_attention", "full_attention"], vocab_size=shape.vocab,
                       tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = GptOssForCausalLM(cfg)  # transformers' _init_weights: N(0, initializer_range) everywhere it matters
    with torch.no_grad():
        for layer in model.model.layers:
            att = layer.self_attn
            for p in (att.q_proj.weight, att.k_proj.weight):
                p.mul_(math.sqrt(peak))
            att.sinks.normal_(0.0, 1.0)
        model.lm_head.weight.mul_(head_scale)
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    model.eval()
    bf = GptOssForCausalLM(cfg).eval()
    bf.load_state_dict(model.state_dict())
    return model, bf.to(torch.bfloat16)


class _Heads(torch.nn.Module):
    """What the attention functions read from their module: one kv group's sinks and the GQA factor."""

    def __init__(self, sinks: torch.Tensor, groups: int) -> None:
        super().__init__()
        self.sinks = sinks
        self.num_key_value_groups = groups
        self.training = False


def additive_mask(t: int, window: int | None, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, t, t) causal (and sliding-window) mask as transformers' eager_mask builds it: 0 or dtype's min."""
    q = torch.arange(t)[:, None]
    k = torch.arange(t)[None, :]
    ok = k <= q
    if window is not None:
        ok &= q - k < window
    return torch.zeros(t, t, dtype=dtype).masked_fill(~ok, torch.finfo(dtype).min)[None, None]


def block_mask(t: int, window: int | None):
    """The flex BlockMask of the same causal (sliding) pattern."""
    from torch.nn.attention.flex_attention import create_block_mask

    def causal(b, h, q, k):
        return (k <= q) & ((q - k < window) if window is not None else (q >= 0))

    return create_block_mask(causal, None, None, t, t, device="cpu")


def attend(path: str, att: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           masks: dict) -> torch.Tensor:
    """(1, t, heads * head_dim) attention output of `path`, one kv group at a time."""
    from torch.nn.attention.flex_attention import flex_attention
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    groups = q.shape[1] // k.shape[1]
    outs = []
    for g in range(k.shape[1]):
        qs, ks, vs = q[:, g * groups:(g + 1) * groups], k[:, g:g + 1], v[:, g:g + 1]
        sinks = att.sinks[g * groups:(g + 1) * groups]
        mod = _Heads(sinks, groups)
        if path in ("ref", "eager"):
            out, _ = eager_attention_forward(mod, qs, ks, vs, masks["add"], att.scaling)
        elif path == "eager_fp32":
            out, _ = eager_fp32_attention(mod, qs, ks, vs, masks["add"], att.scaling, s_aux=sinks)
        else:
            out, lse = flex_attention(qs, ks, vs, block_mask=masks["block"], scale=att.scaling, enable_gqa=True,
                                      return_lse=True)
            s = sinks.reshape(1, -1, 1, 1)
            if path == "flex_hf":  # transformers/integrations/flex_attention.py as on a GPU: lse in the value dtype
                lse = lse.to(vs.dtype).unsqueeze(-1)
                combined = torch.logsumexp(torch.cat([lse, s.to(vs.dtype).expand_as(lse)], dim=-1), -1, keepdim=True)
                out = out * torch.exp(lse - combined)
            else:
                lse = lse.float().unsqueeze(-1)
                out = (out.float() * torch.exp(lse - torch.logaddexp(lse, s.float()))).to(vs.dtype)
            out = out.transpose(1, 2)
        outs.append(out)
    return torch.cat(outs, dim=2).reshape(q.shape[0], q.shape[2], -1)


def forward(model: torch.nn.Module, ids: torch.Tensor, path: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(log-probs (t, vocab) in fp32, each layer's top-k expert indices (t, k)) of one sequence through `path`."""
    from transformers.models.gpt_oss.modeling_gpt_oss import apply_rotary_pos_emb

    t = ids.shape[1]
    dtype = model.dtype
    h = model.model.embed_tokens(ids)
    rot = model.model.rotary_emb
    from rft.gptoss.rope import fp32_inv_freq

    inv_freq, scaling = fp32_inv_freq(rot)  # pinned fp32 frequencies (rft.gptoss.rope); cos/sin then cast as transformers
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq[None]
    cos, sin = (freqs.cos() * scaling).to(dtype)[None], (freqs.sin() * scaling).to(dtype)[None]
    experts = []
    for layer in model.model.layers:
        att = layer.self_attn
        window = att.sliding_window
        masks = {"add": additive_mask(t, window, dtype)} if not path.startswith("flex") else {"block": block_mask(t, window)}
        x = layer.input_layernorm(h)
        shp = (1, t, -1, att.head_dim)
        q = att.q_proj(x).view(shp).transpose(1, 2)
        k = att.k_proj(x).view(shp).transpose(1, 2)
        v = att.v_proj(x).view(shp).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        h = h + att.o_proj(attend(path, att, q, k, v, masks))
        x = layer.post_attention_layernorm(h)
        router = layer.mlp.router
        scores, idx = (_fp32_router_forward(router, x) if FP32_ROUTER.get(path, False) else router(x))
        experts.append(idx.sort(dim=-1).values)
        h = h + layer.mlp.experts(x, router_indices=idx, routing_weights=scores)
    logits = model.lm_head(model.model.norm(h))[0].float()
    return logits.log_softmax(-1), experts


def attention_stats(model: torch.nn.Module, ids: torch.Tensor) -> dict[str, float]:
    """The full layer's attention at the reference: logit std and the mean top-1 probability (sink included)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import apply_rotary_pos_emb

    t = ids.shape[1]
    layer = model.model.layers[1]
    att = layer.self_attn
    x = layer.input_layernorm(model.model.embed_tokens(ids))
    inv_freq, scaling = __import__("rft.gptoss.rope", fromlist=["fp32_inv_freq"]).fp32_inv_freq(model.model.rotary_emb)
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq[None]
    q = att.q_proj(x).view(1, t, -1, att.head_dim).transpose(1, 2)[:, :8]
    k = att.k_proj(x).view(1, t, -1, att.head_dim).transpose(1, 2)[:, :1]
    q, k = apply_rotary_pos_emb(q, k, (freqs.cos() * scaling)[None], (freqs.sin() * scaling)[None])
    logits = (q @ k.transpose(2, 3)) * att.scaling + additive_mask(t, None, torch.float32)
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    p = torch.cat([logits, att.sinks[:8].reshape(1, -1, 1, 1).expand(1, 8, t, 1)], -1).softmax(-1)
    return {"logit_std": float(logits[..., causal].std()), "top1_prob": float(p[..., -256:, :].amax(-1).mean())}


def attention_error(ref_model: torch.nn.Module, bf_model: torch.nn.Module, ids: torch.Tensor, path: str) -> dict:
    """Each layer's attention alone, fed the same (bf16-representable) normed embeddings: |out - out_ref| max and
    its RMS relative to the reference output's RMS (o_proj input), for the sliding and the full layer."""
    from transformers.models.gpt_oss.modeling_gpt_oss import apply_rotary_pos_emb

    from rft.gptoss.rope import fp32_inv_freq

    t = ids.shape[1]
    inv_freq, scaling = fp32_inv_freq(ref_model.model.rotary_emb)
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq[None]
    out = {}
    for i, name in ((0, "sliding"), (1, "full")):
        res = []
        for model, p in ((ref_model, "ref"), (bf_model, path)):
            dtype = model.dtype
            layer = model.model.layers[i]
            att = layer.self_attn
            x = layer.input_layernorm(ref_model.model.embed_tokens(ids).to(torch.bfloat16).to(dtype))
            cos, sin = (freqs.cos() * scaling).to(dtype)[None], (freqs.sin() * scaling).to(dtype)[None]
            shp = (1, t, -1, att.head_dim)
            q, k = apply_rotary_pos_emb(att.q_proj(x).view(shp).transpose(1, 2), att.k_proj(x).view(shp).transpose(1, 2),
                                        cos, sin)
            v = att.v_proj(x).view(shp).transpose(1, 2)
            masks = ({"block": block_mask(t, att.sliding_window)} if p.startswith("flex")
                     else {"add": additive_mask(t, att.sliding_window, dtype)})
            res.append(attend(p, att, q, k, v, masks).float())
        err = (res[1] - res[0])
        out[name] = {"max_abs": float(err.abs().max()), "rel_rms": float(err.pow(2).mean().sqrt() / res[0].pow(2).mean().sqrt())}
    return out


def measure(shape: Shape, peak: float, head_scale: float, t: int, seed: int, bar: tqdm) -> dict:
    """One (scale, length) cell: per-path log-prob gaps and expert-set disagreement against the fp32 reference."""
    ref_model, bf_model = build(shape, peak, head_scale, seed)
    g = torch.Generator().manual_seed(seed + t)
    ids = torch.randint(0, shape.vocab, (1, t), generator=g)
    with torch.no_grad():
        ref_lp, ref_experts = forward(ref_model, ids, "ref")
        bar.update(1)
        y = torch.multinomial(ref_lp.exp(), 1, generator=g)[:, 0]  # a rollout's tokens, drawn from the reference
        ref_y = ref_lp.gather(1, y[:, None])[:, 0]
        entropy = float(-(ref_lp.exp() * ref_lp).sum(-1).mean())
        stats = attention_stats(ref_model, ids)
        row = {"peak": peak, "tokens": t, "entropy": entropy, **stats, "paths": {}}
        for path in PATHS:
            lp, experts = forward(bf_model, ids, path)
            d = (lp.gather(1, y[:, None])[:, 0] - ref_y).abs()
            flipped = torch.zeros(t, dtype=torch.bool)
            for e, r in zip(experts, ref_experts, strict=True):
                flipped |= (e != r).any(-1)
            pos = torch.arange(t)
            row["paths"][path] = {
                "mean": float(d.mean()), "p99": float(d.quantile(0.99)), "max": float(d.max()),
                "mean_pos0_512": float(d[pos < 512].mean()),
                "mean_pos2048_": float(d[pos >= 2048].mean()) if t > 2048 else None,
                "expert_set_differs": float(flipped.float().mean()),
                "attention": attention_error(ref_model, bf_model, ids, path),
            }
            bar.update(1)
    del ref_model, bf_model
    return row


def table(rows: list[dict]) -> str:
    """The Markdown table of every cell and path."""
    out = ["| weights | tokens | path | mean abs dlogp | p99 | max | mean, pos >= 2048 | top-4 set differs | "
           "attn rel RMS err sliding / full | attn max err full |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        label = "init" if r["peak"] == 1 else f"peaked x{r['peak']:g}"
        for path, m in r["paths"].items():
            late = "" if m["mean_pos2048_"] is None else f"{m['mean_pos2048_']:.2e}"
            out.append(f"| {label} | {r['tokens']} | {path} | {m['mean']:.2e} | {m['p99']:.2e} | {m['max']:.2e} | "
                       f"{late} | {m['expert_set_differs']:.2%} | {m['attention']['sliding']['rel_rms']:.2e} / "
                       f"{m['attention']['full']['rel_rms']:.2e} | {m['attention']['full']['max_abs']:.2e} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4608], help="sequence lengths (tokens)")
    p.add_argument("--peaks", type=float, nargs="+", default=[1.0, 4.0],
                   help="attention logit scale (q and k x sqrt): 1 is the config's init, 4 a peaked, trained-like one")
    p.add_argument("--head-scale", type=float, default=4.0, help="lm_head weights x this (the init's entropy is ~8 nats)")
    p.add_argument("--experts", type=int, default=32, help="routed experts (gpt-oss-20b: 32)")
    p.add_argument("--intermediate", type=int, default=720, help="expert intermediate size (gpt-oss-20b: 2880)")
    p.add_argument("--vocab", type=int, default=8192, help="lm_head vocab (gpt-oss: 201,088)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("runs/bench-attention"), help="results.json and table.md here")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    shape = Shape(experts=a.experts, intermediate=a.intermediate, vocab=a.vocab)
    cells = [(pk, t) for pk in a.peaks for t in a.lengths]
    rows = []
    start = time.time()
    with tqdm(total=len(cells) * (1 + len(PATHS)), desc="forwards") as bar:
        for pk, t in cells:
            rows.append(measure(shape, pk, a.head_scale, t, a.seed, bar))
    md = table(rows)
    print(md)
    for r in rows:
        print(f"peak {r['peak']:g}, {r['tokens']} tokens: reference entropy {r['entropy']:.2f} nats, full-layer "
              f"logit std {r['logit_std']:.2f}, mean top-1 attention prob (last 256 queries) {r['top1_prob']:.3f}")
    a.out.mkdir(parents=True, exist_ok=True)
    meta = {"shape": shape.__dict__, "argv": sys.argv[1:], "seconds": time.time() - start, "torch": torch.__version__}
    (a.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (a.out / "table.md").write_text(md + "\n")
    print(f"{time.time() - start:.0f} s; wrote {a.out}/results.json and table.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
