"""Hooks of `openrlhf/trainer/ppo_utils/experience_maker.py`: waits with deadlines, the prompt filter, request
seeds, rollout timing, reward sanitising and the batch's reward statistics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rft.train.engine_calls import ProgressWatch, engine_names, gather, next_in_order, ref_key, silent_engines
from rft.train.group_waste import group_waste_of
from rft.train.prompt_filter import PromptFilter
from rft.train.robust_rewards import (
    batch_reward_stats_of,
    repair_rollout_log_probs,
    sanitize_extra_logs,
    sanitize_reward,
    unify_info_keys,
)
from rft.train.seeds import group_seeds
from rft.train.shared_tokenizer import shared as shared_tokenizer
from rft.train.step_timer import RolloutLog, StepTimer
from rft.train.waits import DeadlineRay

__all__ = ["ProgressWatch", "PromptFilter", "RolloutLog", "StepTimer", "engine_names", "gather", "group_seeds",
           "next_in_order", "ray", "ref_key", "repair_rollout_log_probs", "shared_tokenizer", "silent_engines",
           "unify_info_keys", "sanitized_rewards", "add_extra_logs", "reward_stats", "init_generator", "init_maker"]

ray = DeadlineRay(roles={
    "SamplesGenerator._generate_vllm": "vLLM engine: a rollout already answered",
    "RemoteExperienceMaker.make_experience": "reward/actor/critic/reference groups: the batch's forward passes",
})


def sanitized_rewards(args: Any, reward: Any, score: Any) -> tuple[Any, Any, bool]:
    """(reward, score, defaulted): rewards computed during rollout (reward function / remote RM / agent) must be
    numbers; a missing or non-numeric one becomes 0.0 and is counted (`defaulted`) instead of crashing or dropping
    the sample. Without those, None means "score with the reward model group" and is left alone."""
    rollout_rewards = bool(getattr(args, "remote_rm_url", None) or getattr(args, "agent_func_path", None))
    defaulted = False
    if reward is not None or rollout_rewards:
        reward, ok = sanitize_reward(reward)
        defaulted = not ok
    if score is not None or rollout_rewards:
        score, _ = sanitize_reward(score, default=reward if reward is not None else 0.0)
    return reward, score, defaulted


def add_extra_logs(info: dict, response: Mapping, reward_defaulted: bool) -> None:
    """The response's extra logs into `info` as float tensors (non-numeric ones 0.0, counted), plus the counters
    reward_defaulted and extra_logs_defaulted: the sample is never lost."""
    extra_logs, n_replaced = sanitize_extra_logs(response.get("extra_logs", {}))
    for key, value in extra_logs.items():
        info[key] = torch.tensor([value], dtype=torch.float32)
    info["reward_defaulted"] = torch.tensor([float(reward_defaulted)])
    info["extra_logs_defaulted"] = torch.tensor([float(n_replaced)])


def reward_stats(experiences: list, n_samples_per_prompt: int) -> dict:
    """The batch's reward distribution before length penalties and advantage shaping (wrong answers above their
    group's mean count as "high reward"; the judge's step cost and failure rate), plus the groups whose rewards are
    all equal and the rollout tokens they cost."""
    return {**batch_reward_stats_of(experiences, n_samples_per_prompt),
            **group_waste_of(experiences, n_samples_per_prompt)}


def init_generator(generator: Any) -> None:
    """The SamplesGenerator's rft state: its prompt filter (online filtering by score or correctness, the prompt
    history, their counters) and the last rollout batch's tokens, wall time and reward-only seconds."""
    generator.prompt_filter = PromptFilter.from_args(generator.args)
    generator.rollout_log = RolloutLog()
    generator.last_rollout = {}


def init_maker(maker: Any, step_timer: StepTimer | None) -> None:
    """The RemoteExperienceMaker's rft state: the last batch's reward statistics (read by train_step) and the
    trainer's step timer (waits on the reward model count as time_reward_s)."""
    maker.reward_stats = {}
    maker.step_timer = step_timer or StepTimer()
