"""Removed environment variables and their new way: one still set refuses the launch, naming its replacement.

REMOVED holds the environment-variable rows of docs/configuration.md's "Removed variables: old -> new" table
(tests/test_configuration.py checks the page against it), so a leftover `OFFLOAD=0` or `REWARD_FUNC=...` is not
silently ignored. In a row whose old form ends in `=N`, the new one's `N` is the value, so `as_flags` turns a
command line of them into its flags.
"""

from __future__ import annotations

from collections.abc import Mapping

PAGE = "docs/configuration.md#removed-variables-old---new"
REMOVED = (  # (old: what a command line said, new: how to say it), the page's rows without their backticks
    ("APPLY_CHAT_TEMPLATE=0", "--no_apply_chat_template"),
    ("COLOCATE_ACTOR_REF=0", "--no_colocate_actor_ref"),
    ("VLLM_IS_CORRECTION=0", "--no_enable_vllm_is_correction"),
    ("GRADIENT_CHECKPOINTING=0", "--no_gradient_checkpointing"),
    ("SAVE_HF_CKPT=0", "--no_save_hf_ckpt"),
    ("DISABLE_DS_CKPT=1", "--disable_ds_ckpt"),
    ("OFFLOAD=0", "--no_offload"),
    ("ADAM_OFFLOAD=0", "--no_adam_offload"),
    ("REENTRANT_CHECKPOINTING=0", "--no_gradient_checkpointing_use_reentrant"),
    ("COLOCATE_ALL=0", "--no_colocate_all_models"),
    ("VLLM_SLEEP=0", "--no_vllm_enable_sleep"),
    ("DEEPSPEED_SLEEP=0", "--no_deepspeed_enable_sleep"),
    ("SYNC_OFF=1", "--vllm_sync_lora_skip"),
    ("PROMPT_HISTORY=1", "--prompt_history"),
    ("DETERMINISTIC=1", "--full_determinism (the launcher adds VLLM_BATCH_INVARIANT=1)"),
    ("RESUME=0", "--no_load_checkpoint"),
    ("JUDGE_LIVE_CHECK=0", "--no-judge-check"),
    ("POOL=N", "--pool N"),
    ("NS=N", "--n_samples_per_prompt N"),
    ("TBS=N", "--train_batch_size N --rollout_batch_size N"),
    ("RBS=N", "--rollout_batch_size N"),
    ("EP=N", "--num_episodes N"),
    ("WARMUP=N", "--lr_warmup_ratio N"),
    ("LR=N", "--actor_learning_rate N"),
    ("MAX_EPOCHS=N", "--max_epochs N"),
    ("LORA_RANK=N", "--lora_rank N"),
    ("RFT_METRICS_GLOBS", "--run NAME (runs/NAME/run.json, written by the launch)"),
    ("RUN_RECORD_DIR", "none: the run record goes in METRICS_LOG_DIR"),
    ("RFT_SPARE=user@host", "spare.toml: host (or --host user@host)"),
    ("RFT_SPARE_KEY", "spare.toml: key"),
    ("RFT_SPARE_PORT", "spare.toml: port"),
    ("RFT_SPARE_REPO", "spare.toml: repo"),
    ("RFT_SPARE_PYTHON", "spare.toml: python"),
    ("RFT_SPARE_SSH_OPTS", "spare.toml: ssh_options"),
    ("RFT_SPARE_DATA", "spare.toml: data"),
    ("RFT_TMUX_SOCKET", "spare.toml: tmux_socket (or --tmux-socket)"),
    ("REWARD_FUNC=path", "REWARD=path"),
    ("RFT_REWARD_SCHEME", "reward.toml: [reward] scheme (binary or signed)"),
    ("RFT_JUDGE_MODE", "reward.toml: [judge] mode"),
    ("RFT_JUDGE_WEIGHTS", "reward.toml: [judge] weights"),
    ("RFT_JUDGE_MODELS", "reward.toml: [judge] models"),
    ("RFT_JUDGE_PRICES", "reward.toml: [judge] prices"),
    ("RFT_JUDGE_FALLBACK", "reward.toml: [judge] fallback"),
    ("RFT_JUDGE_FALLBACK_WINDOW", "reward.toml: [judge] fallback_window"),
    ("RFT_JUDGE_PRIOR", "reward.toml: [judge] prior"),
    ("RFT_JUDGE_THINKING_LEVEL", "reward.toml: [judge] thinking_level"),
    ("RFT_JUDGE_TIMEOUT", "reward.toml: [judge] timeout"),
    ("RFT_JUDGE_RETRIES", "reward.toml: [judge] retries"),
    ("RFT_JUDGE_BACKOFF", "reward.toml: [judge] backoff"),
    ("RFT_JUDGE_MAX_BACKOFF", "reward.toml: [judge] max_backoff"),
    ("RFT_JUDGE_CONCURRENCY", "reward.toml: [judge] concurrency"),
    ("RFT_JUDGE_RPM", "reward.toml: [judge] rpm"),
    ("RFT_JUDGE_MAX_CHARS", "reward.toml: [judge] max_chars"),
    ("RFT_JUDGE_BASE_URL", "reward.toml: [judge] base_url"),
    ("RFT_JUDGE_CACHE", "reward.toml: [judge] cache"),
    ("RFT_JUDGE_EXPECTED_SOLVE_RATE", "reward.toml: [judge] expected_solve_rate"),
    ("RFT_JUDGE_EXPECTED_RESPONSE_TOKENS", "reward.toml: [judge] expected_response_tokens"),
    ("RFT_JUDGE_EXPECTED_OUTPUT_TOKENS", "reward.toml: [judge] expected_output_tokens"),
)


def removed_name(old: str) -> str:
    """The variable of an old row (`OFFLOAD=0` -> `OFFLOAD`)."""
    return old.partition("=")[0]


def as_flags(env: Mapping[str, str]) -> list[str]:
    """The flags the `=N` rows `env` sets stand for, in the table's order (`NS=8` -> `--n_samples_per_prompt 8`)."""
    flags: list[str] = []
    for old, new in REMOVED:
        name, _, value = old.partition("=")
        if value == "N" and env.get(name, "").strip():
            flags += [env[name].strip() if word == "N" else word for word in new.split()]
    return flags


def untranslated(env: Mapping[str, str]) -> list[str]:
    """The removed names `env` sets that `as_flags` cannot turn into flags (rows not of the `NAME=N` form)."""
    return [removed_name(old) for old, _ in REMOVED if removed_name(old) in env and not old.endswith("=N")]


def still_set(env: Mapping[str, str]) -> list[str]:
    """One line for each removed variable `env` still sets: its name, the new way, and the page's row."""
    return [f"{removed_name(old)} is set but not read: {old} is now {new} ({PAGE}); unset it"
            for old, new in REMOVED if removed_name(old) in env]
