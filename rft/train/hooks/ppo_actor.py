"""Hooks of `openrlhf/trainer/ray/ppo_actor.py` (ppo_actor.patch): the actor trainer's diagnostics, the
`--loss_aggregation` factors, seeded micro-batch order, deadlines on engine waits and the LoRA-only weight sync."""

from __future__ import annotations

import time
from typing import Any

import ray as _ray
import torch

from rft.train import waits
from rft.train.allgather_probe import allgather_probe
from rft.train.loss_aggregation import aggregate, aggregation_in_force, window_loss_scales
from rft.train.loss_diag import StepDiagnostics
from rft.train.metrics import SPIKE_GRAD_NORM, append_spike, prompt_token_hashes
from rft.train.mismatch import MismatchStats
from rft.train.reference import adapter_disabled
from rft.train.seeds import lora_init_seed
from rft.train.seeds import shuffle_generator as seeded_generator
from rft.train.token_stats import TokenStats

__all__ = ["lora_init_seed", "ray"]


class EngineWaitRay(waits.DeadlineRay):
    """The `ray` module as ppo_actor.py sees it: `get` waits with the engines' deadline (`--vllm_call_timeout`)
    and a liveness check (rft.train.waits); every other attribute is Ray's own."""

    timeout: float | None = None  # set by init_trainer from the trainer's args

    def get(self, refs: Any) -> Any:
        return waits.get(refs, "vLLM engines (weight sync)", self.timeout, setting="--vllm_call_timeout")


ray = EngineWaitRay()


# --- ActorPPOTrainer.__init__ ---------------------------------------------------------------------------------
def init_trainer(trainer: Any) -> None:
    """Diagnostics state, the LoRA sync mode (`--vllm_sync_lora_via_object_store`: no CUDA IPC, no NCCL group;
    `--vllm_sync_lora_native`) and the engines' deadline."""
    args = trainer.args
    reset_call(trainer, None)
    trainer.lora_via_object_store = bool(getattr(args, "vllm_sync_lora_via_object_store", False))
    trainer.lora_native = bool(getattr(args, "vllm_sync_lora_native", False))
    trainer._rft_sync_version = 0
    if trainer.lora_via_object_store:
        trainer.use_cuda_ipc = False
    ray.timeout = waits.engine_timeout(trainer.strategy.args)


def creates_update_group(trainer: Any) -> bool:
    """0.9.3's test for the NCCL weight-sync group (rank 0, engines, no CUDA IPC), false for LoRA via the object
    store; when true, pending CUDA work is finished first (communicator init hangs otherwise)."""
    wanted = (trainer.vllm_engines is not None and not trainer.use_cuda_ipc and not trainer.lora_via_object_store
              and torch.distributed.get_rank() == 0)
    if wanted:
        torch.cuda.synchronize()
    return wanted


# --- ppo_train / training_step --------------------------------------------------------------------------------
def reset_call(trainer: Any, global_step: int | None) -> None:
    """Fresh per-call statistics: ratio diagnostics and grad norms, the spike window, tokens, the mismatch."""
    args = trainer.args
    trainer._rft_diag, trainer._rft_window, trainer._rft_window_hashes = StepDiagnostics(), StepDiagnostics(), []
    trainer._rft_global_step = global_step
    trainer._rft_tokens = TokenStats()
    trainer._rft_mismatch = MismatchStats(args.vllm_is_correction_type, args.vllm_is_truncated_threshold)
    trainer._rft_loss_scales = []


def ppo_train(trainer: Any, kl_ctl: float, global_step: int | None = None) -> dict[str, float]:
    """`trainer.ppo_train(kl_ctl)` for global step `global_step`, its status extended with the diagnostics reduced
    across ranks and micro-batches (maxima as maxima, token statistics over every token, the mismatch)."""
    reset_call(trainer, global_step)
    status = trainer.ppo_train(kl_ctl)
    reduce = trainer.strategy.all_reduce
    status.update(trainer._rft_diag.reduce(reduce))
    status.update(trainer._rft_tokens.reduce(reduce))
    status.update(trainer._rft_mismatch.reduce(reduce))
    return status


def shuffle_generator(trainer: Any) -> torch.Generator:
    """The micro-batch order from (--seed, global step), not the process RNG a resumed process starts afresh."""
    return seeded_generator(trainer.args.seed, getattr(trainer, "_rft_global_step", None) or 0)


def epoch_batches(trainer: Any, dataloader: Any) -> Any:
    """The epoch's micro-batches, and each one's factor in its optimizer step's loss (rft.train.loss_aggregation):
    none for 0.9.3's per-micro-batch mean, which iterates the loader as it is."""
    aggregation = aggregation_in_force(trainer.args)
    batches = dataloader if aggregation == "microbatch_mean" else list(dataloader)
    trainer._rft_loss_scales = window_loss_scales(
        [e.action_mask for e in batches] if aggregation != "microbatch_mean" else [],
        trainer.actor.model.gradient_accumulation_steps(),
        trainer.strategy.world_size,
        aggregation,
        trainer.args.generate_max_len,
        lambda t: trainer.strategy.all_reduce(t, "sum"),
    )
    return batches


def training_step(trainer: Any, experience: Any, kl_ctl: float, step: int) -> dict[str, float]:
    """`trainer.training_step` with this micro-batch's loss factor set, its ratio diagnostics, prompts and
    trainer/rollout gap recorded, and the grad norm read after an optimizer step."""
    scales = getattr(trainer, "_rft_loss_scales", None) or []
    trainer._rft_step_scale = scales[step] if step < len(scales) else None
    trainer.actor_loss_fn.token_sum_scale = trainer._rft_step_scale
    steps_before = getattr(trainer.actor.model, "global_steps", None)
    status = trainer.training_step(experience, kl_ctl, step)
    ratio_stats = dict(getattr(trainer.actor_loss_fn, "ratio_stats", {}) or {})
    trainer._rft_diag.add_ratio_stats(ratio_stats)
    trainer._rft_window.add_ratio_stats(ratio_stats)
    trainer._rft_window_hashes.extend(
        prompt_token_hashes(experience.sequences, experience.attention_mask, experience.action_mask)
    )
    trainer._rft_mismatch.add(experience.action_log_probs, experience.rollout_log_probs, experience.action_mask)
    if steps_before is not None and trainer.actor.model.global_steps != steps_before:
        on_optimizer_step(trainer)
    return status


def step_kl_loss(trainer: Any, kl: torch.Tensor, action_mask: torch.Tensor, kl_loss: torch.Tensor) -> torch.Tensor:
    """The KL loss combined over the optimizer step like the policy loss (--loss_aggregation), else `kl_loss`."""
    scale = getattr(trainer, "_rft_step_scale", None)
    return kl_loss if scale is None else aggregate(kl, action_mask, scale)


def record_tokens(trainer: Any, experience: Any, output: Any) -> None:
    """This micro-batch's advantages and per-token entropy (entropy only when OpenRLHF computes it)."""
    mask = experience.action_mask
    entropy = output.entropy[:, -mask.shape[1]:] if trainer.args.entropy_loss_coef is not None else None
    trainer._rft_tokens.add(experience.advantages, mask, entropy)


def on_optimizer_step(trainer: Any) -> None:
    """Record the grad norm; above SPIKE_GRAD_NORM, rank 0 logs the window (all ranks' prompts)."""
    grad_norm = trainer.actor.model.get_global_grad_norm()
    grad_norm = float(grad_norm) if grad_norm is not None else None
    trainer._rft_diag.add_grad_norm(grad_norm)
    # grad_norm is the global norm (same on every rank), so every rank takes the same branch here
    if grad_norm is not None and grad_norm > SPIKE_GRAD_NORM:
        hashes, window = [trainer._rft_window_hashes], trainer._rft_window.local()
        if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            hashes = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(hashes, trainer._rft_window_hashes)
            window = trainer._rft_window.reduce(trainer.strategy.all_reduce)  # every rank's window
        if trainer.strategy.is_rank_0():
            append_spike({
                "global_step": trainer._rft_global_step,
                "optimizer_step": int(trainer.actor.model.global_steps),
                "grad_norm": grad_norm,
                **window,
                "prompt_hashes": [h for rank_hashes in hashes for h in (rank_hashes or [])],
            })
    trainer._rft_window = StepDiagnostics()
    trainer._rft_window_hashes = []


# --- PolicyModelActor -----------------------------------------------------------------------------------------
def forward_reference(self: Any, sequences: Any, action_mask: Any = None, attention_mask: Any = None,
                      packed_seq_lens: Any = None) -> torch.Tensor:
    """`PolicyModelActor.forward_reference` (--ref_from_actor): the actor's log-probs with its LoRA adapter off."""
    with adapter_disabled(self.actor.model):
        return self.forward(sequences, action_mask, attention_mask)


# --- LoRA weight sync through the Ray object store ------------------------------------------------------------
def sync_lora(trainer: Any) -> dict[str, float] | None:
    """Ship only the LoRA adapter (A, B, scaling) to every vLLM engine via the Ray object store.

    All ranks gather the lora_A/lora_B parameters (collective under ZeRO-3); rank 0 packs them, puts the payload in
    the object store once, has every engine merge W0 + scaling * B @ A (or, with --vllm_sync_lora_native, load it
    as its LoRA adapter) and checks that every worker holds exactly the modules sent (rft.train.lora_payload).
    """
    from openrlhf.trainer.ray import ppo_actor as actor_module

    from rft.train.lora_payload import LoraSyncError, lora_parameters, raise_if_failed_on_any_rank

    start = time.time()
    args = trainer.strategy.args
    probe_on = getattr(args, "lora_sync_probe", False)
    probe = probe_on and torch.distributed.get_rank() == 0
    if getattr(args, "vllm_sync_lora_skip", False):
        # ablation: the engines keep the base weights (the probe, if asked, shows they did)
        return {"lora_sync_skipped": 1.0, **(probe_skipped(trainer) if probe else {})}
    model = trainer.actor.model.module
    named = lora_parameters(model)
    if not named:
        raise LoraSyncError("--vllm_sync_lora_via_object_store: the actor has no LoRA parameters (--lora_rank 0?)")
    trainer._rft_sync_version += 1
    # every rank reports its outcome in one all-gather, so a failure on any rank (rank 0 talks to the engines; every
    # rank gathers) stops every rank at once with that rank's message instead of a collective's timeout
    failure = None
    stats = None
    try:
        # --lora_sync_probe: the trainer scores the probe too (a forward of every rank), the engines before the
        # first sync (twice: the run-to-run floor) and after each; rft.train.sync_probe judges
        trainer_now = trainer_probe(trainer, model) if probe_on else None
        # --lora_sync_probe: one all-gather of a ZeRO-3-sized shard across the actor ranks, timed, once
        gathered = allgather_probe(trainer, model, args) if probe_on else {}
        if probe and getattr(trainer, "_rft_probe_base", None) is None:
            engine_probe(trainer)  # before the first sync: the base model's log-probs and the floor
        stats = send_lora(trainer, named, model, start)
        if probe:
            stats.update(probe_after(trainer, trainer_now))
            stats.update(gathered)
    except Exception as e:  # noqa: BLE001 - re-raised on every rank below
        failure = e
    raise_if_failed_on_any_rank(failure)
    actor_module.torch_dist_barrier_and_cuda_sync()
    return stats


def engine_probe(trainer: Any) -> list[list[float]]:
    """--lora_sync_probe: the per-token log-probs of a fixed probe in every engine; the first call scores it twice
    with nothing changed (the run-to-run floor) and keeps it as the base."""
    from vllm import SamplingParams

    from rft.train.engine_calls import engine_names, gather
    from rft.train.sync_probe import probe_token_ids, prompt_logprobs, run_to_run_floor

    args = trainer.strategy.args
    if getattr(trainer, "_rft_probe_ids", None) is None:
        trainer._rft_probe_ids = probe_token_ids(args.pretrain)
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)

    def score() -> list[list[float]]:
        refs = [engine.generate.remote(trainer._rft_probe_ids, params) for engine in trainer.vllm_engines]
        outs = gather(refs, engine_names(trainer.vllm_engines), "generate (sync probe)",
                      getattr(args, "vllm_call_timeout", None))
        return [prompt_logprobs(o) for o in outs]

    now = score()
    if getattr(trainer, "_rft_probe_base", None) is None:
        trainer._rft_probe_base = now
        trainer._rft_probe_floor = run_to_run_floor(now, score())
    return now


def trainer_probe(trainer: Any, model: Any) -> list[float]:
    """--lora_sync_probe: the trainer's per-token log-probs of the probe now; the first call also keeps the base
    model's (adapter disabled). Every rank runs it (a ZeRO-3 forward)."""
    from rft.train.sync_probe import probe_token_ids, trainer_logprobs

    if getattr(trainer, "_rft_probe_ids", None) is None:
        trainer._rft_probe_ids = probe_token_ids(trainer.strategy.args.pretrain)
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    training = model.training
    model.eval()  # no LoRA dropout in the probe (the engine has none)
    try:
        if getattr(trainer, "_rft_trainer_base", None) is None:
            with model.disable_adapter():
                trainer._rft_trainer_base = trainer_logprobs(trainer.actor.model, trainer._rft_probe_ids, device)
        return trainer_logprobs(trainer.actor.model, trainer._rft_probe_ids, device)
    finally:
        model.train(training)


def probe_after(trainer: Any, trainer_now: list[float]) -> dict[str, float]:
    """The probe's metrics after a sync (rft.train.sync_probe.probe_stats) and the recipe-LR figures."""
    from rft.train.sync_probe import kept_share, probe_stats

    reports = getattr(trainer, "_rft_last_reports", None) or []
    stats = probe_stats(trainer._rft_probe_base, engine_probe(trainer), trainer._rft_trainer_base, trainer_now,
                        trainer._rft_probe_floor, kept_share(reports))
    scales = getattr(trainer, "_rft_kept_scales", [1.0])
    if len(scales) > 1:
        stats["lora_sync_recipe_kept"] = kept_share(reports, 1)
        stats["lora_sync_recipe_scale"] = scales[1]
        stats["lora_sync_recipe_lr"] = float(trainer.strategy.args.lora_sync_probe_recipe_lr or 0)
    return stats


def probe_skipped(trainer: Any) -> dict[str, float]:
    """The probe's engine-side metrics when the sync is skipped (ablation)."""
    from rft.train.sync_probe import probe_stats

    base = getattr(trainer, "_rft_probe_base", None) or engine_probe(trainer)
    zeros = [0.0] * len(base[0])
    return probe_stats(base, engine_probe(trainer), zeros, zeros, trainer._rft_probe_floor, 1.0)


def send_lora(trainer: Any, named: list, model: Any, start: float) -> dict[str, float] | None:
    """Gather the adapter (collective), then on rank 0 send it to every engine and check the reports."""
    import deepspeed

    from rft.train.engine_calls import engine_names, gather
    from rft.train.lora_payload import build_payload, check_apply_results, payload_nbytes
    from rft.train.sync_probe import kept_scales

    args = trainer.strategy.args
    payload = None
    with deepspeed.zero.GatheredParameters([p for _, p in named], enabled=args.zero_stage == 3):
        if torch.distributed.get_rank() == 0:
            payload = build_payload(
                [(n, p.data) for n, p in named], model.peft_config["default"], version=trainer._rft_sync_version
            )
            if getattr(args, "lora_sync_probe", False):
                # the workers report how much of the update (and of the recipe LR's smaller one) survives bf16
                trainer._rft_kept_scales = kept_scales(
                    float(getattr(args, "lora_sync_probe_recipe_lr", 0) or 0),
                    float(args.actor_learning_rate),
                    trainer._rft_sync_version,
                )
                payload["kept_scales"] = trainer._rft_kept_scales
    stats = None
    if torch.distributed.get_rank() == 0:
        payload_ref = _ray.put(payload)  # held until every engine has answered
        method = "load_lora_adapter" if trainer.lora_native else "apply_lora_update"
        names, timeout = engine_names(trainer.vllm_engines), getattr(args, "vllm_call_timeout", None)
        refs = [getattr(engine, method).remote(payload_ref) for engine in trainer.vllm_engines]
        reports = check_apply_results(gather(refs, names, method, timeout), payload)
        trainer._rft_last_reports = reports
        if getattr(args, "enable_prefix_caching", False):
            refs = [engine.reset_prefix_cache.remote() for engine in trainer.vllm_engines]
            gather(refs, names, "reset_prefix_cache", timeout)
        del payload_ref
        stats = {
            "lora_sync_seconds": time.time() - start,
            "lora_sync_bytes": float(payload_nbytes(payload)),
            "lora_sync_params": float(sum(r.get("params", 0) for r in reports) / max(len(reports), 1)),
            # every worker applied this many modules (check_apply_results); the trainer holds `expected`
            "lora_sync_modules": float(min(r.get("modules", 0) for r in reports)),
            "lora_sync_expected_modules": float(sum(n.endswith("lora_A.default.weight") for n, _ in named)),
        }
    return stats
