"""The four measurements of `make gpu-check` (benchmarks/gpu_check.py), each on one device at given shapes.

- `mxfp4_dequant`: transformers' `convert_moe_packed_tensors` (rank 0's path on a CUDA node) and rft's exact
  `dequantize_expert` against values computed from the FP4 codes (rft.fixtures.mxfp4_fixtures).
- `actor_step`: one LoRA micro-step of GptOssForCausalLM (eager attention with sinks, gradient checkpointing,
  fp32 log-probs and an entropy graph as OpenRLHF keeps them); peak device memory and seconds.
- `moe_eval_gap`: log-probs of the same tokens in train mode (per-expert loop) and eval mode (on a GPU every
  expert for every token, `torch.bmm`), their gap, cost, and which path eval mode took.
- `merge_tp2`: rft's LoraMergeApplier on two tensor-parallel shards of gpt-oss attention in bf16 against the
  merged weights computed in float64.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from rft.gptoss.moe import route_experts_in_eval
from rft.plan.memory_plan import SHAPES, Shape

GIB = 1024**3
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class CheckShape:
    """The model width, sequence and LoRA shapes one configuration of the check runs at."""

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int
    experts_120b: int
    intermediate: int
    vocab: int
    top_k: int
    prompt_len: int
    gen_len: int
    micro_batch: int
    lora_rank: int
    lora_alpha: int
    depths: tuple[int, int]  # the layer counts measured; the slope between them extrapolates

    @property
    def tokens(self) -> int:
        return self.prompt_len + self.gen_len


def real_shape(micro_batch: int = 1, depths: tuple[int, int] = (2, 4)) -> CheckShape:
    """gpt-oss-20b's width (the memory plan's SHAPES) at the 20b recipe's 1024 + 4096 tokens, LoRA r32/alpha64."""
    s20, s120 = SHAPES["gpt-oss-20b"], SHAPES["gpt-oss-120b"]
    return CheckShape("gpt-oss (real width)", s20.hidden, s20.heads, s20.kv_dim // 64, 64, s20.experts,
                      s120.experts, s20.expert_dim, s20.vocab, 4, 1024, 4096, micro_batch, 32, 64, depths)


def tiny_shape() -> CheckShape:
    """The CPU configuration: rft.fixtures.mxfp4_fixtures' tiny gpt-oss, 16 + 48 tokens."""
    return CheckShape("tiny (CPU)", 64, 4, 2, 16, 4, 8, 64, 200, 2, 16, 48, 2, 4, 8, (1, 2))


def gpt_oss_config(shape: CheckShape, layers: int, experts: int | None = None):
    """A GptOssConfig of `layers` layers at `shape` (alternating sliding / full attention as gpt-oss ships)."""
    from transformers import GptOssConfig

    types = ["sliding_attention", "full_attention"] * ((layers + 1) // 2)
    if shape.hidden == tiny_shape().hidden:
        from rft.fixtures.mxfp4_fixtures import tiny_config

        cfg = tiny_config(min(layers, 2))
        cfg.num_hidden_layers, cfg.layer_types = layers, types[:layers]
        cfg.num_local_experts = experts or shape.experts
        cfg.max_position_embeddings = max(cfg.max_position_embeddings, shape.tokens)
    else:
        cfg = GptOssConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                           num_hidden_layers=layers, num_attention_heads=shape.heads,
                           num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
                           num_local_experts=experts or shape.experts, num_experts_per_tok=shape.top_k,
                           layer_types=types[:layers], tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    cfg.use_cache = False
    return cfg


def build_model(shape: CheckShape, layers: int, device: torch.device, experts: int | None = None):
    """A random-weight bf16 GptOssForCausalLM built directly on `device`, eager attention (with sinks)."""
    from transformers import GptOssForCausalLM

    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16: no float32 copy of the experts at real width
    try:
        with torch.device(device):
            model = GptOssForCausalLM(gpt_oss_config(shape, layers, experts))
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():  # non-zero sinks, as a trained checkpoint has them
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.normal_(0.0, 0.5)
    return model


# ---------------------------------------------------------------- device timing and memory


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> tuple[object, float]:
    """(fn(), seconds) with the device synchronized on both sides."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


class PeakMemory:
    """Peak allocated device memory (GiB) over a block; None on CPU (no allocator statistics there)."""

    def __init__(self, device: torch.device):
        self.device, self.peak_gib, self.start_gib = device, None, None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start_gib = torch.cuda.memory_allocated(self.device) / GIB
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            sync(self.device)
            self.peak_gib = torch.cuda.max_memory_allocated(self.device) / GIB


def free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- (1) MXFP4 dequantization


def mxfp4_dequant(shape: CheckShape, device: torch.device, experts: int, seed: int = 0) -> list[dict]:
    """gate_up and down of one layer: transformers' dequantizer on `device` and rft's on CPU vs the exact values."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    from rft.fixtures.mxfp4_fixtures import quantize_codes
    from rft.gptoss.mxfp4 import dequantize_expert

    g = torch.Generator().manual_seed(seed)
    rows_cols = {"gate_up_proj": (2 * shape.intermediate, shape.hidden), "down_proj": (shape.hidden, shape.intermediate)}
    out = []
    for proj, (rows, cols) in rows_cols.items():
        codes = torch.randint(0, 16, (experts, rows, cols), generator=g)
        exps = torch.randint(-10, 4, (experts, rows, cols // 32), generator=g)  # gpt-oss scales sit near 127
        blocks, scales, exact = quantize_codes(codes, exps)
        del codes, exps
        hf, hf_s = timed(lambda b=blocks, s=scales: convert_moe_packed_tensors(b.to(device), s.to(device)), device)
        rft_t, rft_s = timed(lambda b=blocks, s=scales: dequantize_expert(b, s), torch.device("cpu"))
        exact_bf16 = exact.to(torch.bfloat16)
        hf_cpu = hf.cpu()
        out.append({
            "tensor": f"{proj} [{experts}, {cols}, {rows}]",
            "elements": exact.numel(),
            "exact_in_bf16": bool(torch.equal(exact_bf16.float(), exact)),
            "transformers_device": hf.device.type,
            "transformers_mismatches": int((hf_cpu != exact_bf16).sum()),
            "transformers_max_abs_err": float((hf_cpu.float() - exact).abs().max()),
            "transformers_s": hf_s,
            "rft_mismatches": int((rft_t != exact_bf16).sum()),
            "rft_max_abs_err": float((rft_t.float() - exact).abs().max()),
            "rft_cpu_s": rft_s,
            "transformers_vs_rft_equal": bool(torch.equal(hf_cpu, rft_t)),
        })
        del hf, hf_cpu, rft_t, exact, exact_bf16, blocks, scales
        free(device)
    return out


def mxfp4_load_path(layers: int = 2) -> dict:
    """rank 0's load as `rft.gptoss.mxfp4.load_dequantized` runs it (from_pretrained, Mxfp4Config(dequantize=True),
    device_map="cpu") on a tiny MXFP4 checkpoint; transformers dequantizes on the GPU when one is visible."""
    import tempfile
    from pathlib import Path

    from rft.fixtures.mxfp4_fixtures import build_mxfp4_checkpoint
    from rft.gptoss.mxfp4 import load_dequantized

    with tempfile.TemporaryDirectory() as tmp:
        expected = build_mxfp4_checkpoint(Path(tmp) / "ckpt", layers=layers, tokenizer=False)
        with CountCalls(torch.ldexp) as counter:  # transformers' convert_moe_packed_tensors scales with ldexp
            model, s = timed(lambda: load_dequantized(str(Path(tmp) / "ckpt"), ds_config=None, device_map="cpu"),
                             torch.device("cpu"))
    got = dict(model.named_parameters())
    experts = [n for n in expected if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]
    wrong = [n for n in expected if n in got and not torch.equal(got[n].detach().cpu(), expected[n])]
    return {"tensors": len(expected), "expert_tensors": len(experts), "missing": sorted(set(expected) - set(got)),
            "mismatched": wrong, "seconds": s, "ldexp_calls": counter.calls,
            "dequantized_on": sorted(counter.devices)}


# ---------------------------------------------------------------- (2) the LoRA actor's micro-step


def micro_step_loss(model, ids: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """OpenRLHF's actor loss shape: fp32 log-probs of the response tokens, a policy-gradient term, and the entropy
    graph `return_entropy=True` keeps even at `--entropy_loss_coef 0`."""
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, prompt_len - 1 : -1].float()
    targets = ids[:, prompt_len:]
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return -(logp * torch.sign(torch.randn_like(logp))).mean() + 0.0 * entropy.mean()


def lora_model(shape: CheckShape, layers: int, device: torch.device):
    """The recipe's actor: LoRA on q/k/v/o, non-reentrant gradient checkpointing, train mode."""
    from peft import LoraConfig, get_peft_model

    model = build_model(shape, layers, device)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    cfg = LoraConfig(r=shape.lora_rank, lora_alpha=shape.lora_alpha, target_modules=list(LORA_TARGETS),
                     lora_dropout=0.0, bias="none")
    peft_model = get_peft_model(model, cfg)
    peft_model.train()
    return peft_model


def actor_step(shape: CheckShape, layers: int, device: torch.device, steps: int = 2) -> dict:
    """Peak memory and seconds of `steps` micro-steps (after one warm-up step that allocates Adam's states).
    The model is freed when this returns: call free(device) after it."""
    model = lora_model(shape, layers, device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    g = torch.Generator().manual_seed(layers)
    ids = torch.randint(0, shape.vocab, (shape.micro_batch, shape.tokens), generator=g).to(device)

    def step() -> float:
        loss = micro_step_loss(model, ids, shape.prompt_len)
        loss.backward()
        return float(loss.detach())

    _, warm_s = timed(step, device)
    _, opt_s = timed(opt.step, device)
    opt.zero_grad(set_to_none=True)
    times = []
    with PeakMemory(device) as mem:
        for _ in range(steps):
            loss, s = timed(step, device)
            times.append(s)
            opt.zero_grad(set_to_none=True)
    row = {
        "layers": layers,
        "micro_batch": shape.micro_batch,
        "tokens": shape.tokens,
        "lora_params": sum(p.numel() for p in params),
        "frozen_params": sum(p.numel() for p in model.parameters() if not p.requires_grad),
        "warmup_s": warm_s,
        "optimizer_step_s": opt_s,
        "step_s": min(times),
        "tokens_per_s": shape.micro_batch * shape.tokens / min(times),
        "loss_finite": bool(torch.isfinite(torch.tensor(loss))),
        "static_gib": mem.start_gib,
        "peak_gib": mem.peak_gib,
        "activation_gib": None if mem.peak_gib is None else mem.peak_gib - mem.start_gib,
    }
    return row


def extrapolate(rows: list[dict], key: str, layers: int) -> float | None:
    """Linear in depth through the two deepest measured rows: value(d2) + slope x (layers - d2)."""
    pts = sorted((r["layers"], r[key]) for r in rows if r.get(key) is not None)
    if len(pts) < 2:
        return None
    (d1, v1), (d2, v2) = pts[-2], pts[-1]
    return v2 + (v2 - v1) / (d2 - d1) * (layers - d2)


def plan_figures(shape: CheckShape, model: str) -> dict:
    """The memory plan's per-GPU actor lines for `model`'s recipe at the measured tokens and micro batch."""
    from rft.plan.memory_plan import activation_lines, actor_plan, on_gpu, recipe_flags

    argv = ["--pretrain", f"openai/{model}", *RECIPES[model], "--prompt_max_len", str(shape.prompt_len),
            "--generate_max_len", str(shape.gen_len), "--micro_train_batch_size", str(shape.micro_batch),
            "--gradient_checkpointing"]
    flags = recipe_flags(argv)
    activations = sum(line.gib for line in activation_lines(SHAPES[model], flags))
    return {"model": model, "activations_gib": activations, "per_gpu_total_gib": on_gpu(actor_plan(SHAPES[model], flags)),
            "argv": argv}


# The recipes' flags the actor's plan reads (train_grpo_20b.sh; train_grpo_120b.sh on one node, offload on).
RECIPES = {
    "gpt-oss-20b": ["--actor_num_gpus_per_node", "4", "--zero_stage", "3", "--lora_rank", "32", "--init_kl_coef",
                    "0.001", "--entropy_loss_coef", "0", "--colocate_actor_ref"],
    "gpt-oss-120b": ["--actor_num_gpus_per_node", "8", "--zero_stage", "3", "--lora_rank", "64", "--init_kl_coef", "0",
                     "--offload", "--adam_offload"],
}


# ---------------------------------------------------------------- (3) eval-mode MoE


class CountCalls(torch.overrides.TorchFunctionMode):
    """Counts calls of one torch function and the device types of their first argument."""

    def __init__(self, target):
        super().__init__()
        self.target, self.calls, self.devices = target, 0, set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is self.target:
            self.calls += 1
            if args and isinstance(args[0], torch.Tensor):
                self.devices.add(args[0].device.type)
        return func(*args, **(kwargs or {}))


def token_logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """fp32 log-probs of ids[:, 1:] under `model` (no grad)."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, :-1].float()
        return logits.log_softmax(-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def moe_eval_gap(shape: CheckShape, layers: int, experts: int, device: torch.device) -> dict:
    """Train-mode (per-expert loop) vs eval-mode forward of the same tokens, transformers' own and with rft.gptoss.moe's
    routed loop: seconds, peak memory, the path taken, log-prob gaps to the train-mode forward."""
    model = build_model(shape, layers, device, experts)
    ids = torch.randint(0, shape.vocab, (1, shape.tokens), generator=torch.Generator().manual_seed(1)).to(device)
    res = {"layers": layers, "experts": experts, "tokens": shape.tokens}
    for mode in ("train", "eval", "routed"):  # routed: eval mode with rft.gptoss.moe's routed loop (what rft's actor runs)
        if mode == "routed":
            route_experts_in_eval(model)
        model.train(mode == "train")
        token_logprobs(model, ids)  # warm-up
        with PeakMemory(device) as mem, CountCalls(torch.bmm) as counter:  # the dense path's only bmm
            lp, s = timed(lambda: token_logprobs(model, ids), device)
        res[f"{mode}_s"], res[f"{mode}_peak_gib"], res[f"{mode}_bmm_calls"] = s, mem.peak_gib, counter.calls
        res[f"{mode}_logprobs"] = lp.cpu()
    train_lp = res.pop("train_logprobs")
    gap = (train_lp - res.pop("eval_logprobs")).abs()
    routed_gap = (train_lp - res.pop("routed_logprobs")).abs()
    res.update(max_abs_gap=float(gap.max()), mean_abs_gap=float(gap.mean()),
               routed_max_abs_gap=float(routed_gap.max()),
               eval_dense_path=res["eval_bmm_calls"] > 0, train_dense_path=res["train_bmm_calls"] > 0,
               routed_dense_path=res["routed_bmm_calls"] > 0)
    return res


# ---------------------------------------------------------------- (4) the merge applier, TP 2


def _attention_weights(shape: CheckShape, layers: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    dims = {"q_proj": (q, shape.hidden), "k_proj": (kv, shape.hidden), "v_proj": (kv, shape.hidden),
            "o_proj": (shape.hidden, q)}
    return {f"model.layers.{i}.self_attn.{p}.weight": (torch.randn(*d, generator=g) * 0.02).to(torch.bfloat16)
            for i in range(layers) for p, d in dims.items()}


def _tp_shards(shape: CheckShape, layers: int, tp: int, weights: dict[str, torch.Tensor]) -> list:
    """vLLM-layout attention shards (fused qkv_proj, row-parallel o_proj) loaded from full HF weights."""
    from types import SimpleNamespace

    from rft.fixtures.vllm_layout import VllmLayoutLlama

    cfg = SimpleNamespace(hidden_size=shape.hidden, intermediate_size=2 * tp, vocab_size=8, head_dim=shape.head_dim,
                          num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                          num_hidden_layers=layers)
    shards = [VllmLayoutLlama(cfg, r, tp, torch.bfloat16) for r in range(tp)]
    for s in shards:
        s.load_weights(list(weights.items()))
    return shards


def _payload(shape: CheckShape, weights: dict[str, torch.Tensor], g: torch.Generator, zero_b: bool, version: int):
    from rft.train.lora_payload import build_payload

    named = {}
    for name, w in weights.items():
        module = "base_model.model." + name.removesuffix(".weight")
        named[f"{module}.lora_A.default.weight"] = (torch.randn(shape.lora_rank, w.shape[1], generator=g) * 0.02)
        b = torch.randn(w.shape[0], shape.lora_rank, generator=g) * 0.02
        named[f"{module}.lora_B.default.weight"] = b * 0 if zero_b else b
    named = {k: v.to(torch.bfloat16) for k, v in named.items()}
    return build_payload(named, {"r": shape.lora_rank, "lora_alpha": shape.lora_alpha}, version=version), named


def _merged_reference(weights, named, scaling: float) -> dict[str, torch.Tensor]:
    """round_bf16(W0 + scaling * B @ A), the product in float64."""
    out = {}
    for name, w in weights.items():
        module = "base_model.model." + name.removesuffix(".weight")
        a = named[f"{module}.lora_A.default.weight"].double()
        b = named[f"{module}.lora_B.default.weight"].double()
        out[name] = (w.double() + scaling * (b @ a)).to(torch.bfloat16)
    return out


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """The spacing of bf16 numbers at each |x| (8 significant bits; the smallest normal's spacing at 0)."""
    exp = torch.frexp(x.float().abs().clamp_min(torch.finfo(torch.bfloat16).tiny)).exponent
    return torch.ldexp(torch.ones_like(x, dtype=torch.float32), exp - 8)


def merge_tp2(shape: CheckShape, layers: int, device: torch.device, tp: int = 2) -> dict:
    """Two successive syncs then B = 0 through one LoraMergeApplier per TP rank; rank 0 keeps W0 on the device,
    rank 1 on the host (snapshot_device="cpu"); payloads arrive on the host, as after the object store."""
    from rft.train.lora_merge import LoraMergeApplier

    g = torch.Generator().manual_seed(7)
    weights = _attention_weights(shape, layers, g)
    base = [dict(s.named_parameters()) for s in _tp_shards(shape, layers, tp, weights)]  # W0 per shard, host
    shards = [s.to(device) for s in _tp_shards(shape, layers, tp, weights)]
    appliers = [LoraMergeApplier(s, tp_size=tp, snapshot_device="cpu" if r else None) for r, s in enumerate(shards)]
    scaling = shape.lora_alpha / shape.lora_rank
    res = {"layers": layers, "tp": tp, "device": device.type, "scaling": scaling,
           "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "syncs": []}
    for version, zero_b in ((0, False), (1, False), (2, True)):
        payload, named = _payload(shape, weights, g, zero_b, version)
        reports, s = timed(lambda p=payload: [a.apply(p) for a in appliers], device)
        expect = _tp_shards(shape, layers, tp, _merged_reference(weights, named, scaling))
        err, ulps, mismatched, total = 0.0, 0.0, 0, 0
        for got, ref, w0 in zip(shards, expect, base, strict=True):
            ref_params = dict(ref.named_parameters())
            for pname, p in got.named_parameters():
                if ".self_attn." not in pname:
                    continue
                r = ref_params[pname].float()
                d = (p.detach().cpu().float() - r).abs()
                err, mismatched, total = max(err, float(d.max())), mismatched + int((d > 0).sum()), total + d.numel()
                # in steps of the larger of |W0| and |W|: where W0 + ΔW cancels, fp32's own error is such a step's
                ulps = max(ulps, float((d / bf16_ulp(torch.maximum(r.abs(), w0[pname].float().abs()))).max()))
        max_delta = max(r["max_abs_delta"] for r in reports)
        res["syncs"].append({"version": version, "b_zero": zero_b, "seconds": s, "max_abs_err": err,
                             "max_ulps": ulps, "mismatched": mismatched, "elements": total, "max_abs_delta": max_delta,
                             "modules": sum(r["modules"] for r in reports)})
    res["shard_shapes"] = {n: list(p.shape) for n, p in shards[0].named_parameters() if ".layers.0.self_attn." in n}
    return res


def shape_dict(shape: CheckShape) -> dict:
    return asdict(shape) | {"tokens": shape.tokens}


__all__ = ["CheckShape", "Shape", "RECIPES", "actor_step", "extrapolate", "merge_tp2", "moe_eval_gap",
           "mxfp4_dequant", "plan_figures", "real_shape", "shape_dict", "tiny_shape"]
