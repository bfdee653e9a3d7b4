"""`make gpu-check`'s trainer phases: OpenRLHF's patched `Actor` under DeepSpeed ZeRO-3 at one rank, and the trainer's
attention paths at length.

- `trainer_phases`: the 20b recipe's actor built as `PolicyModelActor.init_model_from_pretrained` builds it (the
  patched `Actor` from a checkpoint path, `DeepspeedStrategy.create_optimizer` and `prepare`), its weights drawn at
  the config's init scale instead of read from disk; the old-log-prob forward, the reference forward and one training
  micro-step, each timed (CUDA events, warm-up excluded) with its peak memory.
- `attention_paths`: each attention path at 512, 2,048 and 4,608 tokens against an fp32 reference of the same weights:
  time, peak memory, per-token log-prob difference, and the share of tokens whose top-k experts differ.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from benchmarks import gpu_check_phases as ph
from rft.provenance import REPO_ROOT

# The 20b recipe's actor flags (train_grpo_20b.sh) and what OpenRLHF's validation needs to accept a namespace.
RECIPE_FLAGS = ["--zero_stage", "3", "--param_dtype", "bf16", "--gradient_checkpointing",
                "--gradient_checkpointing_use_reentrant", "--attn_implementation", "eager", "--target_modules", "q_proj", "k_proj", "v_proj", "o_proj",
                "--actor_learning_rate", "5e-7", "--eps_clip", "0.2", "--init_kl_coef", "0.001",
                "--entropy_loss_coef", "0", "--enable_vllm_is_correction", "--micro_rollout_batch_size", "1",
                "--prompt_data", "d", "--remote_rm_url", "rft/reward/exact_match.py", "--advantage_estimator",
                "group_norm", "--n_samples_per_prompt", "2", "--rollout_batch_size", "1",
                "--actor_num_gpus_per_node", "1"]
TRAIN_TIMED = 2  # measured repeats per phase after one warm-up; the report keeps the fastest
GPU_LENGTHS = (512, 2048, 4608)
TINY_LENGTHS = (16, 32, 64)


# ---------------------------------------------------------------- timing and memory


def event_timed(fn: Callable[[], object], device: torch.device) -> tuple[object, float]:
    """(fn(), seconds): CUDA events around it on a GPU, the wall clock around it on the CPU."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    out = fn()
    end.record()
    torch.cuda.synchronize(device)
    return out, start.elapsed_time(end) / 1000


class PhasePeak:
    """Peak memory over a block: the CUDA allocator's on a GPU; on the CPU the process's resident set, sampled."""

    def __init__(self, device: torch.device, every_s: float = 0.005):
        self.device, self.every_s = device, every_s
        self.start_gib = self.peak_gib = 0.0
        self._stop = threading.Event()

    @staticmethod
    def _rss_gib() -> float:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / ph.GIB

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak_gib = max(self.peak_gib, self._rss_gib())

    def __enter__(self) -> PhasePeak:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start_gib = torch.cuda.memory_allocated(self.device) / ph.GIB
        else:
            self.start_gib = self.peak_gib = self._rss_gib()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_gib = torch.cuda.max_memory_allocated(self.device) / ph.GIB
        else:
            self._stop.set()
            self._thread.join()
            self.peak_gib = max(self.peak_gib, self._rss_gib())

    @property
    def memory_kind(self) -> str:
        return "CUDA allocated" if self.device.type == "cuda" else "host RSS"


def measure(fn: Callable[[], object], device: torch.device, repeats: int = TRAIN_TIMED) -> dict:
    """One warm-up call, then `repeats` timed calls: the fastest, the warm-up, and the peak over the timed calls."""
    _, warm = event_timed(fn, device)
    times = []
    with PhasePeak(device) as mem:
        for _ in range(repeats):
            times.append(event_timed(fn, device)[1])
    return {"s": min(times), "warmup_s": warm, "start_gib": mem.start_gib, "peak_gib": mem.peak_gib,
            "added_gib": mem.peak_gib - mem.start_gib, "memory": mem.memory_kind}


# ---------------------------------------------------------------- the actor as the launch builds it


def single_rank(device: torch.device) -> str:
    """torch.distributed at world size 1 through DeepSpeed: NCCL on a GPU, gloo (with rft's CPU stand-ins) on the CPU."""
    import deepspeed

    from rft.cpu.local_ray import free_port

    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)
        backend = "nccl"
    else:
        from rft.cpu.standins import install, install_in_order_allgather

        install()
        install_in_order_allgather()
        backend = "gloo"
    if not torch.distributed.is_initialized():
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
                          LOCAL_RANK="0")
        deepspeed.init_distributed(dist_backend=backend)
    return backend


def recipe_args(shape: ph.CheckShape, pretrain: str, reentrant: bool = True, attn: str = "eager"):
    """OpenRLHF's own (patched) parser and validation on the 20b recipe's actor flags at the check's shape, with
    another attention path or without reentrant checkpointing where asked."""
    from rft.plan.openrlhf_cli import parse_args

    flags = [attn if f == "eager" else f for f in RECIPE_FLAGS]
    if not reentrant:
        flags.remove("--gradient_checkpointing_use_reentrant")
    argv = ["--pretrain", pretrain, *flags, "--lora_rank", str(shape.lora_rank), "--lora_alpha",
            str(shape.lora_alpha), "--prompt_max_len",
            str(shape.prompt_len), "--generate_max_len", str(shape.gen_len), "--micro_train_batch_size",
            str(shape.micro_batch), "--train_batch_size", str(shape.micro_batch)]
    return parse_args(argv).args


def write_config(shape: ph.CheckShape, layers: int, folder: Path) -> Path:
    """A checkpoint folder holding only gpt-oss's config at `shape` and depth (yarn RoPE, sinks, sliding window)."""
    cfg = ph.gpt_oss_config(shape, layers)
    cfg._attn_implementation = None  # the Actor passes the recipe's --attn_implementation
    cfg.save_pretrained(folder)
    return folder


@contextlib.contextmanager
def random_weights() -> Iterator[None]:
    """`from_pretrained` of a config-only folder builds the model with weights drawn at the config's init scale, under
    whatever zero.Init the caller holds (ZeRO-3 partitions it as a real load would); only the file read is skipped."""
    from transformers import AutoConfig, AutoModelForCausalLM

    original = AutoModelForCausalLM.__dict__["from_pretrained"]

    def build(cls, path, *args, **kwargs):
        torch.manual_seed(0)
        dtype = kwargs.get("torch_dtype") or kwargs.get("dtype")
        model = cls.from_config(AutoConfig.from_pretrained(path), torch_dtype=dtype,
                                attn_implementation=kwargs.get("attn_implementation"))
        init_weights(model)
        return model

    AutoModelForCausalLM.from_pretrained = classmethod(build)
    try:
        yield
    finally:
        AutoModelForCausalLM.from_pretrained = original


def init_weights(model: torch.nn.Module) -> int:
    """The model's own `_init_weights` on every module, its parameters gathered first: under zero.Init transformers
    initializes partitioned (empty) tensors, which leaves gpt-oss's experts and router as torch.empty made them."""
    import deepspeed

    done = 0
    for module in model.modules():
        params = list(module.parameters(recurse=False))
        if params:
            with deepspeed.zero.GatheredParameters(params, modifier_rank=0,
                                                   enabled=any(hasattr(p, "ds_id") for p in params)):
                with torch.no_grad():
                    model._init_weights(module)
            done += 1
    return done


def weight_std(model: torch.nn.Module) -> dict[str, float]:
    """The standard deviation of the first layer's experts, router and sinks (gathered): the init scale drawn."""
    import deepspeed

    named = {n.rsplit("layers.0.", 1)[1]: p for n, p in model.named_parameters()
             if "layers.0." in n and n.endswith(("experts.gate_up_proj", "experts.down_proj", "router.weight",
                                                 "sinks"))}
    with deepspeed.zero.GatheredParameters(list(named.values()),
                                           enabled=any(hasattr(p, "ds_id") for p in named.values())):
        return {n: float(p.float().std()) for n, p in named.items()}


def nonzero_sinks(model: torch.nn.Module, std: float = 0.5) -> int:
    """Draw the attention sinks away from 0, as a trained checkpoint has them (gathered first under ZeRO-3)."""
    import deepspeed

    sinks = [p for n, p in model.named_parameters() if n.endswith("sinks")]
    with deepspeed.zero.GatheredParameters(sinks, modifier_rank=0, enabled=any(hasattr(p, "ds_id") for p in sinks)):
        with torch.no_grad():
            for p in sinks:
                p.normal_(0.0, std)
    return len(sinks)


def fused_adam(device: torch.device) -> dict:
    """DeepSpeed's FusedAdam JIT-built as the launch builds it (TORCH_EXTENSIONS_DIR from rft.provision.caches), timed,
    with the toolchain found; without CUDA or nvcc: not built, and torch's AdamW is used instead (labelled)."""
    from rft.provision.caches import cache_env

    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                    if os.environ.get("CUDA_HOME") else None)
    info: dict = {"nvcc": None, "ninja": shutil.which("ninja"), "built": False}
    if nvcc and os.path.exists(nvcc):
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        info["nvcc"] = f"{nvcc}: {out[-1] if out else '?'}"
    if device.type != "cuda":
        return info | {"optimizer": "torch AdamW", "why": "no CUDA: FusedAdam runs only on a GPU"}
    if not info["nvcc"]:
        return info | {"optimizer": "torch AdamW", "why": "no nvcc: DeepSpeed cannot JIT-build FusedAdam here"}
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", cache_env(os.environ)["TORCH_EXTENSIONS_DIR"])
    from deepspeed.ops.op_builder import FusedAdamBuilder

    t0 = time.monotonic()
    try:
        FusedAdamBuilder().load()
    except Exception as e:  # noqa: BLE001  (the build's failure is the finding; the phases run on torch's AdamW)
        return info | {"optimizer": "torch AdamW", "why": f"FusedAdam build failed: {type(e).__name__}: {e}"[:400]}
    return info | {"optimizer": "DeepSpeed FusedAdam", "built": True, "build_s": time.monotonic() - t0,
                   "extensions_dir": os.environ["TORCH_EXTENSIONS_DIR"]}


def cpu_config(strategy) -> None:
    """On the CPU: fp32 and torch's AdamW, as rft.fixtures.cpu_trainer runs DeepSpeed there."""
    from rft.fixtures.cpu_trainer import cpu_ds_config

    cpu_ds_config(strategy)


def build_actor(args, strategy, device: torch.device, optimizer: dict):
    """(actor, optimizer, scheduler) through the patched Actor and strategy.prepare, as init_model_from_pretrained."""
    from openrlhf.models import Actor
    from transformers.trainer import get_scheduler

    from rft.train.seeds import lora_init_seed

    with random_weights():
        actor = Actor(args.pretrain, attn_implementation=args.attn_implementation, param_dtype=args.param_dtype,
                      load_in_4bit=args.load_in_4bit, lora_rank=args.lora_rank, lora_alpha=args.lora_alpha,
                      target_modules=args.target_modules, lora_dropout=args.lora_dropout,
                      ds_config=strategy.get_ds_train_config(is_actor=True), packing_samples=args.packing_samples,
                      temperature=args.temperature, use_liger_kernel=args.use_liger_kernel,
                      lora_seed=lora_init_seed(args.seed))
    nonzero_sinks(actor.model)
    if optimizer["optimizer"] == "DeepSpeed FusedAdam":
        optim = strategy.create_optimizer(actor, lr=args.actor_learning_rate, betas=args.adam_betas,
                                          weight_decay=args.l2)
    else:
        params = [p for p in actor.model.parameters() if p.requires_grad]
        optim = torch.optim.AdamW(params, lr=args.actor_learning_rate, betas=args.adam_betas, weight_decay=args.l2)
    sched = get_scheduler(args.lr_scheduler, optim, num_warmup_steps=1, num_training_steps=10,
                          scheduler_specific_kwargs={"min_lr": args.actor_learning_rate * 0.1})
    actor.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": args.gradient_checkpointing_use_reentrant})
    return strategy.prepare((actor, optim, sched), is_rlhf=True)


def batch(shape: ph.CheckShape, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    """One micro-batch of the recipe's length: random tokens, every position attended, the response acted."""
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, shape.vocab, (shape.micro_batch, shape.tokens), generator=g).to(device)
    return {"sequences": seq, "attention_mask": torch.ones_like(seq),
            "action_mask": torch.ones(shape.micro_batch, shape.gen_len, dtype=torch.bool, device=device)}


def trainer_phases(shape: ph.CheckShape, layers: int, device: torch.device, out: dict, reentrant: bool = True,
                   attn: str = "eager") -> dict:
    """The three trainer phases of one step at `layers` depth, each beside the memory plan and the step-time model."""
    from openrlhf.models import PolicyLoss
    from openrlhf.utils import get_strategy

    from rft.train.reference import adapter_disabled

    out["backend"] = single_rank(device)
    out["optimizer"] = fused_adam(device)
    with tempfile.TemporaryDirectory() as tmp:
        args = recipe_args(shape, str(write_config(shape, layers, Path(tmp) / "model")), reentrant, attn)
        out["reentrant"], out["attn_implementation"] = args.gradient_checkpointing_use_reentrant, attn
        strategy = get_strategy(args)
        strategy.world_size = torch.distributed.get_world_size()
        if device.type != "cuda":
            cpu_config(strategy)
        (actor, optim, sched), build_s = event_timed(lambda: build_actor(args, strategy, device, out["optimizer"]),
                                                     device)
    engine = actor.model
    out["build_s"] = build_s
    out["static_gib"] = torch.cuda.memory_allocated(device) / ph.GIB if device.type == "cuda" else None
    out["params"] = sum(getattr(p, "ds_numel", p.numel()) for p in engine.module.parameters())
    out["lora_params"] = sum(getattr(p, "ds_numel", p.numel()) for p in engine.module.parameters() if p.requires_grad)
    out["layers"], out["tokens"], out["micro_batch"] = layers, shape.tokens, shape.micro_batch
    out["weight_std"] = weight_std(engine.module)
    b = batch(shape, device)
    seq, att, act = b["sequences"], b["attention_mask"], b["action_mask"]
    rows = out.setdefault("rows", [])

    def logprobs() -> torch.Tensor:
        actor.eval()
        with torch.no_grad():
            lp = actor(seq, act, attention_mask=att)
        actor.train()
        return lp

    rows.append({"phase": "old_logprob", "what": "actor.eval(), no_grad forward (PolicyModelActor.forward)"}
                | measure(logprobs, device))
    old = logprobs()

    def reference() -> torch.Tensor:
        with adapter_disabled(engine):
            return logprobs()

    base_gib = 2 * (out["params"] - out["lora_params"]) / ph.GIB
    free_gib = torch.cuda.mem_get_info(device)[0] / ph.GIB if device.type == "cuda" else None
    out["second_reference"] = {"base_gib": base_gib, "free_gib": free_gib}
    rows.append({"phase": "reference", "what": "the same forward with the adapter disabled (--ref_from_actor)"
                 + (f"; a second bf16 copy of the base ({base_gib:.1f} GiB) beside {free_gib:.1f} GiB free was not "
                    "built" if free_gib is not None else "")} | measure(reference, device))

    loss_fn = PolicyLoss(clip_eps_low=args.eps_clip_low_high[0], clip_eps_high=args.eps_clip_low_high[1],
                         dual_clip=args.dual_clip, policy_loss_type=args.policy_loss_type,
                         enable_vllm_is_correction=args.enable_vllm_is_correction,
                         vllm_is_truncated_threshold=args.vllm_is_truncated_threshold,
                         vllm_is_correction_type=args.vllm_is_correction_type)
    adv = torch.randn(act.shape, generator=torch.Generator().manual_seed(1)).to(device)
    parts: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "optimizer_s": []}

    def train_step() -> float:
        actor.train()

        def fwd():
            lp, output = actor(seq, act, attention_mask=att, return_output=True, return_entropy=True)
            loss = loss_fn(lp, old, adv, action_mask=act, rollout_log_probs=old)[0]
            if getattr(output, "aux_loss", None) is not None:
                loss = loss + output.aux_loss * args.aux_loss_coef
            return loss

        loss, f_s = event_timed(fwd, device)
        _, b_s = event_timed(lambda: strategy.backward(loss, actor, optim), device)
        _, o_s = event_timed(lambda: strategy.optimizer_step(optim, actor, sched, name="actor"), device)
        for k, v in zip(parts, (f_s, b_s, o_s), strict=True):
            parts[k].append(v)
        return float(loss.detach())

    row = {"phase": "train", "what": "forward, backward with the checkpoint recompute, optimizer step"}
    row |= measure(train_step, device)
    row |= {k: min(v[1:]) for k, v in parts.items()}  # the warm-up's parts left out
    rows.append(row)
    out["loss_finite"] = math.isfinite(train_step())
    norm = engine.get_global_grad_norm()  # the LoRA gradients' norm at the last step: 0 would mean no learning
    out["grad_norm"] = float(norm) if norm is not None else None
    engine.destroy()  # the engine's hooks and buffers; the model goes with this frame
    torch.distributed.destroy_process_group()
    return out


# ---------------------------------------------------------------- the plan's and the model's figures beside them


def check_shape_plan(shape: ph.CheckShape, layers: int):
    """The memory plan's Shape for the measured model (gpt-oss-20b at full width and depth, or the tiny one)."""
    from rft.plan.memory_plan import SHAPES, shape_from_config

    s20 = SHAPES["gpt-oss-20b"]
    if shape.hidden == s20.hidden and layers == s20.layers:
        return s20
    return shape_from_config(ph.gpt_oss_config(shape, layers).to_dict(), "measured")


def beside_model(shape: ph.CheckShape, layers: int, rows: list[dict]) -> dict:
    """The step-time model's seconds for each measured phase at the same tokens (no ZeRO-3 gather: one rank), the
    memory plan's activation line, and the device figures the measurements imply."""
    from rft.plan import step_time as st
    from rft.plan.memory_plan import activation_lines, recipe_flags

    plan_shape = check_shape_plan(shape, layers)
    f = st.load_figures(None)
    fwd_flops = sum(st.forward_flops(plan_shape, shape.tokens * shape.micro_batch))
    train_flops = st.train_flops(plan_shape, shape.tokens * shape.micro_batch, True)
    model = {"old_logprob": st.compute_s(fwd_flops, f), "reference": st.compute_s(fwd_flops, f),
             "train": st.compute_s(train_flops, f)}
    argv = ["--pretrain", "openai/gpt-oss-20b", *ph.RECIPES["gpt-oss-20b"], "--prompt_max_len", str(shape.prompt_len),
            "--generate_max_len", str(shape.gen_len), "--micro_train_batch_size", str(shape.micro_batch),
            "--gradient_checkpointing"]
    activations = sum(x.gib for x in activation_lines(plan_shape, recipe_flags(argv)))
    by = {r["phase"]: r for r in rows}
    peak = f["peak_bf16_flops"]
    implied = {}
    if "train" in by:
        implied["actor_mfu"] = train_flops / (peak * by["train"]["s"])
    if "old_logprob" in by:
        implied["forward_mfu"] = fwd_flops / (peak * by["old_logprob"]["s"])
    return {"model_s": model, "plan_activations_gib": activations, "flops": {"forward": fwd_flops,
            "train": train_flops}, "peak_bf16_flops": peak, "figures": implied, "shape": plan_shape.name}


# ---------------------------------------------------------------- attention paths at length


class RouterCapture:
    """The top-k expert indices of every router call of a model, in call order."""

    def __init__(self, model: torch.nn.Module):
        self.indices: list[torch.Tensor] = []
        self.handles = [m.register_forward_hook(self._hook) for m in model.modules()
                        if type(m).__name__ == "GptOssTopKRouter"]

    def _hook(self, _module, _inputs, output) -> None:
        self.indices.append(output[1].detach().sort(dim=-1).values.cpu())

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def forward_logprobs(model, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """fp32 log-probs of ids[:, 1:] and each layer's routed experts, no grad."""
    cap = RouterCapture(model)
    try:
        lp = ph.token_logprobs(model, ids)
    finally:
        cap.close()
    return lp.cpu(), cap.indices


def attention_paths(shape: ph.CheckShape, layers: int, lengths: tuple[int, ...], device: torch.device,
                    out: dict, fits: Callable[[float], bool]) -> dict:
    """Each path at each length (path by path, so a slow path costs only its own rows) against the same weights in
    fp32 (eager, fp32 throughout), whose log-probs and routed experts are computed once per length."""
    import copy

    from rft.gptoss import attention
    from rft.gptoss.moe import route_experts_in_eval

    model = ph.build_model(shape, layers, device)
    route_experts_in_eval(model)
    model.eval()
    ref = copy.deepcopy(model).float()
    ref.config._attn_implementation = "eager"
    inputs = {n: torch.randint(0, shape.vocab, (1, n), generator=torch.Generator().manual_seed(n)).to(device)
              for n in lengths}
    refs = {n: forward_logprobs(ref, ids) for n, ids in inputs.items()}
    del ref
    ph.free(device)
    out["layers"], out["reference"] = layers, "the same weights in fp32, eager attention, fp32 router"
    rows, notes = out.setdefault("rows", []), out.setdefault("notes", [])
    for name in attention.PATHS:  # eager first: the rft paths then give the routers their fp32 forward
        if name != "eager" and not attention.router_modules(model)[0].__dict__.get(attention.FP32_ROUTER):
            attention.fp32_routers(model)
        model.config._attn_implementation = name
        for n, ids in inputs.items():
            done = [r for r in rows if r["path"] == name]
            if done and not fits(3 * done[-1]["s"] * (n / done[-1]["tokens"]) ** 2):
                notes.append(f"{name} at {n} tokens skipped: would not fit the budget")
                continue
            try:
                m = measure(lambda x=ids: ph.token_logprobs(model, x), device, repeats=1)
                lp, experts = forward_logprobs(model, ids)
            except Exception as e:  # noqa: BLE001  (a path that fails at a length is a finding; the rest run)
                notes.append(f"{name} at {n} tokens: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                ph.free(device)
                continue
            ref_lp, ref_experts = refs[n]
            gap = (lp - ref_lp).abs()
            flips = [(a != b).any(dim=-1) for a, b in zip(experts, ref_experts, strict=True)]
            rows.append({"path": name, "tokens": n, "s": m["s"], "warmup_s": m["warmup_s"],
                         "peak_gib": m["peak_gib"], "added_gib": m["added_gib"], "memory": m["memory"],
                         "mean_abs_dlogp": float(gap.mean()), "p99_abs_dlogp": float(gap.quantile(0.99)),
                         "max_abs_dlogp": float(gap.max()),
                         "expert_flip_share": float(torch.stack(flips).float().mean()),
                         "expert_flip_share_last_layer": float(flips[-1].float().mean())})
            ph.free(device)
    model.config._attn_implementation = "eager"
    return out


def stub_path() -> Path:
    """The import-only flash_attn OpenRLHF's modules import (packing is off: never called)."""
    return REPO_ROOT / "rft" / "cpu" / "site"
