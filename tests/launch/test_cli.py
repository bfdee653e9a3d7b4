"""Launch scripts and pre-launch checks: dry-runs through OpenRLHF 0.9.3's real (patched) parser, data and
placement rules, and the attempt git workflow on a temporary repository."""

from __future__ import annotations

import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rft.fixtures.judge_server import JudgeServer
from rft.fixtures.reward_files import write_reward_toml
from rft.io import atomic_write_jsonl, sha256_file
from rft.launch import cli, rules
from rft.launch.run_pointer import find_run
from rft.plan.openrlhf_cli import (
    FlagError,
    apply_negations,
    parse_args,
    resolve_overrides,
    store_true_flags,
)
from rft.plan.removed import PAGE
from rft.provenance import REPO_ROOT as ROOT
from rft.provision import host
from tests.support.git import git
from tests.support.rows import rows

SCRIPTS = ["train_grpo_20b.sh", "train_grpo_120b.sh", "train_grpo_20b_a27.sh", "train_grpo_20b_a28a.sh",
           "train_grpo_20b_a28b.sh", "train_grpo_small.sh", "train_sft.sh"]


def script_env(patched_root: Path, data_dir: Path, tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATTEMPT", "RAY_ADDRESS", "POOL", "PRESET")}
    env.update(PYTHON=sys.executable, DATA_DIR=str(data_dir), SCRATCH=str(tmp_path / "scratch"),
               DATA_ROOT=str(tmp_path / "disk"), OUT_ROOT=str(tmp_path / "runs"),
               **{rules.OPENRLHF_DIR_ENV: str(patched_root)})
    env.update(extra)
    return env


def recipe_20b(data_dir: Path) -> dict:
    """Issue 4's attempt-26 recipe for gpt-oss-20b, value by value (attempt scripts and 120b change a few)."""
    return dict(
        vllm_num_engines=2, vllm_tensor_parallel_size=2, vllm_gpu_memory_utilization=0.85,
        actor_num_nodes=1, actor_num_gpus_per_node=4, colocate_actor_ref=True, zero_stage=3, offload=False,
        adam_offload=False, lora_rank=32, lora_alpha=64, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        advantage_estimator="dr_grpo", remote_rm_url=[str(ROOT / "reward_func_em.py")], actor_learning_rate=5e-7,
        init_kl_coef=0.001, n_samples_per_prompt=8, rollout_batch_size=16, train_batch_size=16,
        micro_rollout_batch_size=1, micro_train_batch_size=1, eps_clip=0.2, generate_max_len=4096,
        prompt_max_len=1024, lr_warmup_ratio=0.05, num_episodes=20, gradient_checkpointing=True, param_dtype="bf16",
        entropy_loss_coef=0.0, max_ckpt_num=3, save_steps=5, disable_ds_ckpt=False, save_hf_ckpt=True,
        prompt_data=str(data_dir / "sft_rl_pool.jsonl"), eval_dataset=str(data_dir / "probe_set_200_ood.jsonl"),
        eval_steps=5, eval_temperature=0.0, eval_n_samples_per_prompt=1, attn_implementation="eager",
        packing_samples=False, apply_chat_template=True, vllm_sync_lora_via_object_store=True,
        enable_vllm_is_correction=True, vllm_is_correction_type="tis", vllm_is_truncated_threshold=[0.5, 5.0],
    )


def test_every_script_follows_the_house_rules():
    """set -euo pipefail, one flag per line in the flag arrays, "$@" last, unbuffered output via launch_lib."""
    assert "export PYTHONUNBUFFERED=1" in (ROOT / "scripts" / "launch_lib.sh").read_text()
    for name in [*SCRIPTS, "preflight_lr.sh"]:
        text = (ROOT / name).read_text()
        assert "\nset -euo pipefail\n" in text, name
        assert "launch_lib.sh" in text or "exec bash" in text, name
        code = [ln.split("#")[0] for ln in text.splitlines()]
        in_array = False
        for ln in code:
            opens = ln.strip().startswith(("ARGS=(", "ARGS+=("))
            if opens or in_array:
                assert sum(t.startswith("--") for t in ln.replace("(", " ").split()) <= 1, (name, ln)
                in_array = not ln.rstrip().endswith(")")
        last = [ln for ln in code if ln.strip()][-1]
        assert last.rstrip().endswith(('"$@"', '"${PASS[@]}"')), (name, last)


def parse_command_text(text: str) -> list[str]:
    """The full token list of a command printed by `format_command` (one flag per line, backslash continuations)."""
    return shlex.split(text.replace("\\\n", " "))


def run_script(name: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / name), *args], capture_output=True, text=True, env=env, timeout=120)


def parsed_command(stdout: str, patched_root: Path, monkeypatch) -> tuple[list[str], object]:
    tokens = parse_command_text(stdout)
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    entry = "sft" if "openrlhf.cli.train_sft" in tokens else "ppo"
    start = tokens.index(f"openrlhf.cli.train_{'sft' if entry == 'sft' else 'ppo_ray'}") + 1
    return tokens[start:], parse_args(tokens[start:], entry).args


@pytest.mark.parametrize("name", SCRIPTS)
def test_dry_run_passes_the_real_parser(name, patched_root, data_dir, tmp_path, monkeypatch):
    args = ("--preset", "fast", "--dry-run") if name == "train_grpo_small.sh" else ("--dry-run",)
    res = run_script(name, script_env(patched_root, data_dir, tmp_path), *args)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "flags: accepted by OpenRLHF's own parser" in res.stderr
    assert "ERROR" not in res.stderr
    lines = res.stdout.strip().splitlines()
    assert all(ln.endswith(" \\") for ln in lines[:-1]) and all(ln.startswith("    --") for ln in lines[1:])
    argv, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert len({t for t in argv if t.startswith("--")}) == sum(t.startswith("--") for t in argv)  # no repeats
    if a.eval_dataset:
        assert "disjoint by problem hash" in res.stderr
    if name != "train_sft.sh":
        assert "LR preflight: " in res.stderr
        assert a.remote_rm_url == [str(ROOT / "reward_func_em.py")]
    if "gpt-oss" in a.pretrain:
        assert a.attn_implementation == "eager" and not a.packing_samples
        assert a.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    recipe = recipe_20b(data_dir)
    expected = {
        "train_grpo_20b.sh": dict(recipe, pretrain="openai/gpt-oss-20b", vllm_pretrain="openai/gpt-oss-20b"),
        # the guide's 120b column: eps_clip 0.1, not the attempt-26 0.2 of train_grpo_20b.sh
        "train_grpo_120b.sh": dict(recipe, lora_rank=64, lora_alpha=128, actor_learning_rate=1e-6, init_kl_coef=0.0,
                                   rollout_batch_size=8, train_batch_size=8, generate_max_len=3072, eps_clip=0.1,
                                   lr_warmup_ratio=0.03, num_episodes=50, offload=True, adam_offload=True,
                                   gradient_checkpointing_use_reentrant=True,
                                   pretrain=str(tmp_path / "disk" / "models" / "gpt-oss-120b-bf16"),
                                   vllm_pretrain="openai/gpt-oss-120b"),
        "train_grpo_20b_a27.sh": dict(recipe, eps_clip=0.1),
        "train_grpo_20b_a28a.sh": dict(recipe, eps_clip=0.2, num_episodes=1,
                                       prompt_data=str(data_dir / "sft_rl_pool_400.jsonl")),
        "train_grpo_20b_a28b.sh": dict(recipe, eps_clip=0.1, num_episodes=1,
                                       prompt_data=str(data_dir / "sft_rl_pool_400.jsonl")),
        "train_grpo_small.sh": dict(colocate_all_models=True, vllm_enable_sleep=True, deepspeed_enable_sleep=True,
                                    actor_num_gpus_per_node=1, vllm_num_engines=1, vllm_tensor_parallel_size=1,
                                    max_samples=200, n_samples_per_prompt=2, generate_max_len=256,
                                    enable_vllm_is_correction=True),
        "train_sft.sh": dict(lora_rank=32, lora_alpha=64, output_key="output", attn_implementation="eager",
                             dataset=str(data_dir / "sft_train.jsonl"), gradient_checkpointing=True),
    }[name]
    # Logs from the environment; the run record goes next to them.
    for var in ("METRICS_LOG_DIR",) if name == "train_sft.sh" else ("METRICS_LOG_DIR", "SAMPLES_LOG_DIR", "SPIKE_LOG_PATH"):
        assert f"env   {var}={tmp_path}" in res.stderr, var
    if name.startswith("train_grpo_20b") or name == "train_grpo_120b.sh":  # checkpoints on the data disk
        assert a.save_path.startswith(str(tmp_path / "disk")) and a.ckpt_path.startswith(str(tmp_path / "disk"))
    assert "chat_date " in res.stderr and "--chat-date" in res.stderr
    for key, value in expected.items():
        assert getattr(a, key) == value, key
    if name == "train_grpo_120b.sh":  # the bf16 copy is not made yet: the launch names the conversion command
        assert f"convert_mxfp4.py openai/gpt-oss-120b {a.pretrain}" in res.stderr
    if "a28" in name:
        assert a.prompt_data == str(data_dir / "sft_rl_pool_400.jsonl")
        assert "200 scheduler steps" in res.stderr


def test_two_nodes_120b_puts_the_actor_on_8_gpus_without_offload_and_prints_its_plan(
    patched_root, data_dir, tmp_path, monkeypatch
):
    env = script_env(patched_root, data_dir, tmp_path)
    res = run_script("train_grpo_120b.sh", {**env, "NODES": "2"}, "--dry-run")
    assert res.returncode == 0, res.stdout + res.stderr
    _, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert (a.actor_num_gpus_per_node, a.vllm_num_engines, a.vllm_tensor_parallel_size) == (8, 4, 2)
    assert not a.offload and not a.adam_offload and a.gradient_checkpointing_use_reentrant  # LoRA under ZeRO-3
    assert "needs 16 GPU(s)" in res.stderr
    assert "27.20 GiB  exact     GPU                    frozen bf16 weights, ZeRO-3 partition: 2 B x 116.83B / 8" in (
        res.stderr
    )
    assert "on each GPU of 79.6 GiB: fits" in res.stderr and "memory plan: the actor does not fit" not in res.stderr
    # the one-node layout without offload is over by the same plan
    one = run_script("train_grpo_120b.sh", env, "--dry-run", "--no_offload", "--no_adam_offload")
    assert "does NOT fit" in one.stderr and "memory plan: the actor does not fit" in one.stderr
    bad = run_script("train_grpo_120b.sh", {**env, "NODES": "3"}, "--dry-run")
    assert bad.returncode == 2 and "NODES=3: expected 1 or 2" in bad.stderr


def test_command_line_overrides_script(patched_root, data_dir, tmp_path, monkeypatch):
    env = script_env(patched_root, data_dir, tmp_path)
    res = run_script("train_grpo_20b.sh", env, "--dry-run", "--num_episodes", "50", "--actor_learning_rate", "1e-6")
    assert res.returncode == 0, res.stderr
    argv, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert (a.num_episodes, a.actor_learning_rate) == (50, 1e-6)
    assert argv.count("--num_episodes") == 1
    # A store_true flag the script sets is turned off by --no_<flag>, also through a wrapper script.
    res = run_script("train_grpo_20b.sh", env, "--no_gradient_checkpointing", "--dry-run")
    assert res.returncode == 0 and "--gradient_checkpointing" not in res.stdout.split(), res.stderr
    assert "--no_gradient_checkpointing" not in res.stdout
    res = run_script("train_grpo_120b.sh", env, "--dry-run", "--no_enable_vllm_is_correction", "--no_save_hf_ckpt")
    assert res.returncode == 0 and "--enable_vllm_is_correction" not in res.stdout and "--save_hf_ckpt" not in res.stdout
    # the last of the pair wins
    res = run_script("train_grpo_20b.sh", env, "--dry-run", "--no_save_hf_ckpt", "--save_hf_ckpt")
    assert res.returncode == 0 and res.stdout.count("--save_hf_ckpt") == 1
    # a --no_ of a flag that takes a value is an error naming it
    res = run_script("train_grpo_20b.sh", env, "--dry-run", "--no_eps_clip")
    assert res.returncode == 2 and "--no_eps_clip: --eps_clip is not a store_true flag" in res.stderr


def test_a_removed_variable_still_set_refuses_the_launch(patched_root, data_dir, tmp_path):
    """Not silently ignored: one line per variable, its new way and the page's row, before any check or command."""
    env = {**script_env(patched_root, data_dir, tmp_path), "REWARD_FUNC": str(tmp_path / "r.py"), "OFFLOAD": "0"}
    for name in ("train_grpo_20b.sh", "train_grpo_cpu.sh"):
        res = run_script(name, env, "--dry-run")
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and res.stdout == "", res.stderr
        assert lines[-2:] == [
            f"launch refused: OFFLOAD is set but not read: OFFLOAD=0 is now --no_offload ({PAGE}); unset it",
            f"launch refused: REWARD_FUNC is set but not read: REWARD_FUNC=path is now REWARD=path ({PAGE}); "
            "unset it",
        ], name


def test_lora_sync_switch_merge_or_native(patched_root, data_dir, tmp_path, monkeypatch):
    env = script_env(patched_root, data_dir, tmp_path)
    res = run_script("train_grpo_20b.sh", env, "--dry-run")
    assert res.returncode == 0 and "LoRA sync: merge" in res.stdout + res.stderr
    res = run_script("train_grpo_20b.sh", {**env, "LORA_SYNC": "native"}, "--dry-run")
    assert res.returncode == 0, res.stderr
    out = res.stdout + res.stderr
    assert "LoRA sync: native" in out and "max_lora_rank 32" in out and "Triton" in out  # gpt-oss warning
    argv, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert a.vllm_sync_lora_native and a.vllm_sync_lora_via_object_store
    res = run_script("train_grpo_20b.sh", {**env, "LORA_SYNC": "fused"}, "--dry-run")
    assert res.returncode == 2 and "LORA_SYNC=fused: expected merge or native" in res.stderr


def test_dynamic_filter_switch_picks_the_range_for_the_reward(patched_root, data_dir, tmp_path, monkeypatch):
    """DYNAMIC_FILTER=1: the score rule for exact match (scores are 0/1), the correctness rule for the judge
    (a right answer pays 0.8-1.0) and the signed scheme; --prompt_history goes through as given; the run length
    note names the unchanged step count."""
    env = script_env(patched_root, data_dir, tmp_path)
    res = run_script("train_grpo_20b.sh", {**env, "DYNAMIC_FILTER": "1"}, "--dry-run", "--prompt_history")
    assert res.returncode == 0, res.stderr
    argv, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert a.dynamic_filtering and a.dynamic_filtering_key == "score" and a.prompt_history
    assert tuple(a.dynamic_filtering_reward_range) == (0.0, 1.0)
    assert "the run still does" in res.stdout + res.stderr
    signed = write_reward_toml(tmp_path / "signed.toml", reward={"scheme": "signed"})
    res = run_script("train_grpo_20b.sh", {**env, "DYNAMIC_FILTER": "1", "RFT_REWARD_CONFIG": str(signed)}, "--dry-run")
    argv, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert a.dynamic_filtering_key == "correctness" and not a.prompt_history
    res = run_script("train_grpo_20b.sh", {**env, "DYNAMIC_FILTER": "2"}, "--dry-run")
    assert res.returncode == 2 and "DYNAMIC_FILTER=2: expected 0 or 1" in res.stderr
    res = run_script("train_grpo_20b.sh", env, "--dry-run")
    assert "--dynamic_filtering" not in res.stdout and "--prompt_history" not in res.stdout


def test_bad_flag_is_named(patched_root, data_dir, tmp_path):
    env = script_env(patched_root, data_dir, tmp_path)
    res = run_script("train_grpo_20b.sh", env, "--dry-run", "--eps_clipp_typo", "0.1")
    assert res.returncode == 1
    assert "unrecognized arguments: --eps_clipp_typo 0.1" in res.stderr
    res = run_script("train_grpo_20b_a27.sh", env, "--dry-run", "--lora_rank", "many")
    assert res.returncode == 1 and "argument --lora_rank: invalid int value: 'many'" in res.stderr


@pytest.mark.parametrize("extra,needle", [
    (["--packing_samples"], "--packing_samples with gpt-oss"),
    (["--use_dynamic_batch"], "--use_dynamic_batch (which turns on --packing_samples)"),
    (["--attn_implementation", "flash_attention_2"], "flash_attention_2 drops gpt-oss attention sinks"),
])
def test_gpt_oss_attention_rule(extra, needle, patched_root, data_dir, tmp_path):
    res = run_script("train_grpo_20b.sh", script_env(patched_root, data_dir, tmp_path), "--dry-run", *extra)
    assert res.returncode == 1 and needle in res.stderr, res.stderr


def test_data_problems_are_refused(patched_root, data_dir, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in data_dir.iterdir():
        shutil.copy(f, bad / f.name)
    leak = rows("pool", 16)[7:9] + rows("ood", 3)  # two training problems in the eval set
    atomic_write_jsonl(bad / "probe_set_200_ood.jsonl", leak)
    env = script_env(patched_root, bad, tmp_path)
    res = run_script("train_grpo_20b.sh", env, "--dry-run")
    assert res.returncode == 1 and "train and eval share 2 problems" in res.stderr
    assert "sft_rl_pool.jsonl:8 = " in res.stderr and "probe_set_200_ood.jsonl:1" in res.stderr
    pool = rows("pool", 16)
    del pool[4]["label"]
    atomic_write_jsonl(bad / "sft_rl_pool.jsonl", pool)
    res = run_script("train_grpo_20b.sh", env, "--dry-run", "--eval_dataset", str(data_dir / "probe_set_200_ood.jsonl"))
    assert res.returncode == 1 and "sft_rl_pool.jsonl:5: missing or empty key 'label'" in res.stderr


def test_lr_preflight_failure_aborts(patched_root, data_dir, tmp_path):
    res = run_script("train_grpo_20b.sh", script_env(patched_root, data_dir, tmp_path), "--dry-run",
                     "--lr_warmup_ratio", "0.9")
    assert res.returncode == 1 and "LR preflight: total scheduler steps 160 < warm-up 144 + 20" in res.stderr


@pytest.mark.slow
def test_full_pool_attempt26_schedule_is_refused(patched_root, data_dir, tmp_path):
    """The attempt-26 recipe on the full 50k pool warms up for 25,000 scheduler steps: the preflight refuses it."""
    big = tmp_path / "big"
    shutil.copytree(data_dir, big)
    atomic_write_jsonl(big / "sft_rl_pool.jsonl", [{"input": f"p{i}", "label": "1"} for i in range(50_000)])
    res = run_script("train_grpo_20b.sh", script_env(patched_root, big, tmp_path), "--dry-run")
    assert res.returncode == 1
    assert "total scheduler steps     500000" in res.stderr and "warm-up steps             25000" in res.stderr
    assert "LR preflight: LR after scheduler step 20 is" in res.stderr
    # The refusal names what passes; each named value passes the launcher's own checks.
    assert "--lr_warmup_ratio 0.00013 " in res.stderr and "--max_samples 128 " in res.stderr
    for fix in (["--lr_warmup_ratio", "0.00013"], ["--max_samples", "128"]):
        again = run_script("train_grpo_20b.sh", script_env(patched_root, big, tmp_path), "--dry-run", *fix)
        assert again.returncode == 0, (fix, again.stderr)
    ok = run_script("train_grpo_20b_a28b.sh", script_env(patched_root, big, tmp_path), "--dry-run")
    assert ok.returncode == 0, ok.stderr


def test_missing_data_is_reported_not_fatal_in_dry_run(patched_root, tmp_path):
    res = run_script("train_grpo_20b.sh", script_env(patched_root, tmp_path / "nowhere", tmp_path), "--dry-run")
    assert res.returncode == 0
    assert "NEEDS train file" in res.stderr and "a launch here would be refused" in res.stderr


def test_small_presets_and_resume(patched_root, data_dir, tmp_path, monkeypatch):
    env = script_env(patched_root, data_dir, tmp_path)
    seen = {}
    for preset in ("fast", "1hour", "3hour", "full"):
        res = run_script("train_grpo_small.sh", env, "--preset", preset, "--dry-run")
        assert res.returncode == 0, res.stderr
        _, a = parsed_command(res.stdout, patched_root, monkeypatch)
        seen[preset] = (a.max_samples, a.num_episodes, a.n_samples_per_prompt, a.generate_max_len)
        assert not a.load_checkpoint
    assert seen["fast"] == (200, 1, 2, 256) and seen["3hour"] == (1000, 3, 4, 512)
    assert len(set(seen.values())) == 4
    assert run_script("train_grpo_small.sh", env, "--preset", "weekly", "--dry-run").returncode == 2
    # The TRL guide's preset: LoRA r16/a32/dropout 0.05, KL 0.05, LR 5e-6, T 0.7, top_p 0.9, 2048 tokens, the
    # signed reward, 16 samples per optimizer step; LoRA weights through LORA_SYNC like the 20b scripts.
    res = run_script("train_grpo_small.sh", env, "--preset", "trl", "--dry-run")
    assert res.returncode == 0, res.stderr
    _, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert (a.lora_rank, a.lora_alpha, a.lora_dropout, a.init_kl_coef, a.actor_learning_rate) == (16, 32, 0.05, 0.05, 5e-6)
    assert (a.temperature, a.top_p, a.generate_max_len, a.n_samples_per_prompt, a.num_episodes) == (0.7, 0.9, 2048, 2, 3)
    assert (a.train_batch_size, a.micro_train_batch_size) == (16, 4)
    assert a.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert a.vllm_sync_lora_via_object_store and not a.vllm_sync_lora_native
    native = run_script("train_grpo_small.sh", {**env, "LORA_SYNC": "native"}, "--preset", "trl", "--dry-run")
    assert native.returncode == 0 and parsed_command(native.stdout, patched_root, monkeypatch)[1].vllm_sync_lora_native
    full = run_script("train_grpo_small.sh", {**env, "LORA_SYNC": "native"}, "--preset", "fast", "--dry-run")
    assert full.returncode == 2 and "LORA_SYNC=native applies to LoRA runs" in full.stderr
    ckpt = tmp_path / "runs" / "small-grpo-gsm8k-fast" / "ckpt" / "_actor"
    ckpt.mkdir(parents=True)
    (ckpt / "latest").write_text("global_step10")
    res = run_script("train_grpo_small.sh", env, "--preset", "fast", "--dry-run")
    assert res.returncode == 0 and "--load_checkpoint" in res.stdout and "resuming from" in res.stderr


@pytest.mark.parametrize("name", ["train_grpo_20b_a28a.sh", "train_grpo_120b.sh"])
def test_gpt_oss_scripts_resume_by_default(name, patched_root, data_dir, tmp_path, monkeypatch):
    """DeepSpeed checkpoints are on; a relaunch adds --load_checkpoint once a complete save (`latest`) exists."""
    env = script_env(patched_root, data_dir, tmp_path)
    fresh = run_script(name, env, "--dry-run")
    assert fresh.returncode == 0, fresh.stderr
    _, a = parsed_command(fresh.stdout, patched_root, monkeypatch)
    assert not a.disable_ds_ckpt and not a.load_checkpoint and "resuming from" not in fresh.stderr
    actor = Path(a.ckpt_path) / "_actor"
    actor.mkdir(parents=True)  # killed in its first save: 0.9.3 would raise on --load_checkpoint
    assert "--load_checkpoint" not in run_script(name, env, "--dry-run").stdout
    (actor / "latest").write_text("global_step15")
    res = run_script(name, env, "--dry-run")
    assert res.returncode == 0 and f"resuming from {actor} (global_step15)" in res.stderr
    assert parsed_command(res.stdout, patched_root, monkeypatch)[1].load_checkpoint
    fresh = run_script(name, env, "--dry-run", "--no_load_checkpoint")
    assert "--load_checkpoint" not in fresh.stdout and "resume: no (--no_load_checkpoint)" in fresh.stderr
    refused = run_script(name, {**env, "RESUME": "0"}, "--dry-run")
    assert refused.returncode == 2 and "RESUME=0 is now --no_load_checkpoint" in refused.stderr
    off = run_script(name, env, "--dry-run", "--no_load_checkpoint", "--disable_ds_ckpt")
    assert parsed_command(off.stdout, patched_root, monkeypatch)[1].disable_ds_ckpt


def test_take_pool_leaves_the_openrlhf_flags():
    """`--pool N` is the launcher's (the LR preflight's pool when the data is elsewhere): taken out, the last wins;
    a value that is not a count is refused by name."""
    assert cli.take_pool(["--seed", "1", "--pool", "40", "--pool", "400", "--num_episodes", "2"]) == (
        ["--seed", "1", "--num_episodes", "2"], 400)
    assert cli.take_pool(["--seed", "1"]) == (["--seed", "1"], None)
    for bad in (["--pool"], ["--pool", "many"]):
        with pytest.raises(FlagError, match="^--pool .*: expected the number of prompts$"):
            cli.take_pool(bad)


def test_resolve_overrides_expands_abbreviations():
    argv = ["--eps_clip", "0.2", "--target_modules", "q", "k", "--eps_clip=0.1", "--num_ep", "3", "--num_episodes", "4"]
    assert resolve_overrides(argv) == ["--eps_clip", "0.1", "--target_modules", "q", "k", "--num_episodes", "4"]


def test_negations_remove_the_pair_and_the_last_one_wins(patched_root, monkeypatch):
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    assert "--gradient_checkpointing" in store_true_flags() and "--eps_clip" not in store_true_flags()
    base = ["--gradient_checkpointing", "--eps_clip", "0.1", "--offload"]
    assert apply_negations([*base, "--no_gradient_checkpointing"]) == ["--eps_clip", "0.1", "--offload"]
    # on again after the --no_: in the place of the pair's first occurrence, once
    assert apply_negations([*base, "--no_gradient_checkpointing", "--gradient_checkpointing"]) == base
    assert apply_negations(["--no_offload", "--lora_rank", "4", "--offload", "--offload"]) == ["--offload", "--lora_rank",
                                                                                               "4"]
    assert apply_negations(["--no_load_checkpoint"]) == []  # turning off a flag nobody set is no error
    assert apply_negations(["--no_save_hf_ckpt"], "sft") == []
    for bad, flag in ((["--no_eps_clip", "0.1"], "--eps_clip"), (["--no_nothing_at_all"], "--nothing_at_all")):
        with pytest.raises(FlagError, match=f"{bad[0]}: {flag} is not a store_true flag of OpenRLHF train_ppo_ray.py"):
            apply_negations(bad)


def test_parser_errors_are_flag_errors():
    with pytest.raises(FlagError, match="unrecognized arguments: --nope"):
        parse_args(["--nope"])
    with pytest.raises(FlagError, match="requires n_samples_per_prompt > 1"):
        parse_args(["--pretrain", "m", "--remote_rm_url", "r", "--advantage_estimator", "group_norm"])


NODE_DISK_FREE_GIB = 3000.0
NODE_RAM_GIB = 1900.0  # the 8xH100 node's MemAvailable (host_ram_rule); this machine has far less


FAKE_SMI = """#!/usr/bin/env bash
# stand-in for the 8xH100 node's nvidia-smi (the only hardware piece this test lacks)
if [[ "$1" == topo ]]; then cat "$(dirname "$0")/topo.txt"; exit; fi
for i in 0 1 2 3 4 5 6 7; do echo "$i, NVIDIA H100 80GB HBM3, 81559"; done
"""


def test_launch_workflow_tags_and_records(repo, patched_root, data_dir, tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    (bin_dir / "topo.txt").write_text((ROOT / "tests" / "provision" / "topo" / "h100_sxm_nv18.txt").read_text())
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    # stand-in for the node's data disk: this machine's /tmp may hold less than the 50 GiB the 20b profile asks
    monkeypatch.setattr(host, "free_gib", lambda path: NODE_DISK_FREE_GIB)
    monkeypatch.setattr(host, "mem_available_gib", lambda: NODE_RAM_GIB)
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    monkeypatch.setenv("METRICS_LOG_DIR", str(tmp_path / "records"))
    monkeypatch.setenv("RUN_NAME", "a07")
    monkeypatch.setenv("RFT_LAUNCH_NO_EXEC", "1")
    monkeypatch.delenv("ATTEMPT", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RFT_DEVICE_FIGURES", raising=False)
    reward = repo / "reward_func_em.py"
    reward.write_text("def reward_func(q, p, l):\n    return 0\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "reward")
    monkeypatch.setenv("REWARD", str(reward))  # the launcher puts it in front: --remote_rm_url REWARD
    for name in ("DYNAMIC_FILTER", "LORA_SYNC", "SMOKE"):
        monkeypatch.delenv(name, raising=False)
    flags = ["--remote_rm_url", str(reward), "--pretrain", "openai/gpt-oss-20b", "--prompt_data",
             str(data_dir / "sft_rl_pool.jsonl"), "--eval_dataset", str(data_dir / "probe_set_200_ood.jsonl"),
             "--input_key", "input", "--label_key", "label", "--advantage_estimator", "dr_grpo",
             "--attn_implementation", "eager", "--n_samples_per_prompt", "8", "--rollout_batch_size", "16",
             "--train_batch_size", "16", "--num_episodes", "20", "--vllm_num_engines", "2",
             "--vllm_tensor_parallel_size", "2", "--actor_num_gpus_per_node", "4", "--ref_num_gpus_per_node", "4",
             "--colocate_actor_ref", "--save_path", str(tmp_path / "out"), "--ckpt_path", str(tmp_path / "ckpt")]
    # Dirty tree: refused, nothing tagged, no record.
    (repo / "reward.toml").write_text("[judge]\n")  # untracked configuration: it changes a run
    assert cli.main(["--profile", "20b", "--repo", str(repo), "--", *flags]) == 1
    assert "working tree is dirty" in capsys.readouterr().err
    assert git(repo, "tag", "--list") == "" and not list((tmp_path / "records").glob("run_record_*.json"))
    assert not (repo / "runs").exists()  # no pointer either
    (repo / "reward.toml").unlink()
    # Without the colocated reference the placement asks for 12 GPUs: refused on the 8-GPU node.
    no_coloc = [f for f in flags if f != "--colocate_actor_ref"]
    assert cli.main(["--profile", "20b", "--repo", str(repo), "--", *no_coloc]) == 1
    assert "the command places 12 GPUs, this node has 8" in capsys.readouterr().err
    # Clean: tag created, command and facts recorded.
    assert cli.main(["--profile", "20b", "--repo", str(repo), "--", *flags]) == 0
    out = capsys.readouterr()
    assert "tag attempt-07-start created" in out.err
    assert git(repo, "tag", "--list") == "attempt-07-start"
    # The run's pointer: what monitor.sh, spare.py and rft.attempt resolve --run NAME (or the latest run) from.
    run = find_run(repo, "a07")
    assert (run.metrics_dir, run.ckpt_path, run.save_path) == (tmp_path / "records", tmp_path / "ckpt", tmp_path / "out")
    (record_path,) = (tmp_path / "records").glob("run_record_*.json")
    record = json.loads(record_path.read_text())
    assert record["command"][1:3] == ["-m", "openrlhf.cli.train_ppo_ray"] and record["command"][3:] == flags
    assert record["git_sha"] == git(repo, "rev-parse", "HEAD")
    assert record["data_sha256"][str(data_dir / "sft_rl_pool.jsonl")] == sha256_file(data_dir / "sft_rl_pool.jsonl")
    assert record["data_sha256"][str(reward)] == sha256_file(reward)
    assert record["packages"]["openrlhf"] == "0.9.3" and record["patches"]["applied"] is True
    assert len(record["gpus"]) == 8 and record["gpus"][0]["memory_gib"] == 79.6
    assert record["gpu_topology"].splitlines()[1].startswith("GPU0\t X \tNV18") and record["nccl_env"]["NCCL_DEBUG"] == "WARN"
    assert "GPU topology" not in out.err and "NCCL_P2P_DISABLE" not in out.err
    assert "LR preflight: OK" in record["lr_preflight"]
    assert record["loss_aggregation"] == "dr_grpo_constant"  # the estimator's default (rft.train.loss_aggregation)
    # the step-time model's phases, the monitor's contract (rft.plan.step_time; the names of the time_*_s keys)
    predicted = record["predicted_step_s"]
    assert sorted(predicted) == sorted(["generate", "reward", "logprob", "train", "sync", "eval", "save", "other",
                                        "step"])
    assert predicted["step"] == pytest.approx(sum(v for k, v in predicted.items() if k != "step"), abs=0.5)
    low, high = record["predicted_step_range_s"]
    assert low < predicted["step"] < high
    assert "predicted step time:" in out.err
    # The date gpt-oss's template writes into the training prompts, for eval_posthoc.py --chat-date.
    today = datetime.date.today().isoformat()
    assert record["chat_date"] == today and record["started_local"].startswith(today)
    assert f"chat_date {today}" in out.err and f"--chat-date {today}" in out.err
    assert parse_command_text(out.out.strip())[3:] == flags


def test_real_launch_without_gpus_says_so(patched_root, data_dir, tmp_path):
    env = script_env(patched_root, data_dir, tmp_path)
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists())
    tags_before = git(ROOT, "tag", "--list")
    res = run_script("train_grpo_20b.sh", env)
    assert res.returncode == 1
    assert "nvidia-smi found none on this machine" in res.stderr and "launch refused" in res.stderr
    assert git(ROOT, "tag", "--list") == tags_before


def test_data_that_is_not_jsonl_is_named(patched_root, data_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(data_dir, bad)
    (bad / "probe_set_200_ood.jsonl").write_text('{"input": "x", "label": "1"}\n{"input": "y", "lab\n')
    res = run_script("train_grpo_20b.sh", script_env(patched_root, bad, tmp_path), "--dry-run")
    assert res.returncode == 1 and "probe_set_200_ood.jsonl:2: not valid JSON" in res.stderr, res.stderr
    (bad / "probe.csv").write_text("input,label\n")
    res = run_script("train_grpo_20b.sh", script_env(patched_root, bad, tmp_path, EVAL_DATA=str(bad / "probe.csv")),
                     "--dry-run")
    assert res.returncode == 1 and f"{bad / 'probe.csv'}: expected a local .jsonl file" in res.stderr


def test_multi_node_by_flags_on_an_existing_cluster(patched_root, data_dir, tmp_path, monkeypatch):
    """Two nodes: flags only; RAY_ADDRESS joins the cluster; log dirs come from the environment."""
    env = script_env(patched_root, data_dir, tmp_path, RAY_ADDRESS="10.0.0.1:6379",
                     METRICS_LOG_DIR=str(tmp_path / "m"))
    res = run_script("train_grpo_20b.sh", env, "--dry-run", "--actor_num_nodes", "2", "--ref_num_nodes", "2",
                     "--vllm_num_engines", "4")
    assert res.returncode == 0, res.stderr
    _, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert (a.actor_num_nodes, a.ref_num_nodes, a.vllm_num_engines) == (2, 2, 4)
    assert rules.gpus_needed(a) == 16
    assert "env   RAY_ADDRESS=10.0.0.1:6379" in res.stderr
    assert f"env   METRICS_LOG_DIR={tmp_path / 'm'}" in res.stderr
    assert f"env   SPIKE_LOG_PATH={tmp_path / 'm' / 'spike_log.jsonl'}" in res.stderr


def test_reward_switch_and_judge_dry_run(patched_root, data_dir, tmp_path, monkeypatch):
    """REWARD=judge picks reward_func_judge.py; the dry run checks credentials and makes one live call."""
    base = script_env(patched_root, data_dir, tmp_path, REWARD="judge", HOME=str(tmp_path))
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        base.pop(name, None)
    res = run_script("train_grpo_20b.sh", base, "--dry-run")
    assert res.returncode == 0, res.stderr
    tokens, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert a.remote_rm_url == [str(ROOT / "reward_func_judge.py")]
    assert "NEEDS judge: no Gemini credentials" in res.stderr and "judge cost estimate" in res.stderr
    with JudgeServer() as server:
        settings = write_reward_toml(tmp_path / "reward.toml", judge={"base_url": server.url, "retries": 0})
        env = {**base, "GOOGLE_API_KEY": "k", "RFT_REWARD_CONFIG": str(settings)}
        res = run_script("train_grpo_120b.sh", env, "--dry-run")
        assert "ok    judge: live call answered by gemini-3.1-pro-preview" in res.stderr, res.stderr
        assert len(server.requests) == 1
        res = run_script("train_grpo_small.sh", env, "--preset", "fast", "--dry-run", "--no-judge-check")
        assert "live call skipped" in res.stderr and len(server.requests) == 1
    assert run_script("train_grpo_20b.sh", {**base, "REWARD": "gemini"}, "--dry-run").returncode != 0
    res = run_script("train_grpo_20b.sh", {**base, "REWARD": "em"}, "--dry-run")
    assert "judge:" not in res.stderr and "reward_func_em.py" in res.stdout


FAKE_SMI_8 = """#!/usr/bin/env bash
# stand-in for the 8xH100 node's nvidia-smi: `-L` and the CSV query the launcher reads
for i in 0 1 2 3 4 5 6 7; do
    if [[ "${1:-}" == -L ]]; then echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-$i)"
    else echo "$i, NVIDIA H100 80GB HBM3, 81559"; fi
done
"""


def fake_gpu_path(tmp_path: Path) -> str:
    """PATH with a fake nvidia-smi listing 8 H100s first."""
    bin_dir = tmp_path / "gpubin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI_8)
    (bin_dir / "nvidia-smi").chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def test_standins_rule_keeps_the_cpu_profile_and_the_gpu_profiles_apart():
    h100 = [{"index": 0, "name": "NVIDIA H100", "memory_gib": 79.6}]
    cpu, gpu = rules.PROFILES["cpu"], rules.PROFILES["20b"]
    assert rules.standins_rule(cpu, {}, None) == [] and rules.standins_rule(cpu, {}, []) == []
    assert "CPU profile on a GPU node: nvidia-smi lists 1 GPU(s)" in rules.standins_rule(cpu, {}, h100)[0]
    assert rules.standins_rule(gpu, {"PYTHONPATH": str(ROOT)}, h100) == []
    (err,) = rules.standins_rule(gpu, {"RFT_CPU_STANDINS": "1"}, h100)
    assert "RFT_CPU_STANDINS=1 is set" in err
    (err,) = rules.standins_rule(gpu, {"PYTHONPATH": f"{ROOT}:/elsewhere/rft/cpu/site"}, h100)
    assert "PYTHONPATH holds /elsewhere/rft/cpu/site" in err


def test_cpu_profile_is_refused_on_a_gpu_node(patched_root, data_dir, tmp_path):
    """With nvidia-smi listing 8 GPUs neither the CPU script nor RFT_PROFILE=cpu on a GPU script gets through:
    the launcher refuses the profile before anything else (rules.standins_rule holds the same line in the checks)."""
    env = script_env(patched_root, data_dir, tmp_path, PATH=fake_gpu_path(tmp_path))
    for name, extra in (("train_grpo_cpu.sh", {}), ("train_grpo_20b.sh", {"RFT_PROFILE": "cpu"})):
        res = run_script(name, {**env, **extra}, "--dry-run")
        assert res.returncode == 1 and "CPU profile: refused: nvidia-smi lists 8 GPU(s)" in res.stderr, name
        assert res.stdout == ""


def test_gpu_profile_refuses_the_cpu_standins(patched_root, data_dir, tmp_path):
    env = script_env(patched_root, data_dir, tmp_path, PATH=fake_gpu_path(tmp_path))
    res = run_script("train_grpo_20b.sh", {**env, "RFT_CPU_STANDINS": "1"}, "--dry-run")
    assert res.returncode == 1 and "ERROR RFT_CPU_STANDINS=1 is set" in res.stderr
    site = str(ROOT / "rft" / "cpu" / "site")
    res = run_script("train_grpo_120b.sh", {**env, "PYTHONPATH": site}, "--dry-run")
    assert res.returncode == 1 and f"ERROR PYTHONPATH holds {site}" in res.stderr


@pytest.mark.parametrize("name", ["train_grpo_20b.sh", "train_grpo_120b.sh"])
def test_gpu_scripts_log_the_gap_and_smoke_dry_run_shows_the_smoke_layout(name, patched_root, data_dir, tmp_path,
                                                                         monkeypatch):
    env = script_env(patched_root, data_dir, tmp_path, PATH=fake_gpu_path(tmp_path))
    res = run_script(name, env, "--dry-run")
    assert res.returncode == 0 and "    --enable_vllm_is_correction \\" in res.stdout, res.stderr
    res = run_script(name, {**env, "SMOKE": "1"}, "--dry-run")
    assert res.returncode == 0, res.stderr
    argv, a = parsed_command(res.stdout, patched_root, monkeypatch)
    # the first launch: to the resume step (1), saved there; the supervisor relaunches with --load_checkpoint
    assert (a.max_samples, a.eval_steps, a.save_steps, a.actor_learning_rate) == (a.rollout_batch_size, -1, 1, 1e-4)
    assert a.lora_sync_probe and a.enable_vllm_is_correction and "--load_checkpoint" not in argv
    assert a.vllm_call_timeout == 300 and a.lora_sync_probe_recipe_lr < 1e-4  # the recipe's own LR
    # the recipe's layout and engines are kept
    assert (a.vllm_num_engines, a.vllm_tensor_parallel_size, a.actor_num_gpus_per_node) == (2, 2, 4)
    assert a.ckpt_path.endswith("-smoke") and "smoke run: " in res.stderr and "no attempt tag" in res.stderr
    data_root = env.get("DATA_ROOT", "/mnt/data")
    assert f"caches: HF_HOME={data_root}/cache/hf, TORCH_EXTENSIONS_DIR={data_root}/cache/torch_extensions" in res.stderr


def test_smoke_needs_a_lora_sync(patched_root, data_dir, tmp_path):
    res = run_script("train_grpo_small.sh", script_env(patched_root, data_dir, tmp_path, SMOKE="1"), "--dry-run")
    assert res.returncode == 1 and "SMOKE=1 checks the LoRA sync to vLLM" in res.stderr
    res = run_script("train_sft.sh", script_env(patched_root, data_dir, tmp_path, SMOKE="1"), "--dry-run")
    assert res.returncode == 1 and "an SFT launch has no smoke run" in res.stderr, res.stderr[-2000:]


def test_a_smoke_run_of_the_small_script_has_its_own_run_directory(patched_root, data_dir, tmp_path):
    env = script_env(patched_root, data_dir, tmp_path)
    real = run_script("train_grpo_small.sh", env, "--preset", "trl", "--dry-run")
    smoke = run_script("train_grpo_small.sh", {**env, "SMOKE": "1"}, "--preset", "trl", "--dry-run")
    assert real.returncode == 0 and smoke.returncode == 0, real.stderr[-2000:] + smoke.stderr[-2000:]
    assert "small-grpo-" in real.stdout and "-smoke" not in real.stdout
    assert "-trl-smoke/" in smoke.stdout  # its metrics, checkpoints and model never land in the real run's


def test_the_levers_pass_the_cpu_loops_checks(patched_root, data_dir, tmp_path, monkeypatch):
    """`--zero_stage 2` with LoRA, `--async_train` and `--ref_from_actor` on the CPU script: accepted by OpenRLHF's
    parser and every check, each named in the notes; the private Ray then holds no GPU for a reference."""
    env = script_env(patched_root, data_dir, tmp_path)
    res = run_script("train_grpo_cpu.sh", env, "--dry-run", "--zero_stage", "2", "--async_train", "--ref_from_actor")
    assert "ERROR" not in res.stderr, res.stderr
    _, a = parsed_command(res.stdout, patched_root, monkeypatch)
    assert (a.zero_stage, a.async_train, a.ref_from_actor, a.lora_rank) == (2, True, True, 8)
    assert "--zero_stage 2 with LoRA: the frozen base replicated" in res.stderr
    assert "rollouts lag the policy by 1 step(s)" in res.stderr and "no reference model is loaded" in res.stderr
    assert "3 logical GPU(s) in the private Ray" in res.stderr  # actor 2 + vLLM 1, no reference
    plain = run_script("train_grpo_cpu.sh", env, "--dry-run")
    assert "4 logical GPU(s) in the private Ray" in plain.stderr
