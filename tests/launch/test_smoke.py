"""rft/launch/smoke.py: the SMOKE=1 run's recipe rewrite."""

from __future__ import annotations

from rft.launch.smoke import SMOKE_STEPS, smoke_flags


def test_smoke_flags_shorten_the_recipe_and_keep_a_larger_lr(monkeypatch):
    monkeypatch.delenv("SMOKE_STEPS", raising=False)
    monkeypatch.delenv("SMOKE_LR", raising=False)
    out = smoke_flags(["--rollout_batch_size", "16", "--actor_learning_rate", "5e-7", "--load_checkpoint"])
    assert "--load_checkpoint" not in out
    assert out[out.index("--max_samples") + 1] == str(SMOKE_STEPS * 16) == "48" and "--lora_sync_probe" in out
    assert out[out.index("--actor_learning_rate", 3) + 1] == "0.0001"
    assert out[out.index("--eval_steps") + 1] == "-1" and out[out.index("--save_steps") + 1] == "-1"
    assert "--enable_vllm_is_correction" in out
    cpu = smoke_flags(["--rollout_batch_size", "8", "--actor_learning_rate", "5e-3"])
    assert cpu[cpu.index("--actor_learning_rate", 3) + 1] == "0.005"  # already larger: kept


def test_smoke_steps_and_lr_from_the_environment(monkeypatch):
    monkeypatch.setenv("SMOKE_STEPS", "5")
    monkeypatch.setenv("SMOKE_LR", "2e-5")
    out = smoke_flags(["--rollout_batch_size", "4", "--actor_learning_rate", "5e-3"])
    assert out[out.index("--max_samples") + 1] == "20"
    assert out[out.index("--actor_learning_rate", 3) + 1] == "2e-05"  # the environment's, even below the recipe's
