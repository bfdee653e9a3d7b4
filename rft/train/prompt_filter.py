"""Spend rollouts on prompts that teach: online group filtering, a prompt history across passes, a step budget.

Called by `experience_maker.patch` and `ppo_trainer.patch` from OpenRLHF 0.9.3's `SamplesGenerator` and `PPOTrainer.fit`:

- **Filtering** (`--dynamic_filtering`, 0.9.3's flag): a group whose mean is outside the open
  `--dynamic_filtering_reward_range` is dropped and another prompt is rolled out in its place. 0.9.3 takes the
  mean of the samples' `scores`; `--dynamic_filtering_key correctness` takes the mean of the reward's
  `correctness` log instead, so a judge reward paying a right answer 0.8-1.0 still drops all-right groups.
- **History** (`--prompt_history`): a prompt whose last `z` groups were all uniform (every sample right, or
  every one wrong) is skipped before rollout with probability `min(max_skip, 1 - explore**z)` (GRESO's
  probabilistic skip): an easy prompt is rarely re-rolled but never retired for good, so a prompt the policy
  unlearns, or a hard one it starts to solve, comes back. The draw is a hash of (seed, prompt, appearances),
  so a resumed run skips exactly what the interrupted one would have; the records travel in the checkpoint.
- **Carry**: when a pass runs out before a batch is full, the groups accepted so far start the next pass's
  first batch (0.9.3 drops them); they live in memory only, so a resume rolls those prompts out again.
- **Step budget**: filtering and skipping take more prompts per step, so a pass over the pool yields fewer
  steps. With either on, the run does the steps the LR schedule was built for (`pool // rollout_batch_size *
  num_episodes` rollout steps, the LR preflight's model) and starts another pass over the pool as needed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rft.train.group_waste import UNIFORM_TOL

KEYS = ("score", "correctness")
RIGHT, WRONG, MIXED = 1, 0, -1
STATE_KEY = "prompt_history"
"""Key of the history in OpenRLHF's checkpoint client_states."""
STEP_KEYS = ("prompts_skipped", "prompts_filtered", "prompts_per_accepted", "prompts_uniform_known", "pool_pass",
             "samples_carried")
"""Keys step_metrics may write into the step's metrics."""

Draw = Callable[[int], tuple[list, list, bool]]


def prompt_key(prompt: Any, label: Any) -> str:
    """A stable 16-hex key for a (prompt, label) pair."""
    return hashlib.sha1(f"{prompt}\x00{label}".encode()).hexdigest()[:16]


def unit_draw(seed: int, key: str, appearance: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, prompt key, appearance): the same on a resumed run."""
    digest = hashlib.sha1(f"{seed}:{key}:{appearance}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def group_values(experiences: Sequence[Any], key: str) -> list[float] | None:
    """Per-sample values of one prompt group for the filter: scores, or the reward's correctness log."""
    if key == "correctness":
        vals = [e.info.get("correctness") for e in experiences]
    else:
        vals = [e.scores for e in experiences]
    if not vals or any(v is None for v in vals):
        return None
    return [float(torch.as_tensor(v).reshape(-1)[0]) for v in vals]


def group_kind(experiences: Sequence[Any], key: str) -> int:
    """RIGHT / WRONG when the group is uniform (by correctness with key correctness, else all rewards equal and
    then by their value), MIXED otherwise."""
    if key == "correctness":
        vals = group_values(experiences, key)
        if vals is None:
            return MIXED
        right = [v >= 0.5 for v in vals]
        return RIGHT if all(right) else WRONG if not any(right) else MIXED
    rewards = [float(torch.as_tensor(e.rewards).reshape(-1)[0]) for e in experiences if e.rewards is not None]
    if len(rewards) < 2 or max(rewards) - min(rewards) > UNIFORM_TOL:
        return MIXED
    return RIGHT if rewards[0] > 0 else WRONG


@dataclass
class PromptFilter:
    """Filtering, history and their per-step counters for one trainer."""

    dynamic_filtering: bool = False
    key: str = "score"
    reward_range: tuple[float, float] = (0.0, 1.0)
    history: bool = False
    explore: float = 0.25
    max_skip: float = 0.95
    seed: int = 42
    records: dict[str, list[int]] = field(default_factory=dict)  # key -> [uniform streak, appearances, last kind]
    skipped: int = 0
    filtered: int = 0
    rolled_out: int = 0
    passes: int = 0
    carry: list = field(default_factory=list)  # accepted samples of a batch the last pass could not fill
    carried: int = 0

    def __post_init__(self) -> None:
        if self.key not in KEYS:
            raise ValueError(f"--dynamic_filtering_key {self.key!r}: use one of {', '.join(KEYS)}")
        if not 0 < self.explore < 1 or not 0 <= self.max_skip < 1:
            raise ValueError("--prompt_history_explore must be in (0, 1) and --prompt_history_max_skip in [0, 1)")

    @classmethod
    def from_args(cls, args: Any) -> PromptFilter:
        """From OpenRLHF's parsed args (the flags rft.plan.flags adds default to off)."""
        return cls(
            dynamic_filtering=bool(getattr(args, "dynamic_filtering", False)),
            key=getattr(args, "dynamic_filtering_key", "score"),
            reward_range=tuple(getattr(args, "dynamic_filtering_reward_range", (0.0, 1.0))),
            history=bool(getattr(args, "prompt_history", False)),
            explore=float(getattr(args, "prompt_history_explore", 0.25)),
            max_skip=float(getattr(args, "prompt_history_max_skip", 0.95)),
            seed=int(getattr(args, "seed", 42)),
        )

    @property
    def active(self) -> bool:
        """Filtering or history on: the trainer then runs to the step budget."""
        return self.dynamic_filtering or self.history

    # ------------------------------------------------------------ before rollout

    def skip_probability(self, key: str) -> float:
        """min(max_skip, 1 - explore**streak): 0 for a prompt never seen uniform."""
        streak = self.records.get(key, [0, 0, MIXED])[0]
        return 0.0 if streak <= 0 else min(self.max_skip, 1.0 - self.explore**streak)

    def skip(self, prompt: Any, label: Any) -> bool:
        """Whether to skip this prompt now (history on); every appearance is counted, skipped or not."""
        if not self.history:
            return False
        key = prompt_key(prompt, label)
        rec = self.records.setdefault(key, [0, 0, MIXED])
        appearance = rec[1]
        rec[1] += 1
        if unit_draw(self.seed, key, appearance) < self.skip_probability(key):
            self.skipped += 1
            return True
        return False

    def collect(self, draw: Draw, num_prompts: int) -> tuple[list, list, bool]:
        """Up to num_prompts (prompt, label) pairs from `draw(k)` (0.9.3's _collect_prompt_batch), skipping by
        the history; exhausted as `draw` says."""
        prompts: list = []
        labels: list = []
        exhausted = False
        while len(prompts) < num_prompts and not exhausted:
            got_p, got_l, exhausted = draw(num_prompts - len(prompts))
            for p, lab in zip(got_p, got_l, strict=True):
                if not self.skip(p, lab):
                    prompts.append(p)
                    labels.append(lab)
        return prompts, labels, exhausted

    # ------------------------------------------------------------ after rollout

    def keep(self, experiences: Sequence[Any]) -> bool:
        """0.9.3's rule (group mean in the open reward range) on the chosen key; a group without values is kept."""
        vals = group_values(experiences, self.key)
        if not self.dynamic_filtering or vals is None:
            return True
        lo, hi = self.reward_range
        return lo < sum(vals) / len(vals) < hi

    def after_group(self, experiences: list) -> list:
        """Record one rolled-out prompt group in the history; [] when the filter drops it."""
        if not experiences:
            return experiences
        self.rolled_out += 1
        if self.history:
            first = experiences[0]
            key = prompt_key((first.prompts or [None])[0], (first.labels or [None])[0])
            kind = group_kind(experiences, self.key)
            rec = self.records.setdefault(key, [0, 1, MIXED])
            rec[0] = rec[0] + 1 if kind != MIXED else 0
            rec[2] = kind
        if self.keep(experiences):
            return experiences
        self.filtered += 1
        return []

    # ------------------------------------------------------------ across passes

    def keep_carry(self, experiences: list) -> None:
        """Keep the accepted samples of a batch the pass ran out before filling (0.9.3 drops them)."""
        self.carry = list(experiences)

    def take_carry(self) -> list:
        """The kept samples, to start the next batch with (then none are kept)."""
        out, self.carry = self.carry, []
        self.carried = len(out)
        return out

    # ------------------------------------------------------------ metrics and checkpoint

    def step_metrics(self, accepted_prompts: int) -> dict[str, float]:
        """The step's counters (then reset): prompts skipped before rollout, dropped after it, rolled-out
        prompts per accepted one, prompts with a uniform streak, passes over the pool started, samples carried
        over from the last pass's unfilled batch."""
        if not self.active:
            return {}
        out = {
            "prompts_skipped": float(self.skipped),
            "prompts_filtered": float(self.filtered),
            "prompts_per_accepted": self.rolled_out / accepted_prompts if accepted_prompts else math.nan,
            "prompts_uniform_known": float(sum(1 for r in self.records.values() if r[0] > 0)),
            "pool_pass": float(self.passes),
            "samples_carried": float(self.carried),
        }
        self.skipped = self.filtered = self.rolled_out = self.carried = 0
        return out

    def state_dict(self) -> dict[str, Any]:
        """What the checkpoint keeps: the per-prompt records and the pass count."""
        return {"records": {k: list(v) for k, v in self.records.items()}, "passes": self.passes}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore from a checkpoint's client_states entry (None: a run from before the history: start empty)."""
        if state:
            self.records = {k: list(v) for k, v in state.get("records", {}).items()}
            self.passes = int(state.get("passes", 0))


def planned_rollout_steps(pool: int, rollout_batch_size: int, num_episodes: int) -> int:
    """Rollout steps the LR schedule is built for: what 0.9.3 runs without filtering (last partial batch dropped)."""
    return pool // rollout_batch_size * num_episodes


IDLE_PASSES = 3
"""Passes in a row that train nothing before the run ends: skips are random, so one idle pass can be luck."""


def passes(start: int, num_episodes: int, budget: int, done: Callable[[], int], active: bool) -> Iterator[int]:
    """Pass numbers for the trainer's episode loop: 0.9.3's episodes when inactive; with filtering or history,
    passes over the pool until `done()` reaches `budget` rollout steps, or IDLE_PASSES passes in a row train
    nothing (every prompt skipped or dropped: the pool has nothing left to teach)."""
    if not active:
        yield from range(start, num_episodes)
        return
    p, idle = start, 0
    while done() < budget and idle < IDLE_PASSES:
        before = done()
        yield p
        idle = idle + 1 if done() == before else 0
        p += 1
    if done() < budget:
        print(f"rft prompt filter: the run ends at rollout step {done()} of {budget}: {IDLE_PASSES} passes over the "
              "pool in a row trained nothing (every prompt skipped or dropped; the LR did not reach its floor)",
              flush=True)
