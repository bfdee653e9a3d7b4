"""rft/smoke.py: the smoke recipe, the probe's log-prob reading and the PASS/FAIL verdict on metrics logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from rft.smoke import KL_BOUND, checks, mean_prompt_logprob, smoke_flags, verdict

ROOT = Path(__file__).resolve().parents[2]


def row(step: int, **kw) -> dict:
    base = {"global_step": step, "timestamp": 1000.0 + 60 * step, "vllm_kl": 2e-4, "lora_sync_modules": 96.0,
            "lora_sync_expected_modules": 96.0, "lora_sync_seconds": 1.5, "lora_sync_probe_delta": 0.02}
    return {**base, **kw}


def write(tmp_path: Path, rows: list[dict]) -> Path:
    (tmp_path / "training_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_smoke_flags_shorten_the_recipe_and_keep_a_larger_lr():
    out = smoke_flags(["--rollout_batch_size", "16", "--actor_learning_rate", "5e-7", "--load_checkpoint"])
    assert "--load_checkpoint" not in out
    assert out[out.index("--max_samples") + 1] == "48" and "--lora_sync_probe" in out
    assert out[out.index("--actor_learning_rate", 3) + 1] == "0.0001"
    assert out[out.index("--eval_steps") + 1] == "-1" and out[out.index("--save_steps") + 1] == "-1"
    assert "--enable_vllm_is_correction" in out
    cpu = smoke_flags(["--rollout_batch_size", "8", "--actor_learning_rate", "5e-3"])
    assert cpu[cpu.index("--actor_learning_rate", 3) + 1] == "0.005"  # already larger: kept


def test_mean_prompt_logprob_reads_the_prompt_tokens_own_logprobs():
    lp = SimpleNamespace
    out = SimpleNamespace(prompt_token_ids=[5, 7, 9],
                          prompt_logprobs=[None, {7: lp(logprob=-1.0), 3: lp(logprob=-0.1)}, {9: lp(logprob=-3.0)}])
    assert mean_prompt_logprob(out) == -2.0


def test_a_good_run_passes(tmp_path):
    passed, text = verdict(write(tmp_path, [row(1), row(2), row(3)]))
    assert passed and text.splitlines()[-1] == "SMOKE PASS"
    assert "step time: 60.0 s, 60.0 s" in text and "sync seconds: 1.50, 1.50, 1.50" in text


def test_each_failure_fails(tmp_path):
    assert not checks({1: row(1, lora_sync_skipped=1.0, lora_sync_modules=None), 2: row(2), 3: row(3)})[0][1]
    assert not checks({1: row(1, lora_sync_modules=90.0), 2: row(2), 3: row(3)})[0][1]  # a module missing
    assert not checks({1: row(1), 2: row(2)})[0][1]  # the run stopped early
    assert not checks({1: row(1), 2: row(2, vllm_kl=3 * KL_BOUND), 3: row(3)})[1][1]
    assert not checks({1: row(1), 2: row(2, vllm_kl=None), 3: row(3)})[1][1]
    assert not checks({1: row(1, lora_sync_probe_delta=0.0), 2: row(2), 3: row(3)})[2][1]  # never arrived
    passed, text = verdict(write(tmp_path, [row(1), row(2), row(3)]), run_status=1)
    assert not passed and "FAIL  the training run exited with status 1" in text


def test_the_cli_exit_status(tmp_path):
    d = write(tmp_path, [row(1, lora_sync_probe_delta=0.0), row(2), row(3)])
    res = subprocess.run([sys.executable, "-m", "rft.smoke", "verdict", str(d)], capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 1 and res.stdout.strip().endswith("SMOKE FAIL")
    assert "FAIL  probe log-prob moved > 0.001 after the first update: smallest engine change 0.00e+00" in res.stdout
