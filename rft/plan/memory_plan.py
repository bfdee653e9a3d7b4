"""Per-GPU memory plan of a gpt-oss GRPO launch: the actor's GPUs (ZeRO-3, LoRA, Adam) and the vLLM engines' GPUs.

"exact" lines are arithmetic on the model's parameter counts (bytes per parameter x parameters / GPUs); estimate
lines model what depends on runtime behaviour (ZeRO-3's gather working set, activations under gradient
checkpointing with the trainer's `--attn_implementation` path, the CUDA context and allocator slack, vLLM's KV
cache); the activation coefficients are counted per op through the real code on CPU. Nothing here was measured on
a GPU; "size" is the published checkpoint's size.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3
H100_GIB = 79.6  # what an H100 80GB reports


@dataclass(frozen=True)
class Shape:
    """What the plan needs of a gpt-oss checkpoint (the published configs)."""

    name: str
    params: float  # all parameters
    layers: int
    hidden: int
    q_dim: int  # attention heads x head dim
    kv_dim: int  # kv heads x head dim
    experts: int
    expert_dim: int  # the experts' intermediate size
    vocab: int
    heads: int
    serve_gib: float  # the MXFP4 checkpoint vLLM loads (experts MXFP4, the rest bf16)
    top_k: int = 4  # experts each token is routed to (num_experts_per_tok)
    window: int = 128  # sliding window of every other layer (layer_types: sliding_attention, full_attention)

    @property
    def expert_params_per_layer(self) -> float:
        """gate_up (hidden x 2*dim) and down (dim x hidden) of every expert of one layer."""
        return self.experts * (self.hidden * 2 * self.expert_dim + self.expert_dim * self.hidden)

    def lora_params(self, rank: int, modules: tuple[str, ...] = ("q", "k", "v", "o")) -> float:
        """LoRA A and B on the attention projections: rank x (in + out) per module per layer."""
        dims = {
            "q": (self.hidden, self.q_dim),
            "k": (self.hidden, self.kv_dim),
            "v": (self.hidden, self.kv_dim),
            "o": (self.q_dim, self.hidden),
        }
        return self.layers * sum(rank * sum(dims[m]) for m in modules)

    @property
    def attention_params(self) -> float:
        """q/k/v/o weights of every layer (what merge-mode LoRA sync keeps a pristine copy of in vLLM)."""
        return self.layers * (2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim)

    @property
    def active_params(self) -> float:
        """The weights one token's forward multiplies by: attention, router and its top-k experts in every layer,
        and the LM head (3.6B at 20b, 5.1B at 120b: the published active counts)."""
        routed = self.top_k * self.expert_params_per_layer / self.experts
        return self.attention_params + self.layers * (self.hidden * self.experts + routed) + self.hidden * self.vocab


SHAPES = {
    "gpt-oss-120b": Shape("gpt-oss-120b", 116.83e9, 36, 2880, 4096, 512, 128, 2880, 201088, 64, 60.8),
    "gpt-oss-20b": Shape("gpt-oss-20b", 20.91e9, 24, 2880, 4096, 512, 32, 2880, 201088, 64, 12.8),
}


def shape_for(pretrain: str) -> Shape | None:
    """The shape of a gpt-oss checkpoint named by path or id (its config.json when it is on disk)."""
    cfg_path = Path(pretrain) / "config.json"
    if cfg_path.is_file():
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        experts = cfg.get("num_local_experts")
        for shape in SHAPES.values():
            if cfg.get("num_hidden_layers") == shape.layers and experts == shape.experts:
                return shape
        return None
    low = pretrain.lower()
    return next((s for key, s in SHAPES.items() if key in low), None)


def config_shape(pretrain: str) -> Shape | None:
    """The shape of any local decoder checkpoint from its config.json (a dense MLP counts as one expert, top-1);
    None when there is no config on disk. What a calibrated step-time model of another model runs on."""
    cfg_path = Path(pretrain) / "config.json"
    if not cfg_path.is_file():
        return None
    return shape_from_config(json.loads(cfg_path.read_text(encoding="utf-8")), pretrain)


def shape_from_config(cfg: dict, where: str) -> Shape:
    """A decoder config's shape (a dense MLP as one expert, top-1); `where` names it in the plan's lines."""
    hidden, layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    kv = cfg.get("num_key_value_heads") or heads
    experts, top_k = cfg.get("num_local_experts") or 1, cfg.get("num_experts_per_tok") or 1
    dim = cfg["intermediate_size"]
    q_dim, kv_dim = heads * head_dim, kv * head_dim
    params = (layers * (2 * hidden * q_dim + 2 * hidden * kv_dim + experts * 3 * hidden * dim + hidden * experts)
              + vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2))
    return Shape(f"{cfg.get('model_type', 'model')} ({layers} layers, {where})", params, layers, hidden, q_dim,
                 kv_dim, experts, dim, vocab, heads, 0.0, top_k, cfg.get("sliding_window") or 128)


@dataclass(frozen=True)
class Line:
    item: str
    gib: float
    kind: str  # "exact" or "estimate"
    where: str = "GPU"


class _Lenient(argparse.ArgumentParser):
    """A parser that raises instead of exiting: a bad flag is OpenRLHF's parser's to report, not the plan's."""

    def error(self, message: str):  # type: ignore[override]
        raise ValueError(message)


def recipe_flags(argv: list[str]) -> argparse.Namespace | None:
    """The flags the memory plan and the step-time model read, with OpenRLHF's defaults (None when one of them
    does not parse)."""
    p = _Lenient(add_help=False)
    p.add_argument("--pretrain")
    p.add_argument("--attn_implementation", default="flash_attention_2")
    p.add_argument("--actor_num_nodes", type=int, default=1)
    p.add_argument("--actor_num_gpus_per_node", type=int, default=8)
    p.add_argument("--vllm_num_engines", type=int, default=0)  # OpenRLHF's None: no engines
    p.add_argument("--vllm_tensor_parallel_size", type=int, default=1)
    p.add_argument("--vllm_gpu_memory_utilization", type=float, default=0.95)
    p.add_argument("--lora_rank", type=int, default=0)
    p.add_argument("--init_kl_coef", type=float, default=0.01)
    p.add_argument("--prompt_max_len", type=int, default=1024)
    p.add_argument("--generate_max_len", type=int, default=1024)
    p.add_argument("--micro_train_batch_size", type=int, default=4)
    p.add_argument("--entropy_loss_coef", type=float, default=None)
    p.add_argument("--zero_stage", type=int, default=2)
    p.add_argument("--rollout_batch_size", type=int, default=1024)
    p.add_argument("--n_samples_per_prompt", type=int, default=1)
    p.add_argument("--micro_rollout_batch_size", type=int, default=8)
    p.add_argument("--max_epochs", type=int, default=1)
    p.add_argument("--eval_dataset")
    p.add_argument("--eval_steps", type=int, default=-1)
    p.add_argument("--eval_n_samples_per_prompt", type=int, default=4)
    p.add_argument("--save_steps", type=int, default=-1)
    for flag in (
        "--offload",
        "--adam_offload",
        "--colocate_actor_ref",
        "--ref_from_actor",
        "--gradient_checkpointing",
        "--vllm_sync_lora_native",
        "--async_train",
    ):
        p.add_argument(flag, action="store_true")
    try:
        return p.parse_known_args(argv)[0]
    except ValueError:
        return None


# Peak live tensors of a training micro-batch, counted per op on CPU through the real code
# (tests/plan/test_memory_plan.py, with tests/support/peak_memory.py) and measured once with
# torch.cuda.max_memory_allocated on an H200 at the 20b recipe's 5120 tokens (docs/launching.md).
ATTN_PEAK = 4  # bf16 mb x heads x T x (T+1) tensors in one layer's eager-attention backward (transformers 4.57.6
# modeling_gpt_oss.py eager_attention_forward): the softmax output kept for the backward, the grad of its
# [..., :-1] slice padded back to T+1, softmax's input grad, and the grad of the (not detached) row max.
# H200: 4.04 at T=5120.
LOGITS_PEAK = 4  # fp32 mb x T x vocab tensors in the log-prob backward (OpenRLHF models/actor.py `.to(float32)`,
# models/utils.py log_probs_from_logits without flash-attn's kernel: gather + chunked logsumexp): the logits,
# the logsumexp grad, the gather's scattered grad and their sum. H200: 3.71.
OUTPUT_KEPT = 1  # fp32 mb x T x vocab: ppo_actor.py holds `output` (its fp32 logits) through strategy.backward
ENTROPY_KEPT = 0  # --entropy_loss_coef 0 still passes return_entropy=True (ppo_actor.py), but compute_entropy is
# @torch.compile'd (models/utils.py): its graph saves the logits (kept anyway) and three per-row values, not the
# softmax (eager would keep that: +1). H200: the same peak with and without it.


EAGER_FP32 = "rft_eager_fp32"  # rft.gptoss.attention's path names (that module imports torch; this one must not)
FLEX = "rft_flex"
EAGER_FP32_PEAK = 2 * ATTN_PEAK  # bf16 units of mb x heads x T x (T+1) in one layer's rft_eager_fp32 backward:
# eager's 4 tensors in fp32 (rft.gptoss.attention.eager_fp32_attention: fp32 scores, softmax and grads). Counted per op on
# CPU: 7.0 (3 kept by the forward: the fp32 probabilities and their bf16 cast for PV); one H100 measured the
# difference to eager as +12.58 GiB at 20b and 5,120 tokens (4.0 units; docs/gpu-check.md): the plan takes 8.


def attention_term(shape: Shape, mb: int, t: int, path: str) -> tuple[float, str]:
    """(bytes, description) of one layer's attention backward on the trainer's `--attn_implementation` path; a
    name other than rft's two is counted as eager."""
    txt = mb * shape.heads * t * (t + 1) * 2
    if path == EAGER_FP32:
        return EAGER_FP32_PEAK * txt, (f"one layer's {path} attention {ATTN_PEAK} x fp32 {mb} x {shape.heads} heads x "
                                       f"{t} x {t + 1}")
    if path == FLEX:
        lse = mb * shape.heads * t * 4
        return lse, f"one layer's {path} attention: no T x T tensor, fp32 LSE {mb} x {shape.heads} heads x {t}"
    name = "eager" if path == "eager" else f"{path} counted as eager"
    return ATTN_PEAK * txt, (f"one layer's {name} attention {ATTN_PEAK} x bf16 {mb} x {shape.heads} heads x "
                             f"{t} x {t + 1}")


def activation_lines(shape: Shape, a: argparse.Namespace) -> list[Line]:
    """Per actor GPU: checkpointed layer inputs, and the larger of the logits' and one layer's attention backward
    (the `--attn_implementation` path's)."""
    t = a.prompt_max_len + a.generate_max_len
    mb = a.micro_train_batch_size
    entropy = a.entropy_loss_coef is not None  # OpenRLHF's return_entropy
    ckpt = shape.layers * mb * t * shape.hidden * 2
    txv = mb * t * shape.vocab * 4
    extra = ENTROPY_KEPT if entropy else 0
    kept = OUTPUT_KEPT + extra  # what outlives the logits' backward into every layer's
    logits_units = LOGITS_PEAK + extra
    attn_bytes, attn_what = attention_term(shape, mb, t, a.attn_implementation)
    logits, attn = logits_units * txv, attn_bytes + kept * txv
    why = ("--entropy_loss_coef set: compiled entropy graph, no softmax kept" if entropy
           else "no --entropy_loss_coef: no entropy graph")
    return [
        Line(
            f"checkpointed layer inputs: {shape.layers} layers x {mb} x {t} tokens x {shape.hidden} x 2 B",
            ckpt / GIB,
            "estimate",
        ),
        Line(
            f"backward peak, the larger of: logits {logits_units} x fp32 {mb} x {t} x {shape.vocab} "
            f"({logits / GIB:.1f}) and {attn_what} + {kept} x fp32 logits-sized ({attn / GIB:.1f}); {why}",
            max(logits, attn) / GIB,
            "estimate",
        ),
    ]


def actor_plan(shape: Shape, a: argparse.Namespace) -> list[Line]:
    """Per actor GPU: the frozen weights (ZeRO-3 partitions, else replicated), LoRA, grads and Adam; gather
    buffers; activations."""
    n = a.actor_num_nodes * a.actor_num_gpus_per_node
    lora = shape.lora_params(a.lora_rank) if a.lora_rank else shape.params
    zero3 = a.zero_stage == 3
    weights_where = "CPU (--offload)" if a.offload and zero3 else "GPU"
    # below ZeRO-3 every rank holds the whole frozen base (stages 1-2 shard only grads and optimizer states),
    # and OpenRLHF's reference runs ZeRO-3 only when the actor does
    part, shards = ("ZeRO-3 partition", n) if zero3 else (f"replicated (ZeRO-{a.zero_stage})", 1)
    lines = [
        Line(
            f"frozen bf16 weights, {part}: 2 B x {shape.params / 1e9:.2f}B / {shards}",
            2 * shape.params / shards / GIB,
            "exact",
            weights_where,
        ),
    ]
    if a.init_kl_coef > 0 and a.colocate_actor_ref and not a.ref_from_actor:  # --ref_from_actor: no reference model
        lines.append(
            Line(
                f"reference model (colocated), {part}: 2 B x {shape.params / 1e9:.2f}B / {shards}",
                2 * shape.params / shards / GIB,
                "exact",
                weights_where,
            )
        )
    lines += [
        Line(
            f"LoRA r{a.lora_rank} weights + grads, bf16: 4 B x {lora / 1e6:.1f}M / {n}",
            4 * lora / n / GIB,
            "exact",
        ),
        Line(
            f"Adam fp32 master + 2 moments: 12 B x {lora / 1e6:.1f}M / {n}",
            12 * lora / n / GIB,
            "exact",
            "CPU (--adam_offload)" if a.adam_offload else "GPU",
        ),
    ]
    if zero3:  # one layer's experts gathered in bf16, plus the prefetched next
        gathered = 2 * 2 * shape.expert_params_per_layer
        lines.append(
            Line(
                "ZeRO-3 gather: one layer's experts in bf16 and the next one prefetched "
                f"(2 x 2 B x {shape.expert_params_per_layer / 1e9:.2f}B)",
                gathered / GIB,
                "estimate",
            )
        )
    lines += activation_lines(shape, a)
    lines.append(
        Line(
            "eval forwards (reference, old log-probs): the training forward's routed expert loop (rft/gptoss/moe.py, "
            "actor.patch), so no all-experts transient (transformers' eval branch: tokens x experts)",
            0.0,
            "exact",
        )
    )
    lines.append(Line("CUDA context, NCCL buffers, allocator fragmentation", 4.0, "estimate"))
    return lines


def vllm_plan(shape: Shape, a: argparse.Namespace) -> list[Line]:
    """Per engine GPU: the MXFP4 weights over TP, merge mode's pristine q/k/v/o copy, and the KV cache budget."""
    tp = a.vllm_tensor_parallel_size
    lines = [Line(f"MXFP4 checkpoint {shape.serve_gib:.1f} GiB / TP {tp}", shape.serve_gib / tp, "size")]
    if a.lora_rank and not a.vllm_sync_lora_native:
        lines.append(
            Line(
                f"merge-mode LoRA sync: pristine bf16 q/k/v/o ({shape.attention_params / 1e9:.2f}B) / TP {tp}",
                2 * shape.attention_params / tp / GIB,
                "exact",
            )
        )
    budget = a.vllm_gpu_memory_utilization * H100_GIB
    used = sum(line.gib for line in lines) + 3.0
    lines.append(Line("CUDA graphs, activations, sampler", 3.0, "estimate"))
    lines.append(
        Line(
            f"KV cache: the rest of --vllm_gpu_memory_utilization {a.vllm_gpu_memory_utilization} x "
            f"{H100_GIB} GiB",
            max(0.0, budget - used),
            "estimate",
        )
    )
    return lines


def on_gpu(lines: list[Line]) -> float:
    return sum(line.gib for line in lines if line.where == "GPU")


def render(argv: list[str], nodes: int = 1, gpu_gib: float = H100_GIB) -> tuple[str, bool | None]:
    """(the plan as text, whether the actor fits on its GPUs; None when the model is not a known gpt-oss)."""
    a = recipe_flags(argv)
    shape = shape_for(a.pretrain or "") if a is not None else None
    if shape is None:
        return "", None
    n = a.actor_num_nodes * a.actor_num_gpus_per_node
    actor = actor_plan(shape, a)
    total = on_gpu(actor)
    fits = total <= gpu_gib
    engines = a.vllm_num_engines * a.vllm_tensor_parallel_size
    out = [
        f"# memory plan per GPU ({shape.name}; {nodes} node(s): actor on {n} GPU(s), "
        f"{a.vllm_num_engines} vLLM engine(s) x TP {a.vllm_tensor_parallel_size} on {engines} GPU(s); "
        "exact = arithmetic on parameter counts, estimate = not measured):"
    ]
    out += [f"  actor  {line.gib:6.2f} GiB  {line.kind:8}  {line.where:22} {line.item}" for line in actor]
    headroom = gpu_gib - total
    out.append(
        f"  actor  {total:6.2f} GiB on each GPU of {gpu_gib} GiB: "
        + (f"fits, {headroom:.1f} GiB headroom" if fits else f"does NOT fit ({-headroom:.1f} GiB over)")
    )
    if engines:
        vl = vllm_plan(shape, a)
        out += [f"  vllm   {line.gib:6.2f} GiB  {line.kind:8}  {line.where:22} {line.item}" for line in vl]
    return "\n".join(out), fits
