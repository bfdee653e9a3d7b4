"""rft's hooks in OpenRLHF 0.9.3's async trainer (`--async_train`), called by ppo_trainer_async.patch: the sampler's side (the
prompt filter's step budget and state, carried to the trainer with each batch) and the trainer's (the built-in eval).

In the async trainer the sampler (`GenerateSamplesActor`) owns the prompt loader and the prompt filter, and the
trainer (`TrainingActor`) owns the steps, the metrics and the checkpoints; a batch crosses the queue with the
`client_states` the checkpoint will keep, so the filter's state and its step counters travel in them.
"""

from __future__ import annotations

from typing import Any

from rft.train.prompt_filter import STATE_KEY, PromptFilter

STEP_METRICS_KEY = "rft_step_metrics"  # the sampler's per-batch counters, popped by the trainer into the step's status


def batch_states(
    episode: int, consumed: int, loader_state: dict, prompt_filter: PromptFilter, accepted_prompts: int
) -> dict[str, Any]:
    """The client_states a batch carries to the trainer: what the sync trainer checkpoints (episode, prompts
    consumed, the loader, the prompt filter) and the filter's counters for this batch (then reset)."""
    return {
        "episode": episode,
        "total_consumed_prompts": consumed,
        "data_loader_state_dict": loader_state,
        STATE_KEY: prompt_filter.state_dict(),
        STEP_METRICS_KEY: prompt_filter.step_metrics(accepted_prompts),
    }


def take_step_metrics(client_states: dict[str, Any]) -> dict[str, float]:
    """The batch's filter counters, removed from the states the checkpoint keeps."""
    return client_states.pop(STEP_METRICS_KEY, None) or {}


def budget_spent(prompt_filter: PromptFilter, produced: int, budget: int) -> bool:
    """True once the sampler has produced the rollout steps the LR schedule was built for (filter or history on;
    without them 0.9.3's episodes bound the run, as in the sync trainer)."""
    return prompt_filter.active and produced >= budget


def eval_kwargs(generate_kwargs: dict[str, Any], args: Any) -> dict[str, Any]:
    """The built-in eval's generation settings: the rollout's, with the eval temperature and samples per prompt."""
    out = dict(generate_kwargs)
    out["temperature"] = args.eval_temperature
    out["n_samples_per_prompt"] = args.eval_n_samples_per_prompt
    return out


def eval_due(global_step: int, eval_steps: float, has_eval_data: bool) -> bool:
    """The sync trainer's rule: the built-in eval after every `eval_steps`-th step (eval_steps inf: never)."""
    return bool(has_eval_data) and eval_steps != float("inf") and global_step % eval_steps == 0
