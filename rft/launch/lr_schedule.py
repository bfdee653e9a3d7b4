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
from dataclasses import dataclass

from rft.io import iter_jsonl

MIN_LR_RATIO = 0.1  # hard-coded in 0.9.3 ppo_actor.py: min_lr = actor_learning_rate * 0.1
CHECK_STEP = 20  # the LR at this scheduler step must be at least MIN_FRACTION of the target
MIN_FRACTION = 0.3
LORA_TYPICAL_LR = 1e-5  # LoRA RL usually needs LR around this; warn when far (5x) below
LORA_FAR_BELOW = 5.0


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
                f"LR after scheduler step {check_step} is {at:.3e} = {at / s.lr:.1%} of the target {s.lr:.3e} "
                f"(< {min_fraction:.0%}): the step budget is spent in warm-up or decay"
            )
    if s.lora_rank > 0 and s.lr < LORA_TYPICAL_LR / LORA_FAR_BELOW:
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


def key_steps(s: Schedule) -> list[int]:
    """Scheduler steps worth a table row: start, warm-up end, the check step, quarters, end."""
    t, w = s.total_steps, s.warmup_steps
    cands = {0, 1, w, CHECK_STEP, t // 4, t // 2, 3 * t // 4, t}
    if s.steps_per_rollout:
        cands |= {int(round(s.steps_per_rollout * r)) for r in (1, 5, 10, 20)}
    return sorted(c for c in cands if 0 <= c <= t)


def report(s: Schedule, verdict: Verdict) -> str:
    """Human-readable summary: totals, then LR at key steps in scheduler and rollout units."""
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
    lines.append("LR preflight: OK" if verdict.ok else "LR preflight: FAILED")
    return "\n".join(lines)


def count_pool(prompt_data: str, max_samples: float = 1e8, probs: str | None = None) -> int:
    """Prompts 0.9.3 trains on: each comma-separated JSONL capped at max_samples, concatenated, capped again."""
    if probs:
        raise ValueError("--prompt_data_probs interleaves datasets; give the pool size with POOL=N")
    total = 0
    for part in prompt_data.split(","):
        path = part.split("@")[0].strip()
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--prompt_data {path} not found; give the pool size with POOL=N")
        if not path.endswith((".jsonl", ".json")):
            raise ValueError(f"--prompt_data {path}: not a local JSONL file; give the pool size with POOL=N")
        total += min(int(max_samples), sum(1 for _ in iter_jsonl(path)))
    return min(int(max_samples), total)


def schedule_from_args(args: argparse.Namespace, pool: int | None = None) -> Schedule:
    """Build the Schedule from a parsed OpenRLHF namespace (pool counted from --prompt_data if not given)."""
    if pool is None:
        if not args.prompt_data:
            raise ValueError("no --prompt_data and no POOL: cannot size the schedule")
        pool = count_pool(args.prompt_data, args.max_samples, args.prompt_data_probs)
    return Schedule(
        pool=pool,
        n_samples_per_prompt=args.n_samples_per_prompt,
        train_batch_size=args.train_batch_size,
        num_episodes=args.num_episodes,
        lr=args.actor_learning_rate,
        warmup_ratio=args.lr_warmup_ratio,
        max_epochs=args.max_epochs,
        rollout_batch_size=args.rollout_batch_size,
        lora_rank=args.lora_rank,
        scheduler=args.lr_scheduler,
    )


# Seed-form environment variables and the OpenRLHF flag each stands for.
ENV_FLAGS = {
    "NS": "--n_samples_per_prompt",
    "TBS": "--train_batch_size",
    "EP": "--num_episodes",
    "WARMUP": "--lr_warmup_ratio",
    "LR": "--actor_learning_rate",
    "RBS": "--rollout_batch_size",
    "MAX_EPOCHS": "--max_epochs",
    "LORA_RANK": "--lora_rank",
}


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


def env_flags(environ: dict[str, str]) -> list[str]:
    """Seed-form env vars (NS=8 TBS=16 ...) as OpenRLHF flags; explicit flags placed after them win."""
    out: list[str] = []
    for var, flag in ENV_FLAGS.items():
        if environ.get(var, "").strip():
            out += [flag, environ[var].strip()]
    if environ.get("TBS", "").strip() and not environ.get("RBS", "").strip():
        out += ["--rollout_batch_size", environ["TBS"].strip()]  # the recipes use rollout batch = train batch
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="preflight_lr.sh",
        description="Model OpenRLHF 0.9.3's actor LR schedule for a launch and abort (exit 1) when it is unusable. "
        "Seed form: POOL=400 NS=8 TBS=16 EP=1 WARMUP=0.05 LR=5e-7 bash preflight_lr.sh (also RBS, default TBS; "
        "MAX_EPOCHS; LORA_RANK). Any OpenRLHF flag may follow; flags override the env vars. Without POOL the pool is "
        "counted from --prompt_data after --max_samples.",
    )
    p.add_argument(
        "--pool", type=int, default=None, help="number of prompts (overrides POOL and --prompt_data)"
    )
    p.add_argument("--check-step", type=int, default=CHECK_STEP, help="scheduler step whose LR is checked")
    p.add_argument(
        "--min-fraction", type=float, default=MIN_FRACTION, help="minimum LR fraction at that step"
    )
    return p


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """CLI: print the schedule report; exit 1 when the preflight fails, 2 on bad input."""
    from rft.launch.openrlhf_cli import FlagError, parse_args

    environ = dict(os.environ if environ is None else environ)
    ours, rest = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    pool = (
        ours.pool
        if ours.pool is not None
        else (int(environ["POOL"]) if environ.get("POOL", "").strip() else None)
    )
    try:
        args = parse_args(NEUTRAL_FLAGS + env_flags(environ) + rest).args
        sched = schedule_from_args(args, pool)
    except (FlagError, ValueError, FileNotFoundError) as e:
        print(f"preflight_lr: {e}", file=sys.stderr)
        return 2
    verdict = evaluate(sched, ours.check_step, ours.min_fraction)
    print(report(sched, verdict))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
