"""rft's hooks in the async trainer (rft/train/async_loop.py): what a batch carries from the sampler to the trainer,
the sampler's step budget, and the built-in eval's schedule and settings."""

from __future__ import annotations

from types import SimpleNamespace

from rft.train.async_loop import (
    STEP_METRICS_KEY,
    batch_states,
    budget_spent,
    eval_due,
    eval_kwargs,
    take_step_metrics,
)
from rft.train.prompt_filter import STATE_KEY, PromptFilter


def test_a_batch_carries_the_checkpoint_states_and_the_filter_counters_once():
    pf = PromptFilter(history=True)
    pf.records["k"] = [2, 3, 1]
    pf.skipped, pf.rolled_out, pf.passes = 3, 8, 1
    states = batch_states(1, 40, {"pos": 5}, pf, accepted_prompts=8)
    assert states["episode"] == 1 and states["total_consumed_prompts"] == 40
    assert states["data_loader_state_dict"] == {"pos": 5}
    assert states[STATE_KEY] == {"records": {"k": [2, 3, 1]}, "passes": 1}
    metrics = take_step_metrics(states)
    assert metrics["prompts_skipped"] == 3 and metrics["prompts_per_accepted"] == 1.0 and metrics["pool_pass"] == 1
    assert STEP_METRICS_KEY not in states  # the checkpoint keeps the states, not the counters
    assert take_step_metrics(states) == {}
    # the counters were reset: the next batch counts afresh
    assert take_step_metrics(batch_states(1, 48, {}, pf, 8))["prompts_skipped"] == 0


def test_the_budget_bounds_the_sampler_only_with_the_filter_or_history():
    assert not budget_spent(PromptFilter(), produced=40, budget=32)  # 0.9.3's episodes bound the run
    on = PromptFilter(history=True)
    assert not budget_spent(on, produced=31, budget=32)
    assert budget_spent(on, produced=32, budget=32)


def test_eval_schedule_and_settings_are_the_sync_trainers():
    assert eval_due(0, 8, True) and eval_due(16, 8, True) and not eval_due(12, 8, True)
    assert not eval_due(8, 8, False) and not eval_due(8, float("inf"), True)
    args = SimpleNamespace(eval_temperature=0.6, eval_n_samples_per_prompt=4)
    rollout = {"temperature": 1.0, "n_samples_per_prompt": 8, "max_new_tokens": 8}
    assert eval_kwargs(rollout, args) == {"temperature": 0.6, "n_samples_per_prompt": 4, "max_new_tokens": 8}
    assert rollout["temperature"] == 1.0  # the rollout's settings are untouched
