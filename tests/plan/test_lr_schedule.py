"""The LR preflight against transformers' real scheduler and OpenRLHF 0.9.3's real max_steps."""

from __future__ import annotations

import itertools
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from decimal import ROUND_FLOOR, Decimal

import pytest
import torch
from transformers import get_scheduler

from rft.fixtures.patched_openrlhf import stub_env
from rft.io import atomic_write_jsonl
from rft.plan import lr_schedule
from rft.plan.lr_schedule import (
    NEUTRAL_FLAGS,
    Schedule,
    _pct,
    build_parser,
    count_pool,
    evaluate,
    key_steps,
    main,
    report,
    schedule_from_args,
    suggest,
)
from rft.plan.openrlhf_cli import known_flags, parse_args
from rft.plan.removed import REMOVED, as_flags
from rft.provenance import REPO_ROOT as ROOT

HANG_S = 30  # far above any fast test here (about 1 s on 2 busy cores)


@pytest.fixture(autouse=True)
def _fails_instead_of_hanging(request):
    """A fast test that runs past HANG_S fails: a search that never ends is a bug, and the pre-flight must answer."""
    if request.node.get_closest_marker("slow"):
        yield
        return

    def _timeout(signum, frame):
        raise TimeoutError(f"{request.node.name} ran past {HANG_S} s")

    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

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
        from rft.plan.lr_schedule import schedule_from_args
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
    for var in ("POOL", "NS", "TBS", "EP", "WARMUP", "LR", "RBS", "MAX_EPOCHS", "LORA_RANK", "PROMPT_HISTORY"):
        if var not in env_extra:
            env.pop(var, None)
    return subprocess.run(["bash", str(ROOT / "preflight_lr.sh"), *args], capture_output=True, text=True, env=env)


def schedule_flags(pool: int = 400, episodes: int = 1, warmup: float = 0.05) -> list[str]:
    """The guide's schedule (8 samples, batches of 16, LR 5e-7) as the preflight's flags."""
    return ["--pool", str(pool), "--n_samples_per_prompt", "8", "--train_batch_size", "16", "--rollout_batch_size",
            "16", "--num_episodes", str(episodes), "--lr_warmup_ratio", str(warmup), "--actor_learning_rate", "5e-7"]


def test_shell_documented_form():
    res = run_sh({}, *schedule_flags())
    assert res.returncode == 0, res.stderr
    assert "total scheduler steps     200" in res.stdout
    assert "warm-up steps             10" in res.stdout
    assert "optimizer steps / rollout 8" in res.stdout
    assert "LR preflight: OK" in res.stdout
    bad = run_sh({}, *schedule_flags(pool=40))
    assert bad.returncode == 1 and "ABORT: total scheduler steps 20 < warm-up 1 + 20" in bad.stdout


def test_shell_the_guides_variables_run_as_their_flags_said_in_one_line():
    """The ops guide's `POOL=400 NS=8 TBS=16 EP=1 WARMUP=0.05 LR=5e-7 bash preflight_lr.sh` runs the check; one line
    gives the same command as flags, which gives the same report."""
    res = run_sh({"POOL": "400", "NS": "8", "TBS": "16", "EP": "1", "WARMUP": "0.05", "LR": "5e-7"}, "--check-step", "20")
    assert res.returncode == 0, res.stderr
    (line,) = res.stderr.splitlines()
    command = line.removeprefix("preflight_lr: the guide's variables, as flags: ")
    assert command.split() == ["bash", "preflight_lr.sh", *schedule_flags(), "--check-step", "20"]
    again = run_sh({}, *command.split()[2:])
    assert again.returncode == 0 and again.stdout == res.stdout and "total scheduler steps     200" in res.stdout
    bad = run_sh({"POOL": "40", "NS": "8", "TBS": "16", "EP": "1", "WARMUP": "0.05", "LR": "5e-7"})
    assert bad.returncode == 1 and "ABORT" in bad.stdout


def test_shell_a_removed_variable_without_a_flag_form_is_refused():
    res = run_sh({"NS": "8", "PROMPT_HISTORY": "1"}, *schedule_flags())
    assert res.returncode == 2 and res.stdout == ""
    assert "preflight_lr: PROMPT_HISTORY is set but not read: PROMPT_HISTORY=1 is now --prompt_history" in res.stderr


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
    # The last of a repeated flag wins, and a flag OpenRLHF does not know is refused by name.
    assert "total scheduler steps     400" in run_sh({}, *flags, "--num_episodes", "2").stdout
    typo = run_sh({}, *flags, "--num_episode_typo", "2")
    assert typo.returncode == 2 and "--num_episode_typo" in typo.stderr


def test_main_in_process(capsys):
    assert main(schedule_flags(), {}) == 0
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
    flags = schedule_flags(pool=50_000, episodes=20)
    assert main(flags, {}) == 1
    out = capsys.readouterr().out
    assert "WOULD PASS:" in out and "--lr_warmup_ratio 0.00013 " in out and "--max_samples 128 " in out
    assert main([*flags, "--lr_warmup_ratio", "0.00013"], {}) == 0
    assert main([*flags, "--pool", "128"], {}) == 0
    assert main([*flags, "--lr_warmup_ratio", "0.00014"], {}) == 1  # 70 warm-up steps: 28.6% at step 20


# --- what the user reads: verdict messages, report, suggestions, CLI ---------------------------------------------

SEED = dict(n_samples_per_prompt=8, train_batch_size=16, lr=5e-7)
MSG_SHORT = ("total scheduler steps 20 < warm-up 1 + 20: the run ends before it trains 20 steps at full LR "
             "(raise --num_episodes or the pool, or lower --lr_warmup_ratio)")
MSG_AT_FLOOR = ("LR after scheduler step 20 is 5.000e-08 = 10.0% of the target 5.000e-07 (< 30%): "
                "the step budget is spent in warm-up or decay")


@pytest.mark.parametrize("schedule,kwargs,errors,warnings", [
    (Schedule(pool=1, num_episodes=1, warmup_ratio=0.05, **SEED), {},
     ["total scheduler steps is 0 (pool 1 x n_samples 8 // train_batch_size 16 x episodes 1): nothing would train"],
     []),
    (Schedule(pool=1, num_episodes=1, warmup_ratio=0.05, **SEED), {"check_step": 21},
     ["total scheduler steps is 0 (pool 1 x n_samples 8 // train_batch_size 16 x episodes 1): nothing would train"],
     []),
    (Schedule(pool=40, num_episodes=1, warmup_ratio=0.05, rollout_batch_size=16, **SEED), {},
     [MSG_SHORT, MSG_AT_FLOOR],
     ["the run makes 16 optimizer steps but the scheduler plans 20 (pool not a multiple of rollout_batch_size): "
      "the LR will not reach its minimum"]),
    (Schedule(pool=50_000, num_episodes=20, warmup_ratio=0.05, rollout_batch_size=16, lora_rank=32, **SEED), {},
     ["LR after scheduler step 20 is 4.000e-10 = 0.08% of the target 5.000e-07 (< 30%): the step budget is spent "
      "in warm-up or decay"],
     ["LoRA run (rank 32) at LR 5.0e-07: LoRA RL usually needs around 1e-05; at 5e-7 a LoRA policy can finish a "
      "whole run with KL ~1e-4, having barely moved"]),
    (Schedule(pool=8, num_episodes=5, warmup_ratio=0.05, rollout_batch_size=16, **SEED), {},
     [MSG_SHORT, MSG_AT_FLOOR,
      "pool 8 < rollout_batch_size 16: the dataloader drops the partial batch, so no rollout step would run"],
     []),
    (Schedule(pool=410, num_episodes=1, warmup_ratio=0.05, rollout_batch_size=16, **SEED), {}, [],
     ["the run makes 200 optimizer steps but the scheduler plans 205 (pool not a multiple of rollout_batch_size): "
      "the LR will not reach its minimum"]),
    (Schedule(pool=960, n_samples_per_prompt=8, train_batch_size=64, rollout_batch_size=12, num_episodes=1,
              lr=5e-7, warmup_ratio=0.05), {}, [],
     ["rollout_batch_size x n_samples x max_epochs / train_batch_size = 1.5 is not an integer: optimizer steps "
      "straddle rollout steps"]),
    (Schedule(pool=400, num_episodes=1, warmup_ratio=0.05, scheduler="cosine", **SEED), {},
     ["--lr_scheduler cosine: only cosine_with_min_lr is modelled"], []),
    # --check-step 0: the LR before the first step is 0 while there is any warm-up
    (Schedule(pool=400, num_episodes=1, warmup_ratio=0.05, **SEED), {"check_step": 0},
     ["LR after scheduler step 0 is 0.000e+00 = 0.0% of the target 5.000e-07 (< 30%): the step budget is spent "
      "in warm-up or decay"], []),
    # one scheduler step in all, checked at step 0 with one warm-up step: only the LR rule refuses it
    (Schedule(pool=2, num_episodes=1, warmup_ratio=0.5, **SEED), {"check_step": 0},
     ["LR after scheduler step 0 is 0.000e+00 = 0.0% of the target 5.000e-07 (< 30%): the step budget is spent "
      "in warm-up or decay"], []),
])
def test_verdict_messages(schedule, kwargs, errors, warnings):
    """Each refusal and warning, word for word: the numbers, the rule and the flag to change."""
    v = evaluate(schedule, **kwargs)
    assert (v.errors, v.warnings, v.ok) == (errors, warnings, not errors)


@pytest.mark.parametrize("warmup,passes", [(80, True), (81, False), (79, True)])
def test_lr_exactly_at_the_threshold_passes(warmup, passes):
    """20 steps into an 80-step warm-up the LR is exactly 25% of the target: --min-fraction 0.25 lets it through."""
    s = Schedule(pool=400, num_episodes=1, warmup_ratio=warmup / 200, **{**SEED, "lr": 0.5})
    assert s.warmup_steps == warmup and s.lr_after(20) == pytest.approx(0.5 * 20 / warmup, rel=1e-15)
    assert evaluate(s, 20, 0.25).ok is passes


@pytest.mark.parametrize("rank,lr,warns", [
    (0, 5e-7, False), (1, 5e-7, True), (64, 1.9e-6, True), (64, 2e-6, False), (64, 1e-5, False),
])
def test_lora_warning_below_2e_6(rank, lr, warns):
    """docs/launching.md: a LoRA run (rank > 0) warns when its LR is below 2e-6, not at 2e-6; a full fine-tune never."""
    s = Schedule(pool=400, num_episodes=1, warmup_ratio=0.05, lora_rank=rank, **{**SEED, "lr": lr})
    assert any("LoRA run" in w for w in evaluate(s).warnings) is warns
    doc = (ROOT / "docs" / "launching.md").read_text()
    assert "warns when a LoRA run's LR is below 2e-6" in doc


def test_lora_warning_carries_the_documented_advice():
    """The warning gives the same numbers as docs/launching.md's LR preflight section (~1e-5, 5e-7, KL ~1e-4)."""
    s = Schedule(pool=400, num_episodes=1, warmup_ratio=0.05, lora_rank=8, **SEED)
    (w,) = evaluate(s).warnings
    doc = " ".join((ROOT / "docs" / "launching.md").read_text().split())
    assert "LoRA RL usually needs ~1e-5; at 5e-7 a policy can finish a run with KL ~1e-4, barely moved" in doc
    assert w.endswith("LoRA RL usually needs around 1e-05; at 5e-7 a LoRA policy can finish a whole run with "
                      "KL ~1e-4, having barely moved")


@pytest.mark.parametrize("frac,text", [
    (0.0008, "0.08%"), (0.00027, "0.027%"), (0.0099, "0.99%"), (0.01, "1.0%"), (0.0, "0.0%"), (0.25, "25.0%"),
    (1.0, "100.0%"),
])
def test_pct_two_significant_digits_below_one_percent(frac, text):
    """A share below 1% keeps two significant digits (0.08%, not 0.1%); 1% and above, and 0, one decimal."""
    assert _pct(frac) == text


def test_key_steps_of_a_schedule():
    """Start, step 1, warm-up end, the check step, the quarters (rounded down), the end, rollout steps 1/5/10/20."""
    s = Schedule(pool=402, num_episodes=1, warmup_ratio=0.05, rollout_batch_size=16, **SEED)  # 201 steps, 8/rollout
    assert (s.total_steps, s.warmup_steps, s.steps_per_rollout) == (201, 11, 8)
    assert key_steps(s) == [0, 1, 8, 11, 20, 40, 50, 80, 100, 150, 160, 201]
    no_rbs = replace(s, rollout_batch_size=None)
    assert key_steps(no_rbs) == [0, 1, 11, 20, 50, 100, 150, 201]
    # steps past the end are left out: rollout step 20 would be scheduler step 160 of 30
    short = Schedule(pool=60, num_episodes=1, warmup_ratio=0.0, rollout_batch_size=16, **SEED)
    assert key_steps(short) == [0, 1, 7, 8, 15, 20, 22, 30]


def test_report_of_the_seed_example_against_transformers():
    """Every line of the report: totals, then the LR at each key step from the real transformers scheduler."""
    s = Schedule(pool=402, num_episodes=1, warmup_ratio=0.05, rollout_batch_size=16, **SEED)
    ref = transformers_lrs(s)
    rows = [f"{k:>10} {k / 8:>12.2f} {ref[k]:>11.3e} {ref[k] / 5e-7:>9.1%}"
            for k in [0, 1, 8, 11, 20, 40, 50, 80, 100, 150, 160, 201]]
    assert report(s, evaluate(s)).split("\n") == [
        "pool 402  n_samples_per_prompt 8  train_batch_size 16  num_episodes 1  max_epochs 1",
        "total scheduler steps     201",
        "warm-up steps             11 (ratio 0.05)",
        "optimizer steps / rollout 8",
        "rollout steps (global_step in the metrics log) 25",
        "target LR 5.000e-07  min LR 5.000e-08",
        "sched step rollout step          LR  % target",
        *rows,
        "WARNING: the run makes 200 optimizer steps but the scheduler plans 201 (pool not a multiple of "
        "rollout_batch_size): the LR will not reach its minimum",
        "LR preflight: OK",
    ]
    assert rows[3] == "        11         1.38   5.000e-07    100.0%"  # the warm-up ends at the full LR
    assert rows[-1] == "       201        25.12   5.000e-08     10.0%"  # the cosine ends at 0.1 x the target


def test_report_of_a_refused_schedule_without_rollout_batch():
    """No rollout batch: no rollout column; a refusal lists each ABORT reason, what would pass, and FAILED."""
    s = Schedule(pool=40, num_episodes=1, warmup_ratio=0.05, **SEED)
    ref = transformers_lrs(s)
    lines = report(s, evaluate(s)).split("\n")
    assert lines[3] == "optimizer steps / rollout (unknown: no rollout_batch_size)"
    assert not any(ln.startswith("rollout steps") for ln in lines)
    assert lines[4:6] == ["target LR 5.000e-07  min LR 5.000e-08", "sched step rollout step          LR  % target"]
    assert lines[6:12] == [f"{k:>10} {'-':>12} {ref[k]:>11.3e} {ref[k] / 5e-7:>9.1%}" for k in [0, 1, 5, 10, 15, 20]]
    assert lines[12:] == [
        f"ABORT: {MSG_SHORT}",
        f"ABORT: {MSG_AT_FLOOR}",
        "WOULD PASS: passes with any one of (each re-checked): --lr_warmup_ratio: no value passes at 20 scheduler "
        "steps; --num_episodes 2 (the fewest that passes: 40 steps, warm-up 2, LR after step 20 = 58.7%); a pool "
        "of 58 prompts (at least 58; a larger PROMPT_DATA: 29 steps, warm-up 2, LR after step 20 = 32.5%)",
        "LR preflight: FAILED",
    ]


def test_report_uses_the_given_rule():
    """The report's suggestions follow the check step and minimum fraction it is given, not the defaults."""
    s = Schedule(pool=200, num_episodes=1, warmup_ratio=0.8, rollout_batch_size=16, **SEED)  # 25% at step 20
    assert "WOULD PASS" not in report(s, evaluate(s, 20, 0.25), 20, 0.25)
    strict = report(s, evaluate(s, 20, 0.5), 20, 0.5)
    assert "--lr_warmup_ratio 0.4 (warm-up 40 of 100 steps, LR after step 20 = 50.0% of target)" in strict
    assert "(< 50%)" in strict


def _ok(s: Schedule, cs: int, mf: float) -> bool:
    return evaluate(s, cs, mf).ok


def _ref_warmup_ratio(s: Schedule, cs: int, mf: float) -> Decimal | None:
    """The shortest decimal (2 to 7 significant digits) at or below w / total that passes, for the largest
    warm-up count w below the current one that has one (brute force over every w, exact decimal arithmetic)."""
    t = s.total_steps
    for w in range(s.warmup_steps - 1, -1, -1):
        if t <= 0:
            break
        exact = Decimal(w) / Decimal(t)
        for digits in range(2, 8):
            ratio = exact if exact == 0 else exact.quantize(
                Decimal(1).scaleb(exact.adjusted() - digits + 1), rounding=ROUND_FLOOR)
            if _ok(replace(s, warmup_ratio=float(ratio)), cs, mf):
                return ratio
    return None


def _ref_nearest(s: Schedule, knob: str, cs: int, mf: float, reach: int = 3000) -> tuple[int | None, bool]:
    """The passing value of an integer knob nearest to the current one, scanning down to 1 and up `reach`
    values; and whether it lies below. At most one side has one: the rules are monotone in each knob."""
    cur = getattr(s, knob)
    down = next((x for x in range(cur - 1, 0, -1) if _ok(replace(s, **{knob: x}), cs, mf)), None)
    up = next((x for x in range(cur + 1, cur + reach) if _ok(replace(s, **{knob: x}), cs, mf)), None)
    assert down is None or up is None, (down, up)
    return (down, True) if down is not None else (up, False)


def _at_1e6(pool: int, n: int, tbs: int, episodes: int, warmup: float, **knobs) -> Schedule:
    """A schedule at LR 1e-6: pool, samples per prompt, train batch size, episodes, warm-up ratio, other knobs."""
    return Schedule(pool=pool, n_samples_per_prompt=n, train_batch_size=tbs, num_episodes=episodes, lr=1e-6,
                    warmup_ratio=warmup, **knobs)


SUGGEST_CASES = [
    # schedule, check_step, min_fraction
    (Schedule(pool=40, num_episodes=1, warmup_ratio=0.05, rollout_batch_size=16, **SEED), 20, 0.3),
    (Schedule(pool=200, num_episodes=1, warmup_ratio=0.8, rollout_batch_size=16, **SEED), 20, 0.3),
    (Schedule(pool=200, num_episodes=1, warmup_ratio=0.8, rollout_batch_size=16, **SEED), 20, 0.5),
    (_at_1e6(5000, 8, 8, 1, 0.3), 10, 0.5),
    (_at_1e6(5000, 1, 32, 3, 0.03, max_epochs=2, rollout_batch_size=64), 1, 1.0),
    (_at_1e6(10, 1, 4, 3, 0.3, rollout_batch_size=1), 10, 0.1),
    (_at_1e6(5, 16, 3, 1, 0.9, max_epochs=2, rollout_batch_size=4), 1, 0.3),
    (_at_1e6(5, 8, 2, 20, 0.005, max_epochs=2, rollout_batch_size=4), 1, 0.3),
    (_at_1e6(10, 1, 8, 3, 0.0, rollout_batch_size=1), 20, 0.1),
    (_at_1e6(971, 8, 8, 3, 0.01, rollout_batch_size=100), 20, 0.9),
    (_at_1e6(1312, 16, 16, 1, 0.03, rollout_batch_size=8), 1, 0.9),
    (_at_1e6(40, 16, 4, 2, 0.3, rollout_batch_size=1), 20, 0.25),
    (_at_1e6(40, 4, 3, 2, 0.3, rollout_batch_size=4), 1, 0.25),
    (_at_1e6(400, 16, 2, 3, 0.005, rollout_batch_size=100), 10, 0.5),
    (_at_1e6(100, 8, 16, 20, 1.5, rollout_batch_size=32), 0, 0.1),
    # one scheduler step, warm-up ratio 1.5 (2 steps), checked at step 0 with no minimum: ratio 1 passes
    (Schedule(pool=2, num_episodes=1, warmup_ratio=1.5, **SEED), 0, 0.0),
    # ratio 15/29 of 29 steps: OpenRLHF's ceil(29 * ratio) is 16 (29 * ratio = 15.000000000000002), 0.51 gives 15
    (_at_1e6(29, 1, 1, 1, 15 / 29), 14, 0.3),
    # warm-up exactly at the longest that still passes (66 at 30%), one step short: one more prompt passes
    (_at_1e6(85, 1, 1, 1, 0.766), 20, 0.3),
]


@pytest.mark.parametrize("s,cs,mf", SUGGEST_CASES)
def test_suggestions_match_brute_force(s, cs, mf, monkeypatch):
    """Each knob's suggestion is the brute-force nearest passing value (the warm-up ratio as a short decimal),
    re-checked on the schedule it comes with, and its text gives that schedule's numbers."""
    monkeypatch.setattr(lr_schedule, "SCAN_LIMIT", 3000)  # as far as the brute force looks up
    assert not _ok(s, cs, mf)
    by = {x.knob: x for x in suggest(s, cs, mf)}
    assert list(by) == ["--lr_warmup_ratio", "--num_episodes", "pool"]
    t = s.total_steps

    def tail(c: Schedule) -> str:
        return f"warm-up {c.warmup_steps}, LR after step {cs} = {c.lr_after(cs) / s.lr:.1%}"

    ratio, warm = _ref_warmup_ratio(s, cs, mf), by["--lr_warmup_ratio"]
    if ratio is None:
        assert (warm.value, warm.schedule) == (None, None)
        assert warm.text == f"--lr_warmup_ratio: no value passes at {t} scheduler steps"
    else:
        c = replace(s, warmup_ratio=float(ratio))
        assert (warm.value, warm.schedule) == (float(ratio), c) and _ok(c, cs, mf)
        assert warm.text == (f"--lr_warmup_ratio {format(ratio.normalize(), 'f')} (warm-up {c.warmup_steps} of {t} steps, "
                             f"LR after step {cs} = {c.lr_after(cs) / s.lr:.1%} of target)")

    e, fewer = _ref_nearest(s, "num_episodes", cs, mf)
    eps = by["--num_episodes"]
    if e is None:
        one = replace(s, num_episodes=1)
        assert (eps.value, eps.schedule) == (None, None)
        assert eps.text == (f"--num_episodes: none passes on this pool (1 episode = {one.total_steps} steps, "
                            f"warm-up {one.warmup_steps})")
    else:
        c = replace(s, num_episodes=e)
        assert (eps.value, eps.schedule) == (e, c)
        most = "the most" if fewer else "the fewest"
        assert eps.text == f"--num_episodes {e} ({most} that passes: {c.total_steps} steps, {tail(c)})"

    p, smaller = _ref_nearest(s, "pool", cs, mf)
    size = by["pool"]
    if p is None:
        assert (size.value, size.schedule, size.text) == (None, None, "pool: no size passes with these episodes and warm-up")
        return
    rbs = s.rollout_batch_size
    whole = p // rbs * rbs if rbs else 0
    if smaller and rbs and whole not in (0, p) and _ok(replace(s, pool=whole), cs, mf):
        limit, value = f"{whole} = {whole // rbs} whole rollout batches; at most {p} pass", whole
    else:
        limit, value = f"at {'most' if smaller else 'least'} {p}", p
    c = replace(s, pool=value)
    how = f"--max_samples {value} or a smaller PROMPT_DATA" if smaller else "a larger PROMPT_DATA"
    assert (size.value, size.schedule) == (value, c) and _ok(c, cs, mf)
    assert size.text == f"a pool of {value} prompts ({limit}; {how}: {c.total_steps} steps, {tail(c)})"


def test_suggestion_scan_stops_at_its_limit(monkeypatch):
    """Above the current value a knob is scanned SCAN_LIMIT values far: a pool exactly that far is found, one
    further is not."""
    s = Schedule(pool=40, num_episodes=1, warmup_ratio=0.05, **SEED)  # the fewest that pass: 58 prompts
    monkeypatch.setattr(lr_schedule, "SCAN_LIMIT", 18)
    assert {x.knob: x.value for x in suggest(s)}["pool"] == 58
    monkeypatch.setattr(lr_schedule, "SCAN_LIMIT", 17)
    assert {x.knob: x.value for x in suggest(s)}["pool"] is None


def test_no_suggestion_for_an_unmodelled_scheduler():
    """Only the modelled scheduler gets suggestions (the others are refused for that alone)."""
    s = Schedule(pool=40, num_episodes=1, warmup_ratio=0.05, scheduler="cosine", **SEED)
    assert suggest(s) == [] and not evaluate(s).ok
    assert suggest(replace(s, scheduler="cosine_with_min_lr")) != []


def test_suggestions_for_a_run_with_no_steps(monkeypatch):
    """A pool too small for one train batch: no warm-up ratio or episode count helps; a larger pool does."""
    monkeypatch.setattr(lr_schedule, "SCAN_LIMIT", 100)  # the episode scan finds nothing: keep it short
    s = Schedule(pool=1, num_episodes=1, warmup_ratio=0.05, **SEED)
    by = {x.knob: x for x in suggest(s)}
    assert by["--lr_warmup_ratio"].text == "--lr_warmup_ratio: no value passes at 0 scheduler steps"
    assert by["--num_episodes"].text == "--num_episodes: none passes on this pool (1 episode = 0 steps, warm-up 0)"
    assert by["pool"].value == 58 and "at least 58; a larger PROMPT_DATA" in by["pool"].text


SLOW = schedule_flags(warmup=0.4)  # 25% at step 20
HELP = """usage: preflight_lr.sh [-h] [--pool POOL] [--check-step CHECK_STEP] [--min-fraction MIN_FRACTION]

Model OpenRLHF 0.9.3's actor LR schedule for a launch and abort (exit 1) when it is unusable. Example: bash \
preflight_lr.sh --pool 400 --n_samples_per_prompt 8 --train_batch_size 16 --rollout_batch_size 16 --num_episodes 1 \
--lr_warmup_ratio 0.05 --actor_learning_rate 5e-7. Any OpenRLHF flag may follow, as on a launch script's command line. \
Without --pool the pool is counted from --prompt_data after --max_samples.

options:
  -h, --help            show this help message and exit
  --pool POOL           number of prompts (instead of counting --prompt_data)
  --check-step CHECK_STEP
                        scheduler step whose LR is checked
  --min-fraction MIN_FRACTION
                        minimum LR fraction at that step
"""


def test_help_word_for_word(monkeypatch):
    """`preflight_lr.sh --help` is the command's documentation: its text word for word (line breaks aside)."""
    monkeypatch.setenv("COLUMNS", "100")
    assert build_parser().format_help().split() == HELP.split()


def test_help_example_is_the_documented_command_and_passes(capsys):
    """The example in --help is the command docs/launching.md and preflight_lr.sh show, and it passes; every flag
    it names is --pool or one OpenRLHF knows."""
    text = " ".join(build_parser().description.split())
    example = re.search(r"Example: bash preflight_lr\.sh ((?:--\w+ \S+ )*--\w+ [^ .]+(?:\.\d+)?)", text).group(1)
    assert example.split() == schedule_flags()
    for doc in (ROOT / "docs" / "launching.md", ROOT / "preflight_lr.sh"):
        assert example.split() == re.search(r"bash preflight_lr\.sh (--pool [^\n]*\n[^\n]*)",
                                            doc.read_text()).group(1).replace("\\", " ").replace("#", " ").split()
    assert main(example.split(), {}) == 0
    assert set(re.findall(r"--[a-z_]+", text)) - {"--pool"} <= known_flags() and "--prompt_data" in text
    capsys.readouterr()


def test_main_reads_sys_argv(monkeypatch, capsys):
    """Called with no arguments (as `python -m rft.plan.lr_schedule`), it reads the command line."""
    for old, _ in REMOVED:
        monkeypatch.delenv(old.partition("=")[0], raising=False)
    monkeypatch.setattr(sys, "argv", ["preflight_lr.sh", *schedule_flags(episodes=2)])
    assert main() == 0
    out = capsys.readouterr().out
    assert "pool 400 " in out and "total scheduler steps     400" in out


def test_main_counts_the_pool_without_pool_flag(tmp_path, capsys):
    """No --pool: the pool is --prompt_data's rows after --max_samples; --pool wins over --prompt_data."""
    data = tmp_path / "pool.jsonl"
    atomic_write_jsonl(data, [{"input": f"q{i}", "label": "1"} for i in range(500)])
    flags = schedule_flags()[2:]
    assert main([*flags, "--prompt_data", str(data), "--max_samples", "400"], {}) == 0
    assert "pool 400 " in capsys.readouterr().out
    assert main([*flags, "--prompt_data", str(data)], {}) == 0
    assert "pool 500 " in capsys.readouterr().out
    assert main([*flags, "--prompt_data", str(data), "--pool", "400"], {}) == 0
    assert "pool 400 " in capsys.readouterr().out


@pytest.mark.parametrize("argv,code,shows", [
    ([], 1, "ABORT: LR after scheduler step 20 is 1.250e-07 = 25.0% of the target 5.000e-07 (< 30%)"),
    (["--min-fraction", "0.25"], 0, "LR preflight: OK"),
    (["--check-step", "30"], 0, "LR preflight: OK"),
    (["--check-step", "10"], 1, "ABORT: LR after scheduler step 10 is 6.250e-08 = 12.5% of the target"),
    (["--min-fraction", "0.5"], 1, "WOULD PASS: passes with any one of (each re-checked): --lr_warmup_ratio 0.2 "
                                   "(warm-up 40 of 200 steps, LR after step 20 = 50.0% of target)"),
])
def test_main_check_step_and_min_fraction(argv, code, shows, capsys):
    """--check-step and --min-fraction set the rule for the verdict, the exit code and the suggestions."""
    assert main([*SLOW, *argv], {}) == code
    assert shows in capsys.readouterr().out


def test_main_bad_input_exits_2_with_the_reason_on_stderr(capsys):
    """A flag OpenRLHF does not know, or no pool at all: exit 2, nothing on stdout, the reason on stderr."""
    assert main([*SLOW, "--num_episode_typo", "2"], {}) == 2
    res = capsys.readouterr()
    assert res.out == "" and res.err.startswith("preflight_lr: ") and "--num_episode_typo" in res.err
    assert main(SLOW[2:], {}) == 2
    res = capsys.readouterr()
    assert (res.out, res.err) == ("", "preflight_lr: no --prompt_data and no --pool: cannot size the schedule\n")


@pytest.mark.parametrize("environ,flags", [
    ({}, []),
    ({"TBS": " "}, []),
    ({"RBS": "8"}, ["--rollout_batch_size", "8"]),
    ({"TBS": "16"}, ["--train_batch_size", "16", "--rollout_batch_size", "16"]),
    ({"TBS": "16", "RBS": "32"}, ["--train_batch_size", "16", "--rollout_batch_size", "16", "--rollout_batch_size", "32"]),
    ({"NS": "8", "EP": " 2 ", "LORA_RANK": "4"}, ["--n_samples_per_prompt", "8", "--num_episodes", "2",
                                                  "--lora_rank", "4"]),
])
def test_removed_short_variables_as_flags(environ, flags):
    """Each removed short variable becomes its flag; TBS also sets the rollout batch, which a later RBS overrides."""
    assert as_flags(environ) == flags


def test_rbs_after_tbs_wins():
    """NS=8 TBS=16 RBS=32 as flags: OpenRLHF parses a rollout batch of 32."""
    args = parse_args(NEUTRAL_FLAGS + as_flags({"NS": "8", "TBS": "16", "RBS": "32"})).args
    assert (args.train_batch_size, args.rollout_batch_size) == (16, 32)


def test_schedule_from_args_takes_every_flag(tmp_path):
    """Each Schedule field comes from its OpenRLHF flag; the pool is counted after --max_samples."""
    data = tmp_path / "pool.jsonl"
    atomic_write_jsonl(data, [{"input": f"q{i}", "label": "1"} for i in range(50)])
    args = parse_args(NEUTRAL_FLAGS + [
        "--prompt_data", str(data), "--max_samples", "30", "--n_samples_per_prompt", "8", "--train_batch_size", "16",
        "--rollout_batch_size", "8", "--num_episodes", "3", "--actor_learning_rate", "2e-6", "--lr_warmup_ratio",
        "0.1", "--max_epochs", "2", "--lora_rank", "16", "--lr_scheduler", "constant"]).args
    assert schedule_from_args(args) == Schedule(pool=30, n_samples_per_prompt=8, train_batch_size=16, num_episodes=3,
                                                lr=2e-6, warmup_ratio=0.1, max_epochs=2, rollout_batch_size=8,
                                                lora_rank=16, scheduler="constant")
    assert schedule_from_args(args, pool=7).pool == 7
    probs = parse_args(NEUTRAL_FLAGS + ["--prompt_data", f"{data},{data}", "--prompt_data_probs", "0.5,0.5"]).args
    with pytest.raises(ValueError, match=r"^--prompt_data_probs interleaves datasets; give the pool size with --pool N$"):
        schedule_from_args(probs)
    with pytest.raises(ValueError, match=r"^no --prompt_data and no --pool: cannot size the schedule$"):
        schedule_from_args(parse_args(NEUTRAL_FLAGS).args)


def test_count_pool_reads_what_openrlhf_loads(tmp_path):
    """`path@data_dir` counts the file at path; a .json file of JSON lines counts; anything else is refused."""
    a = tmp_path / "a.jsonl"
    atomic_write_jsonl(a, [{"input": f"q{i}", "label": "1"} for i in range(30)])
    assert count_pool(f"{a}@train") == 30
    js = tmp_path / "b.json"
    js.write_text(a.read_text())
    assert count_pool(f"{js}, {a}") == 60
    pq = tmp_path / "c.parquet"
    pq.write_bytes(b"PAR1")
    with pytest.raises(ValueError, match=rf"^--prompt_data {re.escape(str(pq))}: not a local JSONL file; give the "
                                         r"pool size with --pool N$"):
        count_pool(str(pq))


def test_min_fraction_zero_leaves_only_the_length_rule(capsys):
    """--min-fraction 0: no LR floor, so only "20 steps past the warm-up" refuses; a warm-up ratio of 0 passes."""
    assert main([*schedule_flags(pool=40), "--min-fraction", "0"], {}) == 1
    out = capsys.readouterr().out
    assert "--lr_warmup_ratio 0 (warm-up 0 of 20 steps, LR after step 20 = 10.0% of target)" in out
    assert "a pool of 44 prompts (at least 44; a larger PROMPT_DATA: 22 steps, warm-up 2" in out
