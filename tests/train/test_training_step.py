"""The patched `ActorPPOTrainer.training_step` / `ppo_train` on two real gloo ranks (CPU): grad norm, ratio maxima,
spike log.

tests/train/ppo_step_worker.py runs the real patched trainer (real argparse, real DeepSpeed ZeRO-3 engine, tiny LoRA
Llama) on 2 ranks x 4 micro-batches with gradient accumulation 2, twice: global step 1 with small advantages,
global step 2 with huge ones. Its spies only observe; the assertions here compare the trainer's status and
spike log with what DeepSpeed and the loss really produced.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from rft.cpu.local_ray import free_port
from rft.fixtures.patched_openrlhf import (
    ROOT,
    stub_env,
)
from rft.train.loss_diag import MAX_REDUCED_KEYS
from rft.train.metrics import SPIKE_GRAD_NORM
from tests.support.processes import groups

WORLD = 2
WORKER = ROOT / "tests" / "train" / "ppo_step_worker.py"


def prompt_hash(ids: list[int]) -> str:
    """The spike log's prompt hash: sha1 of the prompt token ids as int64, first 16 hex digits."""
    return hashlib.sha1(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]


@pytest.fixture(scope="module")
def run(patched_openrlhf, tmp_path_factory):
    """Both ranks' logs and the spike log lines of one 2-rank run."""
    out = tmp_path_factory.mktemp("ppo_step")
    spike = out / "spike_log.jsonl"
    env = stub_env(patched_openrlhf)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(ROOT)])
    env.update(RFT_OPENRLHF_DIR=str(patched_openrlhf), SPIKE_LOG_PATH=str(spike), OMP_NUM_THREADS="1")
    port = free_port()
    cmds = [[sys.executable, str(WORKER), str(r), str(WORLD), str(port), str(out / f"r{r}.json")] for r in range(WORLD)]
    with groups(cmds, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as procs:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    for r, (p, text) in enumerate(zip(procs, outputs, strict=True)):
        assert p.returncode == 0, f"rank {r} failed:\n{text[-4000:]}"
    logs = [json.loads((out / f"r{r}.json").read_text()) for r in range(WORLD)]
    lines = [json.loads(x) for x in spike.read_text().splitlines()] if spike.exists() else []
    return logs, lines


def _micro(logs, call):
    """Per rank, the micro-batch records of ppo_train call 1 or 2 (4 each)."""
    return [log["micro"][4 * (call - 1): 4 * call] for log in logs]


@pytest.mark.slow
def test_grad_norm_is_deepspeeds_at_accumulation_boundaries(run):
    logs, _ = run
    for log in logs:
        # 4 micro-batches, accumulation 2: DeepSpeed stepped during the 2nd and 4th micro-batch of each call
        assert [b["micro_steps"] for b in log["boundaries"]] == [1, 3, 5, 7]
        for call, status in enumerate(log["statuses"], start=1):
            norms = [b["grad_norm"] for b in log["boundaries"][2 * (call - 1): 2 * call]]
            assert all(math.isfinite(n) and n > 0 for n in norms)
            assert status["grad_norm"] == pytest.approx(max(norms), rel=1e-6)  # max over the call's steps
            assert status["grad_norm_steps"] == 2
        # the first window's norm equals a plain-torch norm of the same loss on a copy of the initial weights
        assert log["boundaries"][0]["grad_norm"] == pytest.approx(log["reference_grad_norm"], rel=1e-5)
    assert logs[0]["boundaries"] == logs[1]["boundaries"]  # global norm: the same on every rank


@pytest.mark.slow
def test_ratio_maxima_are_reduced_with_max_over_ranks_and_micro_batches(run):
    logs, _ = run
    for call in (1, 2):
        stats = [m["ratio_stats"] for rank in _micro(logs, call) for m in rank]
        for log in logs:
            status = log["statuses"][call - 1]
            for key in MAX_REDUCED_KEYS:
                values = [s[key] for s in stats]
                assert status[key] == pytest.approx(max(values), rel=1e-6), key
                assert max(values) - sum(values) / len(values) > 0.01  # an average would differ
            assert status["logratio_min"] == pytest.approx(min(s["logratio_min"] for s in stats), rel=1e-6)
            assert status["logratio_tokens"] == sum(s["logratio_tokens"] for s in stats)
        # and the maxima really come from different ranks' micro-batches on some call
    best = [max(m["ratio_stats"]["ratio_max"] for m in rank) for rank in _micro(logs, 2)]
    assert best[0] != best[1]


@pytest.mark.slow
def test_spike_log_has_one_rank0_line_per_spiking_step_with_the_windows_prompt_hashes(run):
    logs, lines = run
    assert logs[0]["spike_log_after_call_1"] is False  # call 1: every grad norm below the threshold
    assert all(b["grad_norm"] < SPIKE_GRAD_NORM for log in logs for b in log["boundaries"][:2])
    assert all(b["grad_norm"] > SPIKE_GRAD_NORM for log in logs for b in log["boundaries"][2:])
    assert len(lines) == 2  # one per spiking optimizer step, written by rank 0 only
    micro = _micro(logs, 2)
    for j, line in enumerate(lines):
        window = [rank[2 * j: 2 * j + 2] for rank in micro]  # rank 0's micro-batches, then rank 1's
        assert line["global_step"] == 2
        assert line["grad_norm"] == pytest.approx(logs[0]["boundaries"][2 + j]["grad_norm"], rel=1e-12)
        assert line["prompt_hashes"] == [prompt_hash(m["prompt"]) for rank in window for m in rank]
        stats = [m["ratio_stats"] for rank in window for m in rank]
        assert line["ratio_max"] == pytest.approx(max(s["ratio_max"] for s in stats), rel=1e-6)
        assert line["logratio_tokens"] == sum(s["logratio_tokens"] for s in stats)
    # the hashed ids are exactly the prompts the worker generated (no padding, no response tokens)
    for log, rank in zip(logs, micro, strict=True):
        assert sorted(m["prompt"] for m in rank) == sorted(log["prompts"][1])


@pytest.mark.slow
def test_advantage_and_entropy_statistics_cover_every_token_of_every_rank(run):
    """advantage mean/std/max/min and entropy mean/p10/p90 of each ppo_train call equal those of the pooled
    action tokens of both ranks' micro-batches, on both ranks."""
    logs, _ = run
    for call in (1, 2):
        micro = [m for rank in _micro(logs, call) for m in rank]
        adv = np.array([a for m in micro for a in m["advantages"]])
        ent = np.array([e for m in micro for e in m["entropy"]])
        assert len(ent) == len(adv) == sum(m["ratio_stats"]["logratio_tokens"] for m in micro)
        for log in logs:
            status = log["statuses"][call - 1]
            assert status["advantage_mean"] == pytest.approx(adv.mean(), rel=1e-6, abs=1e-9)
            assert status["advantage_std"] == pytest.approx(adv.std(), rel=1e-6)
            assert status["advantage_max"] == pytest.approx(adv.max(), rel=1e-6)
            assert status["advantage_min"] == pytest.approx(adv.min(), rel=1e-6)
            assert status["entropy_mean"] == pytest.approx(ent.mean(), rel=1e-5)
            assert status["entropy_p10"] == pytest.approx(np.percentile(ent, 10), abs=0.02)
            assert status["entropy_p90"] == pytest.approx(np.percentile(ent, 90), abs=0.02)
        # the ranks' advantage means differ (-14/18 vs +14/18 of the scale): an average of per-rank stds is ~4% low
        rank_std = [np.std([a for m in rank for a in m["advantages"]]) for rank in _micro(logs, call)]
        assert np.mean(rank_std) < 0.99 * adv.std()


@pytest.mark.slow
def test_mismatch_keys_cover_every_token_of_every_rank(run):
    """mismatch_kl / out_of_band / is_clipped / abs_max of each call are those of the pooled action tokens of both
    ranks (each sample's vLLM log-probs sit ROLLOUT_GAPS below the trainer's), on both ranks; vllm_kl is absent
    (no IS correction) while the gap is still measured."""
    from tests.train.ppo_step_worker import MICRO_PER_RANK, RESPONSE_LEN, ROLLOUT_GAPS

    lengths = [RESPONSE_LEN - (i + 1) % 2 for i in range(MICRO_PER_RANK)] * WORLD
    gaps = np.array(list(ROLLOUT_GAPS) * WORLD)
    tokens = np.repeat(gaps, lengths)
    ratio = np.exp(tokens)
    for log in run[0]:
        for status in log["statuses"]:
            assert "vllm_kl" not in status
            assert status["mismatch_kl"] == pytest.approx(np.mean(ratio - 1 - tokens), rel=1e-4)
            assert status["mismatch_out_of_band"] == pytest.approx(np.mean((ratio < 0.9) | (ratio > 1.1)))
            assert status["mismatch_is_clipped"] == 0.0  # TIS [0.5, 5]: every ratio inside
            assert status["mismatch_abs_max"] == pytest.approx(0.3, rel=1e-4)
