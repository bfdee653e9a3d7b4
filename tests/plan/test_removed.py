"""rft/plan/removed.py: a removed variable still set is named with its new way and the page's row."""

from __future__ import annotations

from rft.plan.removed import PAGE, REMOVED, as_flags, still_set


def test_each_removed_variable_set_gets_one_line_with_its_new_way():
    assert still_set({"MODEL": "m", "REWARD": "em"}) == []
    lines = still_set({"REWARD_FUNC": "/x/reward.py", "OFFLOAD": "0", "RFT_JUDGE_RPM": ""})
    assert lines == [
        f"OFFLOAD is set but not read: OFFLOAD=0 is now --no_offload ({PAGE}); unset it",
        f"REWARD_FUNC is set but not read: REWARD_FUNC=path is now REWARD=path ({PAGE}); unset it",
        f"RFT_JUDGE_RPM is set but not read: RFT_JUDGE_RPM is now reward.toml: [judge] rpm ({PAGE}); unset it",
    ]


def test_every_old_switch_and_reward_knob_is_there():
    names = {old.partition("=")[0] for old, _ in REMOVED}
    switches = {"APPLY_CHAT_TEMPLATE", "COLOCATE_ACTOR_REF", "VLLM_IS_CORRECTION", "GRADIENT_CHECKPOINTING",
                "SAVE_HF_CKPT", "DISABLE_DS_CKPT", "OFFLOAD", "ADAM_OFFLOAD", "REENTRANT_CHECKPOINTING",
                "COLOCATE_ALL", "VLLM_SLEEP", "DEEPSPEED_SLEEP", "SYNC_OFF"}
    aliases = {"PROMPT_HISTORY", "DETERMINISTIC", "RESUME", "JUDGE_LIVE_CHECK", "RFT_METRICS_GLOBS", "RUN_RECORD_DIR"}
    preflight = {"POOL", "NS", "TBS", "RBS", "EP", "WARMUP", "LR", "MAX_EPOCHS", "LORA_RANK"}
    spare = {"RFT_SPARE", "RFT_SPARE_KEY", "RFT_SPARE_PORT", "RFT_SPARE_REPO", "RFT_SPARE_PYTHON",
             "RFT_SPARE_SSH_OPTS", "RFT_SPARE_DATA", "RFT_TMUX_SOCKET"}
    assert switches | aliases | preflight | spare | {"REWARD_FUNC", "RFT_REWARD_SCHEME"} <= names
    assert sum(n.startswith("RFT_JUDGE_") for n in names) == 20 and len(names) == len(REMOVED) == 58


def test_the_preflights_short_variables_are_each_one_flag():
    """Every `=N` row turns into its flags with the value in place of N; the rest add nothing."""
    env = {"POOL": "400", "LR": "5e-7", "OFFLOAD": "0", "PROMPT_HISTORY": "1"}
    assert as_flags(env) == ["--pool", "400", "--actor_learning_rate", "5e-7"]
    assert as_flags({"TBS": "16"}) == ["--train_batch_size", "16", "--rollout_batch_size", "16"]
    assert all(new.split()[0].startswith("--") and " N" in new for old, new in REMOVED if old.endswith("=N"))
