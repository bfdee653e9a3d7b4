"""Where a rollout step's wall time goes: exclusive phase timers, throughput and response-length keys.

The patched trainer opens a phase around each part of a step (`with timer.phase("train"): ...`); a phase
opened inside another is exclusive (the outer phase is not charged while the inner one runs). `lap()` closes
the step: the time since the previous lap is `time_step_s`, each phase's share of it `time_<phase>_s` (0.0
for a phase not entered), and the rest (bookkeeping between phases) is in no phase. Laps tile the run's wall
time: a phase that runs after one metrics line is written (a checkpoint save, the built-in eval) is charged
to the next line. No torch here: the monitor imports the key names.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

PHASES = ("generate", "reward", "logprob", "train", "sync", "eval", "save")
"""The measured phases, in the order of a synchronous step."""

STEP_KEY = "time_step_s"
THROUGHPUT_KEYS = ("tokens_generated_per_s", "tokens_trained_per_s")
LENGTH_KEYS = ("response_len_p50", "response_len_p90", "response_len_max")
ROLLOUT_KEY = "rft_rollout_timing"
"""Where a response (and the async generator's payload) carries its timing; never a metric."""


def phase_key(phase: str) -> str:
    """The metric key of a phase: generate -> time_generate_s."""
    return f"time_{phase}_s"


def phase_of(key: str) -> str:
    """The phase of a metric key: time_generate_s -> generate."""
    return key.removeprefix("time_").removesuffix("_s")


TIME_KEYS = (*(phase_key(p) for p in PHASES), STEP_KEY)
KEYS = (*TIME_KEYS, *THROUGHPUT_KEYS, *LENGTH_KEYS)
"""Every key `StepTimer.lap` writes (KNOWN_KEYS of the metrics file)."""


class StepTimer:
    """Exclusive per-phase wall time of one step at a time, plus the step's token counts."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.restart()

    def restart(self) -> None:
        """Start a fresh step now (the trainer's fit() start): totals and counts to zero."""
        self._start = self._clock()
        self._stack: list[str] = []
        self._since = self._start
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._generated_tokens = 0
        self._generated_wall = 0.0
        self._trained_tokens = 0
        self._lengths: list[float] = []

    def _charge(self) -> float:
        """Credit the innermost open phase up to now; returns now."""
        now = self._clock()
        if self._stack:
            self._totals[self._stack[-1]] += now - self._since
        self._since = now
        return now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as `name`; an enclosing phase pauses meanwhile."""
        if name not in self._totals:
            raise ValueError(f"unknown phase {name!r}; one of {', '.join(PHASES)}")
        self._charge()
        self._stack.append(name)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    def move(self, source: str, target: str, seconds: float) -> float:
        """Re-charge up to `seconds` of `source`'s time so far to `target`; returns what moved."""
        moved = min(max(0.0, seconds), self._totals[source])
        self._totals[source] -= moved
        self._totals[target] += moved
        return moved

    def generated(self, tokens: int, wall_s: float) -> None:
        """Count tokens generated this step and the rollout wall time they took."""
        self._generated_tokens += int(tokens)
        self._generated_wall += max(0.0, wall_s)

    def trained(self, tokens: int, response_lengths: Iterable[float]) -> None:
        """Count tokens the step trains on and the batch's response lengths."""
        self._trained_tokens += int(tokens)
        self._lengths.extend(float(x) for x in response_lengths)

    def lap(self) -> dict[str, float]:
        """Close the step: its metric keys (`KEYS`), then start the next step now."""
        now = self._charge()
        out = {phase_key(p): self._totals[p] for p in PHASES}
        out[STEP_KEY] = now - self._start
        out["tokens_generated_per_s"] = rate(self._generated_tokens, self._generated_wall)
        out["tokens_trained_per_s"] = rate(self._trained_tokens, out[phase_key("train")])
        out.update(length_stats(self._lengths))
        stack = self._stack
        self.restart()
        self._stack, self._start, self._since = stack, now, now
        return out


def rate(tokens: int, seconds: float) -> float:
    """Tokens per second, 0.0 without time or tokens."""
    return tokens / seconds if seconds > 0 and tokens > 0 else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation between order statistics; NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def length_stats(lengths: Sequence[float]) -> dict[str, float]:
    """response_len_p50 / _p90 / _max of the step's responses (NaN, written as null, when there are none)."""
    return {
        "response_len_p50": percentile(lengths, 0.5),
        "response_len_p90": percentile(lengths, 0.9),
        "response_len_max": max(lengths) if lengths else math.nan,
    }


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of [start, end] intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def reward_only_seconds(generate: Sequence[tuple[float, float]], reward: Sequence[tuple[float, float]]) -> float:
    """Wall time during which some reward call ran and no sample was generating: |∪reward \\ ∪generate|."""
    return union_length([*generate, *reward]) - union_length(generate)


class RolloutLog:
    """The timing each rollout response carries (`response[ROLLOUT_KEY]`), gathered over one rollout batch."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget what was gathered (a new rollout batch, or after the eval's generation)."""
        self.generate: list[tuple[float, float]] = []
        self.reward: list[tuple[float, float]] = []
        self.tokens = 0

    def add(self, response: Mapping, tokens: int) -> None:
        """One response: its generated token count and, when the executor stamped them, its intervals."""
        self.tokens += int(tokens)
        timing = response.get(ROLLOUT_KEY) or {}
        if timing.get("generate"):
            self.generate.append(tuple(timing["generate"]))
        if timing.get("reward"):
            self.reward.append(tuple(timing["reward"]))

    def summary(self, wall_s: float) -> dict[str, float]:
        """The batch's tokens, rollout wall time and reward-only seconds (capped at the wall time)."""
        return {
            "tokens": self.tokens,
            "wall_s": wall_s,
            "reward_only_s": min(wall_s, reward_only_seconds(self.generate, self.reward)),
        }


def account_rollout(timer: StepTimer, summary: Mapping[str, float], *, reward_in_step: bool = True) -> None:
    """Charge a rollout batch to the timer: its tokens/s, and (synchronous trainer) the reward-only time,
    moved from `generate` to `reward`."""
    timer.generated(int(summary.get("tokens", 0)), float(summary.get("wall_s", 0.0)))
    if reward_in_step:
        timer.move("generate", "reward", float(summary.get("reward_only_s", 0.0)))


def batch_counts(experiences: Iterable) -> tuple[int, list[float]]:
    """Tokens a batch of OpenRLHF `Experience`s trains on (non-zero attention-mask entries, padded or packed)
    and its samples' response lengths."""
    experiences = list(experiences)
    tokens = sum(int((e.attention_mask != 0).sum()) for e in experiences)
    lengths = [float(x) for e in experiences for x in e.info["response_length"].reshape(-1).tolist()]
    return tokens, lengths
