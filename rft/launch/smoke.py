"""The SMOKE=1 run's recipe (`SMOKE=1 bash train_grpo_20b.sh`): a few rollout steps on the real layout that
answer "does the LoRA sync land on the real engine" (docs/launching.md#smoke-mode)."""

from __future__ import annotations

import os

from rft.io import flag_value

SMOKE_STEPS = 3
SMOKE_LR = 1e-4  # LoRA: one Adam step at 1e-4 moves a bf16 merge visibly (docs/launching.md#smoke-mode)


def smoke_flags(tokens: list[str], steps: int | None = None, lr: float | None = None) -> list[str]:
    """The recipe's flags with the smoke run's appended (later flags win in the launcher) and no resume.

    Steps: SMOKE_STEPS (default 3); LR: SMOKE_LR, default the larger of the recipe's and 1e-4."""
    steps = steps or int(os.environ.get("SMOKE_STEPS") or SMOKE_STEPS)
    rbs = int(flag_value(tokens, "--rollout_batch_size") or 8)
    recipe_lr = float(flag_value(tokens, "--actor_learning_rate") or 0)
    env_lr = os.environ.get("SMOKE_LR")
    lr = lr if lr is not None else float(env_lr) if env_lr else max(recipe_lr, SMOKE_LR)
    out = [t for t in tokens if t != "--load_checkpoint"]
    return out + [
        "--max_samples", str(steps * rbs), "--num_episodes", "1", "--lr_warmup_ratio", "0",
        "--actor_learning_rate", f"{lr:g}", "--eval_steps", "-1", "--save_steps", "-1",
        "--enable_vllm_is_correction", "--lora_sync_probe",
    ]
