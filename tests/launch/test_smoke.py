"""rft/launch/smoke.py: the SMOKE=1 run's recipe rewrite, its save-and-resume and its timeouts."""

from __future__ import annotations

import pytest

from rft.launch.smoke import (
    SMOKE_CALL_TIMEOUT_S,
    SMOKE_RESUME_STEP,
    SMOKE_STEPS,
    SMOKE_TIMEOUT_S,
    relaunch_flags,
    resume_step,
    smoke_flags,
    smoke_timeout,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("SMOKE_STEPS", "SMOKE_LR", "SMOKE_RESUME_STEP", "SMOKE_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


def test_smoke_flags_shorten_the_recipe_and_keep_a_larger_lr():
    out = smoke_flags(["--rollout_batch_size", "16", "--actor_learning_rate", "5e-7", "--load_checkpoint"])
    assert "--load_checkpoint" not in out
    # the first launch runs to the resume step and saves there; the relaunch runs the rest
    assert SMOKE_RESUME_STEP == 1 and out[out.index("--max_samples") + 1] == "16"
    assert out[out.index("--save_steps") + 1] == "1" and "--lora_sync_probe" in out
    assert out[out.index("--actor_learning_rate", 3) + 1] == "0.0001"
    assert out[out.index("--lora_sync_probe_recipe_lr") + 1] == "5e-07"  # the recipe's, for the bf16 statement
    assert out[out.index("--vllm_call_timeout") + 1] == str(SMOKE_CALL_TIMEOUT_S)
    assert out[out.index("--eval_steps") + 1] == "-1" and "--enable_vllm_is_correction" in out
    cpu = smoke_flags(["--rollout_batch_size", "8", "--actor_learning_rate", "5e-3"])
    assert cpu[cpu.index("--actor_learning_rate", 3) + 1] == "0.005"  # already larger: kept


def test_the_relaunch_resumes_and_runs_every_step():
    assert relaunch_flags(["--rollout_batch_size", "16"]) == ["--max_samples", str(SMOKE_STEPS * 16),
                                                             "--load_checkpoint"]


def test_smoke_steps_lr_resume_and_timeout_from_the_environment(monkeypatch):
    monkeypatch.setenv("SMOKE_STEPS", "5")
    monkeypatch.setenv("SMOKE_LR", "2e-5")
    monkeypatch.setenv("SMOKE_RESUME_STEP", "2")
    out = smoke_flags(["--rollout_batch_size", "4", "--actor_learning_rate", "5e-3"])
    assert out[out.index("--max_samples") + 1] == "8" and out[out.index("--save_steps") + 1] == "2"
    assert relaunch_flags(["--rollout_batch_size", "4"])[1] == "20"
    assert out[out.index("--actor_learning_rate", 3) + 1] == "2e-05"  # the environment's, even below the recipe's
    monkeypatch.setenv("SMOKE_RESUME_STEP", "0")  # no save, no relaunch: every step in one launch
    out = smoke_flags(["--rollout_batch_size", "4"])
    assert resume_step() == 0 and out[out.index("--max_samples") + 1] == "20"
    assert out[out.index("--save_steps") + 1] == "-1"
    assert smoke_timeout() == SMOKE_TIMEOUT_S
    monkeypatch.setenv("SMOKE_TIMEOUT", "90")
    assert smoke_timeout() == 90.0


def test_a_resume_step_at_or_past_the_last_step_means_no_relaunch():
    assert resume_step(3, {"SMOKE_RESUME_STEP": "3"}) == 0 and resume_step(3, {"SMOKE_RESUME_STEP": "2"}) == 2
