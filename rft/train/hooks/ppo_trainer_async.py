"""Hooks of `openrlhf/trainer/ppo_trainer_async.py`: waits with deadlines (the vLLM lock: liveness only), the
prompt filter's passes, the batch's counters and rollout timing, and the built-in eval under the vLLM lock."""

from __future__ import annotations

import time
from typing import Any

from rft.train.async_loop import batch_states, budget_spent, eval_due, eval_kwargs, take_step_metrics
from rft.train.metrics import eval_at_start
from rft.train.prompt_filter import STATE_KEY, passes, planned_rollout_steps
from rft.train.step_timer import ROLLOUT_KEY, account_rollout
from rft.train.waits import NO_DEADLINE, DeadlineRay
from rft.train.waits import get as wait

__all__ = ["NO_DEADLINE", "ROLLOUT_KEY", "STATE_KEY", "account_rollout", "batch_client_states", "budget_spent",
           "eval_at_start", "eval_due", "evaluate_locked", "init_eval", "pass_plan", "passes", "ray",
           "take_step_metrics"]

# the vLLM lock is held for a whole generation or sync: waits on it check liveness only
ray = DeadlineRay({"GenerateSamplesActor.fit": NO_DEADLINE, "TrainingActor.broadcast_to_vllm": NO_DEADLINE}, roles={
    "GenerateSamplesActor.fit": "vLLM lock",
    "TrainingActor.broadcast_to_vllm": "vLLM lock",
    "PPOTrainerAsync.fit": "generator and trainer actors",
    "PPOTrainerAsync.get_max_steps": "generator actor: get_max_steps",
})


def pass_plan(generator: Any) -> tuple[Any, int]:
    """(prompt filter, rollout-step budget): as in the sync trainer, with filtering or the prompt history the
    sampler passes over the pool until it has produced the rollout steps the LR schedule was built for."""
    args = generator.args
    budget = planned_rollout_steps(len(generator.prompts_dataloader), args.rollout_batch_size, args.num_episodes)
    return generator.samples_generator.prompt_filter, budget


def batch_client_states(generator: Any, episode: int, total_consumed_prompts: int, rollout_start: float) -> dict:
    """The states a rollout batch carries to the trainer: the loader's and the filter's states, the batch's counters
    (rft.train.async_loop) and its tokens and rollout wall time (ROLLOUT_KEY, popped before the checkpoint)."""
    states = batch_states(episode, total_consumed_prompts, generator.prompts_dataloader.state_dict(),
                          generator.samples_generator.prompt_filter, generator.args.rollout_batch_size)
    states[ROLLOUT_KEY] = {**generator.samples_generator.last_rollout, "wall_s": time.monotonic() - rollout_start}
    return states


def init_eval(trainer: Any, strategy: Any, tokenizer: Any, vllm_engines: Any, generate_kwargs: dict) -> None:
    """The trainer's built-in eval, as in the sync trainer: its own eval loader and generator on the same engines,
    run under the vLLM lock right after a step's weight sync."""
    from openrlhf.trainer.ppo_trainer import prepare_datasets
    from openrlhf.trainer.ppo_utils.experience_maker import SamplesGenerator

    _, trainer.eval_dataloader, _ = prepare_datasets(strategy, tokenizer)
    trainer.generate_kwargs = generate_kwargs
    trainer.samples_generator = SamplesGenerator(strategy=strategy, prompts_dataloader=None,
                                                 eval_dataloader=trainer.eval_dataloader, tokenizer=tokenizer,
                                                 vllm_engines=vllm_engines)


def evaluate_locked(trainer: Any, global_step: int) -> None:
    """The built-in eval holding the vLLM lock, so it scores the weights of this step's sync, not a later one;
    waiting for a generation to end counts as time_generate_s."""
    with trainer.step_timer.phase("generate"):
        wait(trainer.vllm_lock.acquire.remote(), "vLLM lock (acquire, held by the rollout)", NO_DEADLINE)
    try:
        with trainer.step_timer.phase("eval"):
            trainer.evaluate(global_step, **eval_kwargs(trainer.generate_kwargs, trainer.args))
    finally:
        wait(trainer.vllm_lock.release.remote(), "vLLM lock (release)")
