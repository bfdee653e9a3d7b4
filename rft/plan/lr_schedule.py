"""OpenRLHF 0.9.3's actor LR schedule, modelled exactly, and the pre-flight verdict on it.

0.9.3 computes (trainer/ppo_trainer.py `prepare_datasets`, trainer/ray/ppo_actor.py):
  max_steps = len(prompts) * n_samples_per_prompt // train_batch_size * num_episodes * max_epochs
  get_scheduler(lr_scheduler, optim, num_warmup_steps=ceil(max_steps * lr_warmup_ratio),
                num_training_steps=max_steps, scheduler_specific_kwargs={"min_lr": lr * 0.1})
where len(prompts) is the pool after `--max_samples`, and DeepSpeed steps the scheduler once per optimizer
step (every train_batch_size samples).  `lr_after(k)` is the LR after k scheduler steps: what OpenRLHF logs as
`actor_lr` after its k-th optimizer step, and the LR the (k+1)-th update uses.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from rft.io import iter_jsonl
from rft.options import from_args

MIN_LR_RATIO = 0.1  # hard-coded in 0.9.3 ppo_actor.py: min_lr = actor_learning_rate * 0.1
CHECK_STEP = 20  # the LR at this scheduler step must be at least MIN_FRACTION of the target
MIN_FRACTION = 0.3
LORA_TYPICAL_LR = 1e-5  # LoRA RL usually needs LR around this; warn when far (5x) below
LORA_WARN_BELOW = 2e-6  # LORA_TYPICAL_LR / 5, written out: 1e-5 / 5.0 is 2.0000000000000003e-06, above 2e-6


@dataclass(frozen=True)
class Schedule:
    """The inputs of 0.9.3's actor scheduler, in OpenRLHF's own units."""

    pool: int
    n_samples_per_prompt: int
    train_batch_size: int
    num_episodes: int
    lr: float
    warmup_ratio: float
    max_epochs: int = 1
    rollout_batch_size: int | None = None
    lora_rank: int = 0
    scheduler: str = "cosine_with_min_lr"

    @property
    def total_steps(self) -> int:
        """Scheduler (= optimizer) steps of the whole run, exactly as 0.9.3 computes max_steps."""
        per_episode = self.pool * self.n_samples_per_prompt // self.train_batch_size
        return per_episode * self.num_episodes * self.max_epochs

    @property
    def warmup_steps(self) -> int:
        """ceil(total_steps * lr_warmup_ratio), as in 0.9.3 ppo_actor.py."""
        return math.ceil(self.total_steps * self.warmup_ratio)

    @property
    def min_lr_rate(self) -> float:
        """min_lr / lr the way transformers derives it from 0.9.3's min_lr argument."""
        return (self.lr * MIN_LR_RATIO) / self.lr

    @property
    def steps_per_rollout(self) -> float | None:
        """Optimizer steps per rollout step (rollout_batch_size * n_samples * max_epochs / train_batch_size)."""
        if not self.rollout_batch_size:
            return None
        return self.rollout_batch_size * self.n_samples_per_prompt * self.max_epochs / self.train_batch_size

    @property
    def rollout_steps(self) -> int | None:
        """Rollout steps (the metrics log's global_step) of the whole run; the dataloader drops the last partial batch."""
        if not self.rollout_batch_size:
            return None
        return self.pool // self.rollout_batch_size * self.num_episodes

    def multiplier(self, step: int) -> float:
        """transformers' cosine_with_min_lr lambda at `step` (linear warm-up from 0, cosine down to min_lr)."""
        warmup, total = self.warmup_steps, self.total_steps
        if step < warmup:
            return float(step) / float(max(1, warmup))
        progress = float(step - warmup) / float(max(1, total - warmup))
        factor = 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress))
        factor = factor * (1 - self.min_lr_rate) + self.min_lr_rate
        return max(0, factor)

    def lr_after(self, step: int) -> float:
        """Learning rate after `step` scheduler steps."""
        return self.lr * self.multiplier(step)


@dataclass
class Verdict:
    """Errors abort the launch; warnings are printed."""

    errors: list[str]
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors


def _pct(frac: float) -> str:
    """A share as a percentage, with two significant digits below 1% (0.08%, not 0.1%)."""
    return f"{frac * 100:.2g}%" if 0 < frac < 0.01 else f"{frac:.1%}"


def evaluate(s: Schedule, check_step: int = CHECK_STEP, min_fraction: float = MIN_FRACTION) -> Verdict:
    """Apply the pre-flight rules to a schedule."""
    errors, warnings = [], []
    if s.scheduler != "cosine_with_min_lr":
        errors.append(f"--lr_scheduler {s.scheduler}: only cosine_with_min_lr is modelled")
    if s.total_steps <= 0:
        errors.append(
            f"total scheduler steps is {s.total_steps} (pool {s.pool} x n_samples {s.n_samples_per_prompt} "
            f"// train_batch_size {s.train_batch_size} x episodes {s.num_episodes}): nothing would train"
        )
    elif s.total_steps < s.warmup_steps + check_step:
        errors.append(
            f"total scheduler steps {s.total_steps} < warm-up {s.warmup_steps} + {check_step}: the run "
            f"ends before it trains {check_step} steps at full LR (raise --num_episodes or the pool, "
            "or lower --lr_warmup_ratio)"
        )
    if s.total_steps > 0:
        at = s.lr_after(check_step)
        if at < min_fraction * s.lr:
            errors.append(
                f"LR after scheduler step {check_step} is {at:.3e} = {_pct(at / s.lr)} of the target {s.lr:.3e} "
                f"(< {min_fraction:.0%}): the step budget is spent in warm-up or decay"
            )
    if s.lora_rank > 0 and s.lr < LORA_WARN_BELOW:
        warnings.append(
            f"LoRA run (rank {s.lora_rank}) at LR {s.lr:.1e}: LoRA RL usually needs around {LORA_TYPICAL_LR:.0e}; "
            "at 5e-7 a LoRA policy can finish a whole run with KL ~1e-4, having barely moved"
        )
    if s.rollout_steps == 0:
        errors.append(
            f"pool {s.pool} < rollout_batch_size {s.rollout_batch_size}: the dataloader drops the partial batch, "
            "so no rollout step would run"
        )
    spr = s.steps_per_rollout
    if spr is not None and s.rollout_steps and int(s.rollout_steps * spr) != s.total_steps:
        warnings.append(
            f"the run makes {int(s.rollout_steps * spr)} optimizer steps but the scheduler plans {s.total_steps} "
            "(pool not a multiple of rollout_batch_size): the LR will not reach its minimum"
        )
    if spr is not None and spr != int(spr):
        warnings.append(
            f"rollout_batch_size x n_samples x max_epochs / train_batch_size = {spr:g} is not an integer: "
            "optimizer steps straddle rollout steps"
        )
    return Verdict(errors, warnings)


SCAN_LIMIT = 100_000  # candidate values tried per knob beyond the binary search


@dataclass(frozen=True)
class Suggestion:
    """One value that makes a refused schedule pass, with the schedule it was re-checked on."""

    knob: str  # "--lr_warmup_ratio", "--num_episodes" or "pool"
    value: float | int | None  # None: no value of this knob alone passes
    schedule: Schedule | None
    text: str


def _passes(s: Schedule, check_step: int, min_fraction: float) -> bool:
    return evaluate(s, check_step, min_fraction).ok


def _warmup_cap(check_step: int, min_fraction: float) -> float:
    """The longest warm-up whose LR at check_step still reaches min_fraction (no bound when min_fraction <= 0)."""
    return math.floor(check_step / min_fraction + 1e-9) if min_fraction > 0 else math.inf


def _ratio_text(ratio: float) -> str:
    """A ratio as a plain decimal (0.000026, not 2.6e-05)."""
    return f"{ratio:.12f}".rstrip("0").rstrip(".") or "0"


def _largest_warmup_ratio(s: Schedule, check_step: int, min_fraction: float) -> Suggestion:
    """The largest --lr_warmup_ratio below the current one that passes (rounded down to few digits, re-checked)."""
    t = s.total_steps
    w_max = min(s.warmup_steps, _warmup_cap(check_step, min_fraction) + 1)
    for w in range(w_max, -1, -1):
        if w >= s.warmup_steps:  # fewer warm-up steps, not w / t < ratio: ceil(t * (w / t)) can be w + 1
            continue
        exact = w / t if t > 0 else 0.0
        for digits in range(2, 8):  # the shortest decimal at or below w / t whose schedule passes
            scale = 10 ** (digits - 1 - math.floor(math.log10(exact))) if exact > 0 else 1
            ratio = float(_ratio_text(math.floor(exact * scale) / scale))
            cand = replace(s, warmup_ratio=ratio)
            if _passes(cand, check_step, min_fraction):
                return Suggestion(
                    "--lr_warmup_ratio", ratio, cand,
                    f"--lr_warmup_ratio {_ratio_text(ratio)} (warm-up {cand.warmup_steps} of {t} steps, "
                    f"LR after step {check_step} = {cand.lr_after(check_step) / s.lr:.1%} of target)",
                )
    return Suggestion("--lr_warmup_ratio", None, None,
                      f"--lr_warmup_ratio: no value passes at {t} scheduler steps")


def _nearest_int(s: Schedule, make: Callable[[int], Schedule], current: int, check_step: int,
                 min_fraction: float) -> tuple[int, Schedule] | None:
    """The passing value of an integer knob nearest to `current`: the largest below it when the warm-up is too
    long (binary search on warm-up steps, then a scan), else the smallest above it."""
    w_cap = _warmup_cap(check_step, min_fraction)
    if s.warmup_steps > w_cap:
        lo, hi = 1, current - 1  # largest x in [lo, hi] with warm-up <= w_cap (warm-up grows with x)
        if hi < lo or make(lo).warmup_steps > w_cap:
            start = lo
        else:
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if make(mid).warmup_steps <= w_cap:
                    lo = mid
                else:
                    hi = mid - 1
            start = lo
        candidates = range(min(start, current - 1), max(0, start - SCAN_LIMIT), -1)
    else:
        candidates = range(current + 1, current + 1 + SCAN_LIMIT)
    for x in candidates:
        cand = make(x)
        if _passes(cand, check_step, min_fraction):
            return x, cand
    return None


def suggest(s: Schedule, check_step: int = CHECK_STEP, min_fraction: float = MIN_FRACTION) -> list[Suggestion]:
    """For a refused schedule: the warm-up ratio, episode count and pool size that pass, each alone, each
    re-checked with `evaluate` on the schedule it builds. Empty when the schedule passes or the scheduler
    is not the modelled one."""
    if s.scheduler != "cosine_with_min_lr" or _passes(s, check_step, min_fraction):
        return []
    out = [_largest_warmup_ratio(s, check_step, min_fraction)]
    below = s.warmup_steps > _warmup_cap(check_step, min_fraction)
    ep = _nearest_int(s, lambda e: replace(s, num_episodes=e), s.num_episodes, check_step, min_fraction)
    if ep is None:
        per_ep = replace(s, num_episodes=1)
        out.append(Suggestion(
            "--num_episodes", None, None,
            f"--num_episodes: none passes on this pool (1 episode = {per_ep.total_steps} steps, "
            f"warm-up {per_ep.warmup_steps})",
        ))
    else:
        e, cand = ep
        out.append(Suggestion(
            "--num_episodes", e, cand,
            f"--num_episodes {e} ({'the most' if below else 'the fewest'} that passes: {cand.total_steps} steps, "
            f"warm-up {cand.warmup_steps}, LR after step {check_step} = {cand.lr_after(check_step) / s.lr:.1%})",
        ))
    pool = _nearest_int(s, lambda p: replace(s, pool=p), s.pool, check_step, min_fraction)
    if pool is None:
        out.append(Suggestion("pool", None, None, "pool: no size passes with these episodes and warm-up"))
    else:
        p, cand = pool
        limit = f"at most {p}" if below else f"at least {p}"
        rbs = s.rollout_batch_size or 0
        if below and rbs and p % rbs and p - p % rbs >= rbs:  # a whole number of rollout batches, if it passes
            whole = replace(s, pool=p - p % rbs)
            if _passes(whole, check_step, min_fraction):
                limit = f"{whole.pool} = {whole.pool // rbs} whole rollout batches; at most {p} pass"
                p, cand = whole.pool, whole
        how = f"--max_samples {p} or a smaller PROMPT_DATA" if below else "a larger PROMPT_DATA"
        out.append(Suggestion(
            "pool", p, cand,
            f"a pool of {p} prompts ({limit}; {how}: {cand.total_steps} steps, "
            f"warm-up {cand.warmup_steps}, LR after step {check_step} = {cand.lr_after(check_step) / s.lr:.1%})",
        ))
    return out


def suggestion_line(suggestions: list[Suggestion]) -> str:
    """One line naming what would pass (each value alone, the others as given)."""
    return "passes with any one of (each re-checked): " + "; ".join(x.text for x in suggestions)


def key_steps(s: Schedule) -> list[int]:
    """Scheduler steps worth a table row: start, warm-up end, the check step, quarters, end."""
    t, w = s.total_steps, s.warmup_steps
    cands = {0, 1, w, CHECK_STEP, t // 4, t // 2, 3 * t // 4, t}
    if s.steps_per_rollout:
        cands |= {int(round(s.steps_per_rollout * r)) for r in (1, 5, 10, 20)}
    return sorted(c for c in cands if 0 <= c <= t)


def report(s: Schedule, verdict: Verdict, check_step: int = CHECK_STEP, min_fraction: float = MIN_FRACTION) -> str:
    """Human-readable summary: totals, LR at key steps in scheduler and rollout units, what would pass."""
    spr = s.steps_per_rollout
    lines = [
        f"pool {s.pool}  n_samples_per_prompt {s.n_samples_per_prompt}  train_batch_size {s.train_batch_size}  "
        f"num_episodes {s.num_episodes}  max_epochs {s.max_epochs}",
        f"total scheduler steps     {s.total_steps}",
        f"warm-up steps             {s.warmup_steps} (ratio {s.warmup_ratio})",
        f"optimizer steps / rollout {spr:g}"
        if spr is not None
        else "optimizer steps / rollout (unknown: no rollout_batch_size)",
    ]
    if s.rollout_steps is not None:
        lines.append(f"rollout steps (global_step in the metrics log) {s.rollout_steps}")
    lines.append(f"target LR {s.lr:.3e}  min LR {s.lr * MIN_LR_RATIO:.3e}")
    lines.append(f"{'sched step':>10} {'rollout step':>12} {'LR':>11} {'% target':>9}")
    for k in key_steps(s):
        roll = f"{k / spr:.2f}" if spr else "-"
        lines.append(f"{k:>10} {roll:>12} {s.lr_after(k):>11.3e} {s.lr_after(k) / s.lr:>9.1%}")
    lines += [f"WARNING: {w}" for w in verdict.warnings]
    lines += [f"ABORT: {e}" for e in verdict.errors]
    hints = suggest(s, check_step, min_fraction) if not verdict.ok else []
    if hints:
        lines.append(f"WOULD PASS: {suggestion_line(hints)}")
    lines.append("LR preflight: OK" if verdict.ok else "LR preflight: FAILED")
    return "\n".join(lines)


def count_pool(prompt_data: str, max_samples: float = 1e8, probs: str | None = None) -> int:
    """Prompts 0.9.3 trains on: each comma-separated JSONL capped at max_samples, concatenated, capped again."""
    if probs:
        raise ValueError("--prompt_data_probs interleaves datasets; give the pool size with --pool N")
    total = 0
    for part in prompt_data.split(","):
        path = part.split("@")[0].strip()
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--prompt_data {path} not found; give the pool size with --pool N")
        if not path.endswith((".jsonl", ".json")):
            raise ValueError(f"--prompt_data {path}: not a local JSONL file; give the pool size with --pool N")
        total += min(int(max_samples), sum(1 for _ in iter_jsonl(path)))
    return min(int(max_samples), total)


def schedule_from_args(args: argparse.Namespace, pool: int | None = None) -> Schedule:
    """Build the Schedule from a parsed OpenRLHF namespace (pool counted from --prompt_data if not given)."""
    if pool is None:
        if not args.prompt_data:
            raise ValueError("no --prompt_data and no --pool: cannot size the schedule")
        pool = count_pool(args.prompt_data, args.max_samples, args.prompt_data_probs)
    renamed = {"lr": "actor_learning_rate", "warmup_ratio": "lr_warmup_ratio", "scheduler": "lr_scheduler"}
    return from_args(Schedule, args, renamed, pool=pool)


# Placeholders that let 0.9.3's validation run when only schedule flags are given (its default
# advantage_estimator 'gae' needs a critic/reward model); any real flag given later overrides them.
NEUTRAL_FLAGS = [
    "--pretrain",
    "preflight",
    "--remote_rm_url",
    "preflight",
    "--advantage_estimator",
    "dr_grpo",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="preflight_lr.sh",
        description="Model OpenRLHF 0.9.3's actor LR schedule for a launch and abort (exit 1) when it is unusable. "
        "Example: bash preflight_lr.sh --pool 400 --n_samples_per_prompt 8 --train_batch_size 16 "
        "--rollout_batch_size 16 --num_episodes 1 --lr_warmup_ratio 0.05 --actor_learning_rate 5e-7. Any OpenRLHF "
        "flag may follow, as on a launch script's command line. Without --pool the pool is counted from "
        "--prompt_data after --max_samples.",
    )
    p.add_argument("--pool", type=int, default=None, help="number of prompts (instead of counting --prompt_data)")
    p.add_argument("--check-step", type=int, default=CHECK_STEP, help="scheduler step whose LR is checked")
    p.add_argument(
        "--min-fraction", type=float, default=MIN_FRACTION, help="minimum LR fraction at that step"
    )
    return p


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """CLI: print the schedule report; exit 1 when the preflight fails, 2 on bad input or a removed variable without a flag form."""
    from rft.plan.openrlhf_cli import FlagError, parse_args
    from rft.plan.removed import as_flags, still_set, untranslated

    environ = dict(os.environ if environ is None else environ)
    argv = sys.argv[1:] if argv is None else argv
    if leftovers := still_set(environ):
        if untranslated(environ):  # a removed name with no flag form (only `NAME=N` rows translate)
            print("\n".join(f"preflight_lr: {ln}" for ln in leftovers), file=sys.stderr)
            return 2
        argv = [*as_flags(environ), *argv]  # the ops guide's documented form: read as its flags, said in one line
        print(f"preflight_lr: the guide's variables, as flags: bash preflight_lr.sh {' '.join(argv)}", file=sys.stderr)
    ours, rest = build_parser().parse_known_args(argv)
    try:
        args = parse_args(NEUTRAL_FLAGS + rest).args
        sched = schedule_from_args(args, ours.pool)
    except (FlagError, ValueError, FileNotFoundError) as e:
        print(f"preflight_lr: {e}", file=sys.stderr)
        return 2
    verdict = evaluate(sched, ours.check_step, ours.min_fraction)
    print(report(sched, verdict, ours.check_step, ours.min_fraction))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
