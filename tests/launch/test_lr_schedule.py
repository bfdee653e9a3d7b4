"""The LR preflight against transformers' real scheduler and OpenRLHF 0.9.3's real max_steps."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import get_scheduler

from rft.io import atomic_write_jsonl
from rft.launch.lr_schedule import Schedule, count_pool, evaluate, main, suggest
from tests.support.patched_openrlhf import stub_env

ROOT = Path(__file__).resolve().parents[2]

GRID = [
    # pool, n_samples, train_batch, episodes, max_epochs, warmup_ratio, lr
    (p, ns, tbs, ep, me, w, lr)
    for (p, ns, tbs), (ep, me), w, lr in itertools.product(
        [(400, 8, 16), (7, 2, 4), (50, 8, 128), (1000, 1, 8), (33, 4, 3)],
        [(1, 1), (3, 2)],
        [0.0, 0.03, 0.05, 0.5],
        [5e-7, 1e-6, 3e-5],
    )
]


def transformers_lrs(s: Schedule) -> list[float]:
    """LR after 0..total steps from the real transformers scheduler, built the way 0.9.3's ppo_actor builds it."""
    optim = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=s.lr)
    sched = get_scheduler(
        "cosine_with_min_lr",
        optim,
        num_warmup_steps=math.ceil(s.total_steps * s.warmup_ratio),
        num_training_steps=s.total_steps,
        scheduler_specific_kwargs={"min_lr": s.lr * 0.1},
    )
    out = [sched.get_last_lr()[0]]
    for _ in range(s.total_steps):
        optim.step()
        sched.step()
        out.append(sched.get_last_lr()[0])
    return out


@pytest.mark.parametrize("pool,ns,tbs,ep,me,warmup,lr", GRID)
def test_matches_transformers_step_by_step(pool, ns, tbs, ep, me, warmup, lr):
    s = Schedule(pool=pool, n_samples_per_prompt=ns, train_batch_size=tbs, num_episodes=ep, lr=lr,
                 warmup_ratio=warmup, max_epochs=me)
    assert s.total_steps == pool * ns // tbs * ep * me
    ref = transformers_lrs(s)
    assert len(ref) == s.total_steps + 1
    for k, want in enumerate(ref):
        got = s.lr_after(k)
        assert got == pytest.approx(want, rel=1e-12, abs=0.0 if want else 1e-30), (k, got, want)


def test_seed_example_numbers():
    s = Schedule(pool=400, n_samples_per_prompt=8, train_batch_size=16, num_episodes=1, lr=5e-7,
                 warmup_ratio=0.05, rollout_batch_size=16)
    assert (s.total_steps, s.warmup_steps, s.steps_per_rollout, s.rollout_steps) == (200, 10, 8, 25)
    assert s.lr_after(10) == pytest.approx(5e-7, rel=1e-12)
    assert s.lr_after(200) == pytest.approx(5e-8, rel=1e-12)


def test_rules():
    base = dict(n_samples_per_prompt=8, train_batch_size=16, lr=5e-7, rollout_batch_size=16)
    assert evaluate(Schedule(pool=400, num_episodes=1, warmup_ratio=0.05, **base)).ok
    short = evaluate(Schedule(pool=40, num_episodes=1, warmup_ratio=0.05, **base))  # 20 steps, warm-up 1
    assert any("< warm-up 1 + 20" in e for e in short.errors)
    # 100 steps with 80 of warm-up: long enough, but LR after step 20 is 25% of target.
    slow = evaluate(Schedule(pool=200, num_episodes=1, warmup_ratio=0.8, **base))
    assert len(slow.errors) == 1 and "25.0% of the target" in slow.errors[0]
    lora = evaluate(Schedule(pool=400, num_episodes=1, warmup_ratio=0.05, lora_rank=32, **base))
    assert lora.ok and any("LoRA" in w and "1e-05" in w for w in lora.warnings)
    assert not evaluate(Schedule(pool=400, num_episodes=1, warmup_ratio=0.05, lora_rank=32,
                                 **{**base, "lr": 1e-5})).warnings
    empty = evaluate(Schedule(pool=8, num_episodes=5, warmup_ratio=0.05, **base))
    assert any("no rollout step" in e for e in empty.errors)


def test_count_pool_after_max_samples(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    atomic_write_jsonl(a, [{"input": f"q{i}", "label": "1"} for i in range(30)])
    atomic_write_jsonl(b, [{"input": f"r{i}", "label": "1"} for i in range(5)])
    assert count_pool(str(a)) == 30
    assert count_pool(str(a), 12) == 12
    assert count_pool(f"{a},{b}") == 35
    assert count_pool(f"{a},{b}", 20) == 20
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        count_pool(str(tmp_path / "missing.jsonl"))


@pytest.mark.slow
def test_total_steps_equal_openrlhf_prepare_datasets(tmp_path):
    """Run 0.9.3's own prepare_datasets (real datasets loading, real PromptDataset) and compare max_steps."""
    data = tmp_path / "pool.jsonl"
    atomic_write_jsonl(data, [{"input": f"problem {i}", "label": str(i)} for i in range(37)])
    script = textwrap.dedent(f"""
        import argparse
        from openrlhf.trainer.ppo_trainer import prepare_datasets
        from rft.launch.lr_schedule import schedule_from_args
        class Strategy:
            def __init__(self, args): self.args = args
            def print(self, *a): pass
            def is_rank_0(self): return True
            def setup_dataloader(self, *a, **k): return None
        for max_samples, ns, tbs, ep, me in [(1e8, 8, 16, 20, 1), (25, 4, 6, 3, 2), (1e8, 3, 7, 1, 1)]:
            args = argparse.Namespace(prompt_data={str(data)!r}, prompt_data_probs=None, seed=42,
                max_samples=max_samples, prompt_split="train", input_template=None, input_key="input",
                label_key="label", apply_chat_template=False, n_samples_per_prompt=ns, train_batch_size=tbs,
                num_episodes=ep, max_epochs=me, eval_dataset=None, use_ms=False, actor_learning_rate=1e-6,
                lr_warmup_ratio=0.03, rollout_batch_size=8, lora_rank=0, lr_scheduler="cosine_with_min_lr")
            _, _, max_steps = prepare_datasets(Strategy(args), tokenizer=None)
            ours = schedule_from_args(args).total_steps
            print(max_steps, ours)
            assert max_steps == ours, (max_steps, ours)
    """)
    env = {**stub_env(ROOT), "HF_DATASETS_CACHE": str(tmp_path / "hf")}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(res.stdout.split("\n")) >= 3


def run_sh(env_extra: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, **env_extra}
    for var in ("POOL", "NS", "TBS", "EP", "WARMUP", "LR", "RBS", "MAX_EPOCHS", "LORA_RANK"):
        if var not in env_extra:
            env.pop(var, None)
    return subprocess.run(["bash", str(ROOT / "preflight_lr.sh"), *args], capture_output=True, text=True, env=env)


def test_shell_seed_form():
    res = run_sh({"POOL": "400", "NS": "8", "TBS": "16", "EP": "1", "WARMUP": "0.05", "LR": "5e-7"})
    assert res.returncode == 0, res.stderr
    assert "total scheduler steps     200" in res.stdout
    assert "warm-up steps             10" in res.stdout
    assert "optimizer steps / rollout 8" in res.stdout
    assert "LR preflight: OK" in res.stdout
    bad = run_sh({"POOL": "40", "NS": "8", "TBS": "16", "EP": "1", "WARMUP": "0.05", "LR": "5e-7"})
    assert bad.returncode == 1 and "ABORT: total scheduler steps 20 < warm-up 1 + 20" in bad.stdout


def test_shell_launch_flags_count_the_pool(tmp_path):
    data = tmp_path / "pool.jsonl"
    atomic_write_jsonl(data, [{"input": f"q{i}", "label": "1"} for i in range(1000)])
    flags = ["--prompt_data", str(data), "--max_samples", "400", "--n_samples_per_prompt", "8",
             "--train_batch_size", "16", "--rollout_batch_size", "16", "--num_episodes", "1",
             "--lr_warmup_ratio", "0.05", "--actor_learning_rate", "5e-7", "--lora_rank", "32"]
    res = run_sh({}, *flags)
    assert res.returncode == 0, res.stderr
    assert "pool 400 " in res.stdout and "total scheduler steps     200" in res.stdout
    assert "WARNING: LoRA run (rank 32)" in res.stdout
    # Flags override the env form, and a flag OpenRLHF does not know is refused by name.
    assert "total scheduler steps     400" in run_sh({"EP": "7"}, *flags, "--num_episodes", "2").stdout
    typo = run_sh({}, *flags, "--num_episode_typo", "2")
    assert typo.returncode == 2 and "--num_episode_typo" in typo.stderr


def test_main_in_process_env_form(capsys):
    assert main([], {"POOL": "400", "NS": "8", "TBS": "16", "EP": "1", "WARMUP": "0.05", "LR": "5e-7"}) == 0
    assert "rollout steps (global_step in the metrics log) 25" in capsys.readouterr().out


BASE_20B = dict(pool=50_000, n_samples_per_prompt=8, train_batch_size=16, rollout_batch_size=16, num_episodes=20,
                lr=5e-7, warmup_ratio=0.05, lora_rank=32)
BASE_120B = dict(pool=50_000, n_samples_per_prompt=8, train_batch_size=8, rollout_batch_size=8, num_episodes=50,
                 lr=1e-6, warmup_ratio=0.03, lora_rank=64)


@pytest.mark.parametrize("base,ratio,pool,pool_max", [(BASE_20B, 0.00013, 128, 133), (BASE_120B, 0.000026, 40, 44)])
def test_suggestions_for_the_base_scripts(base, ratio, pool, pool_max):
    """The full-pool recipes are refused; each suggested value passes alone and is the largest that does."""
    s = Schedule(**base)
    assert not evaluate(s).ok
    by = {x.knob: x for x in suggest(s)}
    warm, eps, size = by["--lr_warmup_ratio"], by["--num_episodes"], by["pool"]
    assert warm.value == ratio and evaluate(replace(s, warmup_ratio=ratio)).ok
    # One more warm-up step fails: the ratio is (to its printed digits) the largest that passes.
    assert not evaluate(replace(s, warmup_ratio=(warm.schedule.warmup_steps + 2) / s.total_steps)).ok
    assert eps.value is None and "none passes" in eps.text  # one episode alone warms up for > 1000 steps
    assert not evaluate(replace(s, num_episodes=1)).ok
    whole = evaluate(replace(s, pool=pool))
    assert size.value == pool and whole.ok and not any("not a multiple" in w for w in whole.warnings)
    assert evaluate(replace(s, pool=pool_max)).ok and not evaluate(replace(s, pool=pool_max + 1)).ok
    assert f"at most {pool_max} pass" in size.text and f"--max_samples {pool}" in size.text


def test_suggestions_for_a_run_too_short():
    """20 scheduler steps in all: the fewest episodes and the smallest pool that pass."""
    s = Schedule(pool=40, n_samples_per_prompt=8, train_batch_size=16, rollout_batch_size=16, num_episodes=1,
                 lr=5e-7, warmup_ratio=0.05)
    by = {x.knob: x for x in suggest(s)}
    assert by["--lr_warmup_ratio"].value is None
    assert by["--num_episodes"].value == 2 and "the fewest" in by["--num_episodes"].text
    p = by["pool"].value
    assert evaluate(replace(s, pool=p)).ok and not evaluate(replace(s, pool=p - 1)).ok
    assert suggest(replace(s, num_episodes=2)) == []  # a passing schedule gets no suggestion


def test_suggested_flags_pass_the_preflight_itself(capsys):
    """Re-run the preflight CLI with each value it names for train_grpo_20b.sh's schedule: exit 0 every time."""
    env = {"POOL": "50000", "NS": "8", "TBS": "16", "EP": "20", "WARMUP": "0.05", "LR": "5e-7"}
    assert main([], env) == 1
    out = capsys.readouterr().out
    assert "WOULD PASS:" in out and "--lr_warmup_ratio 0.00013 " in out and "--max_samples 128 " in out
    assert main(["--lr_warmup_ratio", "0.00013"], env) == 0
    assert main([], {**env, "POOL": "128"}) == 0
    assert main(["--lr_warmup_ratio", "0.00014"], env) == 1  # 70 warm-up steps: 28.6% at step 20
