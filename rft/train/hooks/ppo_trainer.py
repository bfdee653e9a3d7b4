"""Hooks of `openrlhf/trainer/ppo_trainer.py`: waits with deadlines, the seeded (or in-order) prompt loader, the
step timer, metrics and sample files, the prompt filter's passes, the eval before the first step."""

from __future__ import annotations

from typing import Any

from torchdata.stateful_dataloader.sampler import RandomSampler

from rft.train.async_loop import eval_kwargs
from rft.train.metrics import append_metrics, eval_at_start, write_samples
from rft.train.prompt_filter import STATE_KEY, passes, planned_rollout_steps
from rft.train.seeds import prompt_generator
from rft.train.step_timer import StepTimer, account_rollout, batch_counts
from rft.train.waits import DeadlineRay

__all__ = ["STATE_KEY", "StepTimer", "account_rollout", "append_metrics", "batch_counts", "evaluate_at_start",
           "passes", "planned_rollout_steps", "prompts_loader", "ray", "sync_stats", "write_samples"]

ray = DeadlineRay(roles={
    "BasePPOTrainer.train_step": "actor/critic groups: append",
    "BasePPOTrainer.ppo_train": "actor/critic groups: fit",
    "BasePPOTrainer.ppo_train.<locals>._run_sleep": "model group: reload_states, fit, offload_states",
    "BasePPOTrainer.broadcast_to_vllm": "actor group: broadcast_to_vllm",
    "BasePPOTrainer.save_logs_and_checkpoints": "actor/critic groups: save_checkpoint",
    "BasePPOTrainer.init_checkpoint_states": "actor group: get_checkpoint_states",
})


def prompts_loader(strategy: Any, dataset: Any) -> Any:
    """The training prompts' loader: shuffled in the order --seed gives (0.9.3's sampler drew its seed from the
    process RNG; rft.train.seeds), or in the file's order with --prompt_data_in_order (a curriculum)."""
    shuffle = not getattr(strategy.args, "prompt_data_in_order", False)
    sampler = RandomSampler(dataset, generator=prompt_generator(strategy.args.seed)) if shuffle else None
    return strategy.setup_dataloader(dataset, 1, True, shuffle, dataset.collate_fn, sampler=sampler)


def evaluate_at_start(trainer: Any, global_step: int) -> None:
    """The built-in eval before the first step of a fresh run (global_step 0): the base model's score, from which
    the probe's trend and the early-stop rule start ($RFT_EVAL_AT_START=0 skips it)."""
    args = trainer.args
    if global_step == 0 and trainer.eval_dataloader and args.eval_steps != float("inf") and eval_at_start():
        with trainer.step_timer.phase("eval"):
            trainer.evaluate(0, **eval_kwargs(trainer.generate_kwargs, args), seed_step=("eval", 0))


def sync_stats(results: list | None) -> dict | None:
    """Rank 0's weight-sync statistics (the LoRA object-store sync returns a dict), if any."""
    return results[0] if results and isinstance(results[0], dict) else None
