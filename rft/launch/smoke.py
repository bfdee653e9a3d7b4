"""The SMOKE=1 run's recipe (`SMOKE=1 bash train_grpo_20b.sh`): a few rollout steps on the real layout that
answer "does the LoRA sync land on the real engine" (docs/launching.md#smoke-mode)."""

from __future__ import annotations

import os

from rft.io import flag_value

SMOKE_STEPS = 3
SMOKE_LR = 1e-4  # LoRA: one Adam step at 1e-4 moves a bf16 merge visibly (docs/launching.md#smoke-mode)
SMOKE_RESUME_STEP = 1  # the first launch saves a DeepSpeed checkpoint here and ends; the relaunch resumes from it
SMOKE_CALL_TIMEOUT_S = 300  # --vllm_call_timeout in a smoke: a hung engine fails it within 5 minutes, named
SMOKE_TIMEOUT_S = 3600  # the whole smoke (both launches); SMOKE_TIMEOUT overrides (docs/launching.md#smoke-mode)


def resume_step(steps: int | None = None, env: dict[str, str] | None = None) -> int:
    """SMOKE_RESUME_STEP (default 1; 0 = no save and no relaunch), below the smoke's step count."""
    env = os.environ if env is None else env
    steps = steps or int(env.get("SMOKE_STEPS") or SMOKE_STEPS)
    value = env.get("SMOKE_RESUME_STEP")
    k = int(value) if value not in (None, "") else SMOKE_RESUME_STEP
    return k if 0 < k < steps else 0


def smoke_timeout(env: dict[str, str] | None = None) -> float:
    """SMOKE_TIMEOUT: seconds the whole smoke may take before it is stopped and fails (<= 0: none)."""
    return float((os.environ if env is None else env).get("SMOKE_TIMEOUT") or SMOKE_TIMEOUT_S)


def relaunch_flags(tokens: list[str], steps: int | None = None) -> list[str]:
    """What the supervisor appends to the first launch's flags for the relaunch: every step, resumed."""
    steps = steps or int(os.environ.get("SMOKE_STEPS") or SMOKE_STEPS)
    rbs = int(flag_value(tokens, "--rollout_batch_size") or 8)
    return ["--max_samples", str(steps * rbs), "--load_checkpoint"]


def smoke_flags(tokens: list[str], steps: int | None = None, lr: float | None = None) -> list[str]:
    """The first launch's flags: the recipe's with the smoke run's appended (later flags win), no resume.

    Steps: SMOKE_STEPS (default 3); LR: SMOKE_LR, default the larger of the recipe's and 1e-4. With a resume
    step k (`resume_step`) it runs k steps and saves there; `relaunch_flags` make the relaunch resume."""
    steps = steps or int(os.environ.get("SMOKE_STEPS") or SMOKE_STEPS)
    rbs = int(flag_value(tokens, "--rollout_batch_size") or 8)
    recipe_lr = float(flag_value(tokens, "--actor_learning_rate") or 0)
    env_lr = os.environ.get("SMOKE_LR")
    lr = lr if lr is not None else float(env_lr) if env_lr else max(recipe_lr, SMOKE_LR)
    k = resume_step(steps)
    out = [t for t in tokens if t != "--load_checkpoint"]
    return out + [
        "--max_samples", str((k or steps) * rbs), "--num_episodes", "1", "--lr_warmup_ratio", "0",
        "--actor_learning_rate", f"{lr:g}", "--eval_steps", "-1", "--save_steps", str(k or -1),
        "--enable_vllm_is_correction", "--lora_sync_probe", "--lora_sync_probe_recipe_lr", f"{recipe_lr:g}",
        "--vllm_call_timeout", str(SMOKE_CALL_TIMEOUT_S),
    ]
