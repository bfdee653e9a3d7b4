"""Hooks of `openrlhf/utils/agent.py`: the single-turn executor's sample timing and its score fallback."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

from rft.train.step_timer import ROLLOUT_KEY


def score_of(rewards_info: Mapping) -> Any:
    """The sample's score: `scores` when given, else `rewards` (OpenRLHF #1219: a score of 0 is a score)."""
    return rewards_info.get("rewards") if rewards_info.get("scores") is None else rewards_info.get("scores")


class _TimedEngine:
    """An engine whose `generate` records its (start, end) wall interval in `timing["generate"]`."""

    def __init__(self, engine: Any, timing: dict):
        self._engine, self._timing = engine, timing

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            return await self._engine.generate(*args, **kwargs)
        finally:
            self._timing["generate"] = (start, time.time())


def timed_execute(execute: Callable) -> Callable:
    """Wrap `SingleTurnAgentExecutor.execute`: its output carries `ROLLOUT_KEY`: the generation interval and, with
    reward endpoints, the reward interval (from the generation's end to the sample's return), for time_generate_s /
    time_reward_s (rft.train.step_timer)."""

    @functools.wraps(execute)
    async def wrapper(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine):
        timing: dict = {}
        output = await execute(self, prompt, label, sampling_params, max_length, hf_tokenizer,
                               _TimedEngine(llm_engine, timing))
        if self.reward_endpoints and "generate" in timing:
            timing["reward"] = (timing["generate"][1], time.time())
        output[ROLLOUT_KEY] = timing
        return output

    return wrapper
