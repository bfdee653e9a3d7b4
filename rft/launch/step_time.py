"""Predicted seconds per phase of one GRPO step of a gpt-oss launch, beside the memory plan, and the levers'
predicted effect.

Arithmetic on the recipe (`rft.launch.memory_plan`'s shapes and flags) and on stated device figures (`FIGURES`,
each with its source; override any of them with a TOML file, `--device-figures FILE` or $RFT_DEVICE_FIGURES).
The phases carry the names of the measured `time_*_s` metric keys. Nothing here was measured on the node; the
first GPU run's timings calibrate it (docs/step-time.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from rft.io import flag_value
from rft.launch.memory_plan import (
    EAGER_FP32,
    FLEX,
    GIB,
    H100_GIB,
    SHAPES,
    Shape,
    actor_plan,
    config_shape,
    on_gpu,
    recipe_flags,
    shape_for,
)

PHASES = ("generate", "reward", "logprob", "train", "sync", "eval", "save", "other", "step")
FIGURES_ENV = "RFT_DEVICE_FIGURES"


@dataclass(frozen=True)
class Figure:
    """A stated figure, its unit and source, and the spread (low, high) its source allows (exact: the value)."""

    value: float
    unit: str
    source: str
    low: float | None = None
    high: float | None = None

    @property
    def spread(self) -> tuple[float, float]:
        return (self.value if self.low is None else self.low, self.value if self.high is None else self.high)


FIGURES: dict[str, Figure] = {
    "peak_bf16_flops": Figure(989e12, "FLOP/s", "H100 SXM dense BF16 tensor core (1,979 with sparsity), "
                              "https://www.nvidia.com/en-us/data-center/h100/"),
    "actor_mfu": Figure(0.0295, "share", "make gpu-check's trainer phase on one H100 (2026-11-27, torch 2.11): "
                        "OpenRLHF's patched Actor under DeepSpeed ZeRO-3 (one rank) with FusedAdam, gpt-oss-20b at 24 "
                        "layers, weights at the init scale, LoRA r32, 1024 + 4096 tokens: one training micro-step "
                        "5.21 s = 1.52e14 FLOP by this model's count (docs/gpu-check.md); spread: the node's torch "
                        "2.9.1 kernels and ZeRO-3's hooks over 4 ranks, +-20%", 0.024, 0.035),
    "forward_mfu": Figure(0.0295, "share", "the same run's old-log-prob forward (no grad, eval mode, rft's routed "
                          "experts): 1.62 s for 5,120 tokens (docs/gpu-check.md); spread as actor_mfu's",
                          0.024, 0.035),
    "eager_fp32_train_factor": Figure(1.13, "x", "make gpu-check on one H100, 2026-11-27, docs/gpu-check.md: the same "
                                      "training micro-step with --attn_implementation rft_eager_fp32, 5.90 s against "
                                      "eager's 5.21 (forward 1.78 vs 1.69, backward 4.07 vs 3.48)"),
    "eager_fp32_forward_factor": Figure(1.11, "x", "make gpu-check on one H100, 2026-11-27, docs/gpu-check.md: the "
                                        "old-log-prob forward with rft_eager_fp32, 1.80 s against eager's 1.62"),
    "hbm_bytes_s": Figure(3.35e12, "B/s", "H100 SXM HBM3, https://www.nvidia.com/en-us/data-center/h100/"),
    "allgather_bytes_s": Figure(360e9, "B/s", "NCCL all-gather bus bandwidth over NVLink 4: 450 GB/s a direction "
                                "(H100 datasheet) x 0.8; nccl-tests 8xH100 busbw 460-480 GB/s all-reduce, "
                                "https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests; the smoke "
                                "measures it (rft/train/allgather_probe.py)", 300e9, 400e9),
    "zero3_gather_share": Figure(0.5, "share", "estimate, not measured: DeepSpeed ZeRO-3's layer-by-layer gathers "
                                 "(prefetch, hooks, no full overlap at micro-batch 1) against the NCCL figure; "
                                 "spread: 100-180 GB/s a gather (an independent read: 100-150 more likely)",
                                 0.28, 0.5),
    "pcie_bytes_s": Figure(25e9, "B/s", "estimate: half of PCIe Gen5 x16's 64 GB/s a direction (H100 datasheet "
                           "128 GB/s both ways) for --offload's host-to-GPU fetch of each rank's partition",
                           15e9, 40e9),
    "decode_tok_s": Figure(2765, "tok/s", "BORROWED, not a vLLM decode rate: the output throughput of an SGLang "
                           "serving benchmark of gpt-oss-20b MXFP4 on one H100 at 32 concurrent requests (prefill "
                           "and queueing included), as quoted in https://github.com/vllm-project/vllm/pull/30598; no "
                           "vLLM 0.15 pure-decode figure at 4k tokens is published; spread: vLLM below SGLang to a "
                           "pure decode above a serving rate", 2000, 3500),
    "decode_batch": Figure(32, "sequences", "the concurrency of the decode_tok_s figure"),
    "decode_context": Figure(1024, "tokens", "estimate: the mean context of the decode_tok_s benchmark", 512, 2048),
    "decode_lora_factor": Figure(0.589, "share", "vLLM serving a LoRA adapter vs merged weights on an MoE: 2,779 vs "
                                 "4,721 tok/s (Unsloth's benchmark, vLLM 0.19, Qwen3-30B-A3B, batch 32); LORA_SYNC=native only",
                                 0.5, 0.8),
    "truncated_share": Figure(0.7, "share", "responses that hit --generate_max_len 4096: 'often above 70%' (issue 28; "
                              "the ops guide's --generate_max_len row: 'Increase if truncation rate >70%')", 0.5, 0.85),
    "finished_share": Figure(0.5, "share", "estimate: mean length of a finished response over the budget "
                             "(lengths spread evenly up to it)", 0.3, 0.7),
    "prompt_tokens": Figure(256, "tokens", "estimate: a math problem under gpt-oss's chat template", 150, 400),
    "reward_per_s": Figure(2118, "samples/s", "exact-match reward through OpenRLHF's path, docs/benchmarks.md"),
    "judge_reward_per_s": Figure(49, "samples/s", "REWARD=judge, blend, 1 s judge answers, docs/benchmarks.md"),
    "sync_call_s": Figure(2.0, "s", "estimate: the LoRA sync's fixed cost a step (the Ray calls to every engine, "
                          "each worker's merge kernels, the prefix-cache reset); the ops guide's '~18s per sync' is "
                          "its own estimate, not a measurement", 1.0, 5.0),
    "object_store_bytes_s": Figure(2e9, "B/s", "estimate: Ray's object store moving the adapter to each engine on "
                                   "one node (shared memory, then the worker's copy)", 1e9, 5e9),
    "save_s": Figure(20.0, "s", "estimate: DeepSpeed LoRA + Adam checkpoint (~0.2 GB at 20b, "
                     "benchmarks/bench_ckpt_size.py) and the HF adapter", 10.0, 40.0),
    "eval_truncated_share": Figure(1.0, "share", "estimate: the built-in eval decodes greedily, and a greedy gpt-oss "
                                   "that loops runs to --generate_max_len; every eval prompt at once, "
                                   "eval_prompts / engines wide (100 at 20b)", 0.7, 1.0),
    "overhead_s": Figure(7.5, "s", "estimate: the driver's and Ray's per-call costs a step outside the timed phases "
                         "(experience batches through the object store, the groups' method calls, the metrics "
                         "line, the sample dump): 5-10 s", 5.0, 10.0),
    "tokenizer_call_s": Figure(0.0, "s", "the tokenizer's load per engine call: 0, the engines hold one copy "
                               "(experience_maker.patch); 0.9.3 pickled it into every call, 0.56 s a load at "
                               "gpt-oss's 201k vocab (12.9 MB)"),
    "eval_prompts": Figure(200, "prompts", "the OOD probe (probe_set_200_ood.jsonl) when --eval_dataset is not on "
                           "this machine"),
}
SHAPE_20B = SHAPES["gpt-oss-20b"]  # the model of the decode_tok_s figure
MEASURED_TOKENS = 5120  # the actor_mfu figure's micro-step (1024 + 4096)


class FiguresError(ValueError):
    """A device-figures file that does not parse or names an unknown figure."""


def read_figures_file(path: str | Path) -> dict:
    """The TOML file's top-level pairs (FiguresError naming the file when it cannot be read)."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise FiguresError(f"device figures {path}: {e}") from e


def figures_text(figures: dict[str, float], source: str) -> str:
    """A device-figures file's text: a `source` line saying what measured them, then one `figure = value` each."""
    lines = [f"# {source}", "source = " + json.dumps(source)]
    return "\n".join(lines + [f"{k} = {v:.6g}" for k, v in sorted(figures.items())]) + "\n"


def figures_source(path: str | Path | None) -> str | None:
    """What a figures file says it was measured by (its `source = "..."` line; `make gpu-check` writes one)."""
    if not path:
        return None
    source = read_figures_file(path).get("source")
    return source if isinstance(source, str) else None


def load_figures(path: str | Path | None) -> dict[str, float]:
    """Every figure's value: FIGURES, with the TOML file's top-level `name = value` pairs over them (a `source`
    string says where they were measured)."""
    values = {name: f.value for name, f in FIGURES.items()}
    if not path:
        return values
    raw = read_figures_file(path)
    raw.pop("source", None)
    unknown = sorted(set(raw) - set(values))
    if unknown:
        raise FiguresError(f"device figures {path}: unknown figure(s) {', '.join(unknown)}; known: "
                           f"{', '.join(values)}")
    bad = [k for k, v in raw.items() if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0]
    if bad:
        raise FiguresError(f"device figures {path}: {', '.join(bad)} must be positive numbers")
    return {**values, **{k: float(v) for k, v in raw.items()}}


# --- the arithmetic ---------------------------------------------------------------------------------------------

def response_tokens(a: argparse.Namespace, f: dict[str, float]) -> float:
    """Mean response length: the truncated share at the budget, the rest at finished_share of it."""
    t = f["truncated_share"]
    return a.generate_max_len * (t + (1 - t) * f["finished_share"])


def sequence_tokens(a: argparse.Namespace, f: dict[str, float]) -> float:
    return min(f["prompt_tokens"], a.prompt_max_len) + response_tokens(a, f)


def forward_flops(shape: Shape, tokens: float) -> tuple[float, float]:
    """(matmul FLOPs of the active weights, eager attention's QK^T and AV over the full T x T) of one forward."""
    return 2 * shape.active_params * tokens, 4 * shape.layers * tokens**2 * shape.q_dim


def train_flops(shape: Shape, tokens: float, checkpointing: bool) -> float:
    """Forward, the checkpoint recompute, and a backward that takes only input grads of the frozen weights (1x the
    forward's matmuls) and both sides of attention (2x)."""
    lin, attn = forward_flops(shape, tokens)
    redo = 1 if checkpointing else 0
    return (2 + redo) * lin + (3 + redo) * attn


def attention_factors(a: argparse.Namespace, f: dict[str, float]) -> tuple[float, float]:
    """(forward, train) multipliers of the trainer's compute on its `--attn_implementation` path against eager's
    (the mfu figures' path). rft_flex has no trainer measurement (its backward failed to compile on the GPU check)
    and, like any other name, is timed as eager."""
    if a.attn_implementation == EAGER_FP32:
        return f["eager_fp32_forward_factor"], f["eager_fp32_train_factor"]
    return 1.0, 1.0


def compute_s(flops: float, f: dict[str, float], mfu: str = "actor_mfu") -> float:
    """Seconds of `flops` at the peak times the trainer's measured share (`actor_mfu` training, `forward_mfu` a
    no-grad forward)."""
    return flops / (f["peak_bf16_flops"] * f[mfu])


def gather_s(shape: Shape, a: argparse.Namespace, f: dict[str, float]) -> float:
    """One ZeRO-3 gather of the whole frozen base on one rank: the other ranks' partitions over NVLink, and with
    --offload its own partition from host memory first. Nothing below ZeRO-3 (the base is replicated)."""
    if a.zero_stage != 3:
        return 0.0
    n = a.actor_num_nodes * a.actor_num_gpus_per_node
    base = 2 * shape.params
    s = base * (n - 1) / n / (f["allgather_bytes_s"] * f["zero3_gather_share"])
    return s + (base / n / f["pcie_bytes_s"] if a.offload else 0.0)


def gather_count(a: argparse.Namespace, samples: float, ref_from_actor: bool = False) -> int:
    """ZeRO-3 gathers of the frozen base on one rank in one step: one per log-prob forward (the reference's too
    when it runs on the actor's GPUs) and 3 per training micro-batch (2 without checkpointing)."""
    if a.zero_stage != 3:
        return 0
    batches = forward_batches(a, samples, a.micro_rollout_batch_size)
    refs = batches if has_reference(a) and (a.colocate_actor_ref or ref_from_actor) else 0
    per_micro = 3 if a.gradient_checkpointing else 2
    return batches + refs + a.max_epochs * forward_batches(a, samples, a.micro_train_batch_size) * per_micro


FLOOR_SHARE = 0.5  # the transport floor: the all-gather rate at which the gathers alone are half the step


def gather_floor(shape: Shape, a: argparse.Namespace, f: dict[str, float], share: float = FLOOR_SHARE
                 ) -> float | None:
    """The all-gather rate (B/s) at which the step's ZeRO-3 gathers alone take `share` of the synchronous step,
    the rest of the step at the model's figures: count x bytes x (1 - share) / (share x the rest); None below
    ZeRO-3 (nothing is gathered)."""
    count = gather_count(a, a.rollout_batch_size * a.n_samples_per_prompt)
    if not count:
        return None
    n = a.actor_num_nodes * a.actor_num_gpus_per_node
    moved = 2 * shape.params * (n - 1) / n
    p = phases(shape, replace_ns(a, async_train=False), f)
    rest = p["step"] - count * moved / (f["allgather_bytes_s"] * f["zero3_gather_share"])
    return count * moved * (1 - share) / (share * rest)


def replace_ns(a: argparse.Namespace, **changes) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(a), **changes})


def decode_bytes(shape: Shape, batch: float, context: float, tp: int) -> float:
    """Bytes one decode step reads on each GPU of an engine: the bf16 dense weights, the MXFP4 experts any of the
    batch's tokens is routed to, and the batch's KV cache (every other layer only its window)."""
    dense = 2 * (shape.params - shape.layers * shape.expert_params_per_layer)
    experts = shape.serve_gib * GIB - dense
    touched = 1 - (1 - shape.top_k / shape.experts) ** batch
    kv_token_layer = 2 * shape.kv_dim * 2  # K and V in bf16
    kv = batch * shape.layers / 2 * kv_token_layer * (context + min(context, shape.window))
    return (dense + experts * touched + kv) / tp


def decode_step_s(shape: Shape, batch: float, context: float, tp: int, f: dict[str, float]) -> float:
    """One decode step: its bytes at the HBM share vLLM reaches in the decode_tok_s figure (20b, one GPU)."""
    ref = SHAPE_20B
    ref_step = f["decode_batch"] / f["decode_tok_s"]
    share = decode_bytes(ref, f["decode_batch"], f["decode_context"], 1) / (f["hbm_bytes_s"] * ref_step)
    return decode_bytes(shape, batch, context, tp) / (f["hbm_bytes_s"] * share)


def generate_s(shape: Shape, a: argparse.Namespace, f: dict[str, float], sequences: float,
               calls: float = 0.0) -> float:
    """The engines decode for the whole budget (the truncated tail sets the time) at the mean live batch; each
    engine first loads the tokenizer for each of its `calls` (tokenizer_call_s, on its event loop)."""
    engines = max(a.vllm_num_engines, 1)
    loads = math.ceil(calls / engines) * f["tokenizer_call_s"]
    live = math.ceil(sequences / engines) * response_tokens(a, f) / a.generate_max_len
    context = sequence_tokens(a, f) - response_tokens(a, f) + a.generate_max_len / 2
    step = decode_step_s(shape, live, context, a.vllm_tensor_parallel_size, f)
    if a.vllm_sync_lora_native:
        step /= f["decode_lora_factor"]
    return loads + a.generate_max_len * step


def sync_s(shape: Shape, a: argparse.Namespace, f: dict[str, float]) -> float:
    """The weight sync from the bytes it moves: a LoRA adapter (bf16 A and B on q/k/v/o) to every engine through
    the object store plus its fixed cost; a full fine-tune broadcasts the bf16 weights at the NCCL figure."""
    if not a.lora_rank:
        return 2 * shape.params / f["allgather_bytes_s"]
    engines = max(a.vllm_num_engines, 1)
    return f["sync_call_s"] + engines * 2 * shape.lora_params(a.lora_rank) / f["object_store_bytes_s"]


def forward_batches(a: argparse.Namespace, samples: float, micro: int) -> int:
    """Micro-batches of `samples` on each of the actor's ranks."""
    return math.ceil(samples / (a.actor_num_nodes * a.actor_num_gpus_per_node) / micro)


@dataclass(frozen=True)
class Levers:
    """The levers the model predicts: overlap, the reference from the actor, the actor's ZeRO stage."""

    async_train: bool
    ref_from_actor: bool
    zero_stage: int


def has_reference(a: argparse.Namespace) -> bool:
    return a.init_kl_coef > 0  # OpenRLHF 0.9.3 builds the reference only then


def phases(shape: Shape, a: argparse.Namespace, f: dict[str, float], ref_from_actor: bool = False,
           eval_prompts: float | None = None) -> dict[str, float]:
    """Predicted seconds of each phase of one step, `step` last (the sum, or the overlapped async step)."""
    samples = a.rollout_batch_size * a.n_samples_per_prompt
    tokens = sequence_tokens(a, f)
    generate = generate_s(shape, a, f, samples, calls=a.rollout_batch_size)
    reward = samples / f["judge_reward_per_s" if a.judge_reward else "reward_per_s"]
    gather = gather_s(shape, a, f)
    batches = forward_batches(a, samples, a.micro_rollout_batch_size)
    fwd_x, train_x = attention_factors(a, f)
    forward = fwd_x * compute_s(sum(forward_flops(shape, tokens * a.micro_rollout_batch_size)), f, "forward_mfu")
    old = batches * (forward + gather)
    # the reference runs after the old log-probs on the same GPUs (--colocate_actor_ref); from the actor
    # (--ref_from_actor) it is a second forward of the actor with its adapter disabled, with a gather of its own
    ref = batches * (forward + gather) if has_reference(a) else 0.0
    # a reference on GPUs of its own runs beside the old log-probs (taken at the actor's rank count)
    logprob = old + ref if a.colocate_actor_ref or ref_from_actor else max(old, ref)
    micro = a.micro_train_batch_size
    per_micro = train_x * compute_s(train_flops(shape, tokens * micro, a.gradient_checkpointing), f)
    gathers = 3 if a.gradient_checkpointing else 2  # forward, the recompute, backward
    train = a.max_epochs * forward_batches(a, samples, micro) * (per_micro + gathers * gather)
    sync = sync_s(shape, a, f)
    ev = 0.0
    if a.eval_dataset and a.eval_steps > 0:
        prompts = eval_prompts if eval_prompts is not None else f["eval_prompts"]
        greedy = {**f, "truncated_share": f["eval_truncated_share"]}
        ev = generate_s(shape, a, greedy, prompts * a.eval_n_samples_per_prompt, calls=prompts) / a.eval_steps
    save = f["save_s"] / a.save_steps if a.save_steps > 0 else 0.0
    p = {"generate": generate, "reward": reward, "logprob": logprob, "train": train, "sync": sync, "eval": ev,
         "save": save, "other": f["overhead_s"]}
    if a.async_train:  # 0.9.3: generation holds vLLM's lock, the sync (and an eval on vLLM) waits for it
        p["step"] = max(generate + reward, logprob + train + save) + sync + ev + p["other"]
    else:
        p["step"] = sum(p.values())
    return p


def corners(shape: Shape, a: argparse.Namespace, f: dict[str, float], ref_from_actor: bool = False,
            eval_prompts: float | None = None) -> tuple[dict[str, float], dict[str, float]]:
    """(fastest, slowest) figures: each figure with a spread at whichever end makes the step faster (slower), the
    others as stated; a figure a figures file set is taken as exact."""
    fast, slow = dict(f), dict(f)
    for name, fig in FIGURES.items():
        lo, hi = fig.spread
        if lo == hi or f[name] != fig.value:
            continue
        at_lo = phases(shape, a, {**f, name: lo}, ref_from_actor, eval_prompts)["step"]
        at_hi = phases(shape, a, {**f, name: hi}, ref_from_actor, eval_prompts)["step"]
        fast[name], slow[name] = (lo, hi) if at_lo <= at_hi else (hi, lo)
    return fast, slow


def count_rows(path: str | None) -> int | None:
    """Lines of a JSONL file on this machine, None when it is not here."""
    try:
        with open(path or "", encoding="utf-8") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return None


def with_levers(a: argparse.Namespace, levers: Levers) -> argparse.Namespace:
    """The recipe with the levers set; a reference from the actor takes none onto the actor's GPUs."""
    changes = {"async_train": levers.async_train, "zero_stage": levers.zero_stage}
    if levers.ref_from_actor:
        changes["colocate_actor_ref"] = False  # the plan's reference line is the colocated copy
    return argparse.Namespace(**{**vars(a), **changes})


def actor_gib(shape: Shape, a: argparse.Namespace) -> float:
    """The memory plan's total on each actor GPU."""
    return on_gpu(actor_plan(shape, a))


# --- what the dry run prints ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    shape: Shape
    recipe: argparse.Namespace
    figures: dict[str, float]
    phases: dict[str, float]
    eval_prompts: float | None
    low: dict[str, float]  # the phases at the fastest end of the figures' spread
    high: dict[str, float]  # and at the slowest


def recipe(argv: list[str]) -> argparse.Namespace | None:
    """The memory plan's recipe flags, and whether the reward is rft's judge reward (its file name)."""
    a = recipe_flags(argv)
    if a is not None:
        a.judge_reward = "judge" in Path(flag_value(argv, "--remote_rm_url") or "").name
    return a


def predict(argv: list[str], figures: dict[str, float], any_model: bool = False) -> Prediction | None:
    """The predicted step of the resolved OpenRLHF flags; None when the model is not a known gpt-oss (`any_model`:
    any local checkpoint with a config.json, for figures calibrated on it)."""
    a = recipe(argv)
    shape = shape_for(a.pretrain or "") if a is not None else None
    if shape is None and a is not None and any_model:
        shape = config_shape(a.pretrain or "")
    if shape is None:
        return None
    rows = count_rows(a.eval_dataset)
    fast, slow = corners(shape, a, figures, eval_prompts=rows)
    return Prediction(shape, a, figures, phases(shape, a, figures, eval_prompts=rows), rows,
                      phases(shape, a, fast, eval_prompts=rows), phases(shape, a, slow, eval_prompts=rows))


def lever_step(pr: Prediction, levers: Levers) -> float:
    a = with_levers(pr.recipe, levers)
    return phases(pr.shape, a, pr.figures, levers.ref_from_actor, pr.eval_prompts)["step"]


def candidates(pr: Prediction) -> list[Levers]:
    """Every combination of the levers the recipe allows: a reference lever only with a KL term, ZeRO below 3
    only for a LoRA actor without --offload (DeepSpeed offloads parameters only under ZeRO-3)."""
    a = pr.recipe
    refs = (False, True) if has_reference(a) else (False,)
    stages = (a.zero_stage, 2) if a.zero_stage == 3 and a.lora_rank and not a.offload else (a.zero_stage,)
    return [Levers(x, r, z) for x in (a.async_train, not a.async_train) for r in refs for z in stages]


def fits(pr: Prediction, levers: Levers, gpu_gib: float = H100_GIB) -> bool:
    return actor_gib(pr.shape, with_levers(pr.recipe, levers)) <= gpu_gib


def recommend(pr: Prediction) -> Levers:
    """The fastest combination whose actor fits its GPUs by the memory plan (the recipe's own on a tie)."""
    ok = [lv for lv in candidates(pr) if fits(pr, lv)] or [candidates(pr)[0]]
    return min(ok, key=lambda lv: (round(lever_step(pr, lv), 6), lv != candidates(pr)[0]))


def lever_count(levers: Levers, base: Levers) -> int:
    """How many levers `levers` pulls against the recipe's own setting."""
    return sum(x != y for x, y in zip(vars(levers).values(), vars(base).values(), strict=True))


def lever_names(levers: Levers, base: Levers) -> str:
    names = []
    if levers.async_train != base.async_train:
        names.append("--async_train")
    if levers.ref_from_actor:
        names.append("--ref_from_actor")
    if levers.zero_stage != base.zero_stage:
        names.append(f"--zero_stage {levers.zero_stage}")
    return " + ".join(names) or "the recipe as it is"


PHASE_NOTES = {
    "generate": "vLLM decode to --generate_max_len (the truncated tail), mean live batch",
    "reward": "the reward over every sample",
    "logprob": "old log-probs and the reference forward, with their ZeRO-3 gathers",
    "train": "forward, recompute and backward of every micro-batch, with their ZeRO-3 gathers",
    "sync": "LoRA sync to the engines",
    "eval": "the built-in eval, amortised over --eval_steps",
    "save": "the checkpoint, amortised over --save_steps",
    "other": "the driver's and Ray's per-call costs outside the timed phases",
}


def figures_line(path: str | Path | None) -> str:
    """Where the figures come from: the stated ones, or a file's (named, with the figures it sets and its source)."""
    if not path:
        return f"figures: as stated in docs/step-time.md (${FIGURES_ENV} names a file of measured ones)"
    raw = read_figures_file(path)
    names = ", ".join(sorted(k for k in raw if k != "source")) or "none"
    source = figures_source(path)
    return (f"figures: {names} from {path}" + (f" ({source})" if source else "")
            + "; the rest as stated in docs/step-time.md")


def attention_line(pr: Prediction) -> str:
    """The trainer's attention path, its time factors and their source, and what it adds to the memory plan's
    total on each actor GPU against eager."""
    a = pr.recipe
    path = a.attn_implementation
    fwd_x, train_x = attention_factors(a, pr.figures)
    delta = actor_gib(pr.shape, a) - actor_gib(pr.shape, replace_ns(a, attn_implementation="eager"))
    gib = f"{delta:+.1f} GiB activations by the memory plan"
    if path == "eager":
        return "attention: eager (the path the trainer figures were measured on)"
    if path == EAGER_FP32:
        return f"attention: {path} (train x{train_x:.2f}, forward x{fwd_x:.2f}, measured on one H100; {gib})"
    if path == FLEX:
        return (f"attention: {path} (timed as eager, not measured: its training backward failed to compile on the one "
                f"GPU check, torch 2.11, docs/gpu-check.md; {gib})")
    return f"attention: {path} (timed and planned as eager)"


def render(pr: Prediction, figures_path: str | Path | None = None) -> str:
    """The dry run's block: the step in minutes, where the figures come from, a line per phase, then the levers."""
    a, p = pr.recipe, pr.phases
    kind = "--async_train: max(generate + reward, logprob + train + save) + sync + eval + other" \
        if a.async_train else "the sum (synchronous trainer)"
    lo, hi = pr.low, pr.high
    out = [
        f"# step-time model ({pr.shape.name}; rft/launch/step_time.py, docs/step-time.md; estimates from stated "
        f"device figures, not measured; ${FIGURES_ENV} overrides them):",
        f"predicted step time: {lo['step'] / 60:.1f}-{hi['step'] / 60:.1f} min over the figures' spread "
        f"({p['step'] / 60:.1f} at the stated figures)",
        f"  {figures_line(figures_path)}",
        f"  {attention_line(pr)}",
    ]
    out += [f"  {name:8} {p[name]:8.1f} s  ({lo[name]:.1f}-{hi[name]:.1f})  {PHASE_NOTES[name]}"
            for name in PHASES[:-1]]
    out.append(f"  {'step':8} {p['step']:8.1f} s  ({lo['step']:.1f}-{hi['step']:.1f})  {kind}")
    base = candidates(pr)[0]
    out.append(f"levers: (predicted step; the memory plan's total on each actor GPU of {H100_GIB} GiB)")
    out += [lever_line(pr, lv, base) for lv in candidates(pr)[1:] if lever_count(lv, base) == 1]
    best = recommend(pr)
    out.append(f"  recommended: {lever_names(best, base)}: {lever_step(pr, best) / 60:.1f} min"
               + (f", {actor_gib(pr.shape, with_levers(a, best)):.1f} GiB" if best != base else ""))
    return "\n".join(out)


def lever_line(pr: Prediction, lv: Levers, base: Levers) -> str:
    gib = actor_gib(pr.shape, with_levers(pr.recipe, lv))
    verdict = "fits" if gib <= H100_GIB else "does NOT fit"
    extra = ""
    if lv.zero_stage != base.zero_stage and has_reference(pr.recipe):
        both = replace(lv, ref_from_actor=True)
        extra = f"; with --ref_from_actor {actor_gib(pr.shape, with_levers(pr.recipe, both)):.1f} GiB"
    return (f"  {lever_names(lv, base)}: {lever_step(pr, lv) / 60:.1f} min, {gib:.1f} GiB ({verdict}; "
            f"the recipe {actor_gib(pr.shape, pr.recipe):.1f}){extra}")



# phase -> the figure its time is inversely monotone in, which calibration solves for
CALIBRATED = {"generate": "decode_tok_s", "reward": "reward_per_s", "logprob": "forward_mfu", "train": "actor_mfu",
              "sync": "sync_call_s", "save": "save_s", "other": "overhead_s"}


def solve_figure(phase: str, target_s: float, shape: Shape, a: argparse.Namespace, f: dict[str, float]) -> float:
    """The value of CALIBRATED[phase] at which the model's `phase` takes `target_s` (bisection in log space)."""
    name = CALIBRATED[phase]
    if name in ("sync_call_s", "save_s", "overhead_s"):  # seconds added to the phase: solved in closed form
        base = phases(shape, a, {**f, name: 0.0})[phase]
        per = phases(shape, a, {**f, name: 1.0})[phase] - base
        return max(0.0, (target_s - base) / per) if per > 0 else f[name]
    lo, hi = f[name] * 1e-9, f[name] * 1e9
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if phases(shape, a, {**f, name: mid})[phase] > target_s:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def calibrate(argv: list[str], measured: dict[str, float]) -> dict[str, float]:
    """The figures at which the model of the run `argv` reproduces its measured mean seconds per phase (phases the
    run did not spend time in, or that the model has no figure for, keep the stated figures)."""
    f = load_figures(None)
    pr = predict(argv, f, any_model=True)
    if pr is None:
        raise ValueError("no step-time model for this command: --pretrain is neither a known gpt-oss nor a local "
                         "checkpoint with a config.json")
    out = {}
    for phase, name in CALIBRATED.items():
        if measured.get(phase, 0.0) > 0 and pr.phases[phase] > 0:
            out[name] = solve_figure(phase, measured[phase], pr.shape, pr.recipe, f)
        elif phase == "other" and phase in measured:
            out[name] = measured[phase]
    return out


def step_block(argv: list[str], figures_path: str | None, facts: dict, warnings: list[str],
               any_model: bool = False) -> str:
    """The launcher's step-time block of the resolved flags (empty for an unknown model); the phases go into
    `facts["predicted_step_s"]` for the run record, a bad figures file into `warnings`."""
    try:
        pr = predict(argv, load_figures(figures_path), any_model)
    except FiguresError as e:
        warnings.append(f"step-time model: {e}")
        return ""
    if pr is None:
        return ""
    facts["predicted_step_s"] = {name: round(pr.phases[name], 1) for name in PHASES}
    facts["predicted_step_range_s"] = [round(pr.low["step"], 1), round(pr.high["step"], 1)]
    return render(pr, figures_path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rft.launch.step_time",
                                description="Predict the seconds per phase of one GRPO step of a gpt-oss recipe.")
    p.add_argument("--device-figures", default=os.environ.get(FIGURES_ENV),
                   help=f"TOML file of `figure = value` lines over the stated figures (default ${FIGURES_ENV})")
    p.add_argument("--figures", action="store_true", help="list every figure, its value and its source, and exit")
    p.add_argument("openrlhf_args", nargs=argparse.REMAINDER, help="-- then the OpenRLHF flags of the recipe")
    return p


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        f = load_figures(ns.device_figures)
    except FiguresError as e:
        print(e, file=sys.stderr)
        return 2
    if ns.figures:
        for name, fig in FIGURES.items():
            lo, hi = fig.spread
            spread = f"; spread {lo:g}-{hi:g}" if lo != hi else ""
            print(f"{name} = {f[name]:g}  # {fig.unit}{spread}; {fig.source}")
        return 0
    rest = ns.openrlhf_args[1:] if ns.openrlhf_args[:1] == ["--"] else ns.openrlhf_args
    pr = predict(rest, f)
    if pr is None:
        print("no prediction: --pretrain is not a known gpt-oss checkpoint", file=sys.stderr)
        return 2
    print(render(pr, ns.device_figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
