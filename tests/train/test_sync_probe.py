"""rft/train/sync_probe.py: the probe's log-prob reading from a vLLM RequestOutput and its comparison helpers
(the verdict on generated numbers: tests/monitor/test_smoke_verdict.py; on the real engine: the vLLM suite)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rft.train.sync_probe import (
    RECIPE_STEPS,
    decisive_norm,
    judge_sync,
    kept_scales,
    kept_share,
    mean_prompt_logprob,
    probe_stats,
    prompt_logprobs,
    run_to_run_floor,
)


def test_prompt_logprobs_reads_the_prompt_tokens_own_logprobs():
    lp = SimpleNamespace
    out = SimpleNamespace(prompt_token_ids=[5, 7, 9],
                          prompt_logprobs=[None, {7: lp(logprob=-1.0), 3: lp(logprob=-0.1)}, {9: lp(logprob=-3.0)}])
    assert prompt_logprobs(out) == [-1.0, -3.0] and mean_prompt_logprob(out) == -2.0


def test_a_probe_without_prompt_logprobs_is_an_error():
    out = SimpleNamespace(prompt_token_ids=[5, 7], prompt_logprobs=[None, None])
    with pytest.raises(ValueError, match="without prompt log-probs"):
        prompt_logprobs(out)


def test_kept_share_adds_the_shards_and_defaults_to_one():
    reports = [{"kept": [[1.0, 4.0], [0.0, 1.0]]}, {"kept": [[2.0, 2.0], [0.5, 1.0]]}]
    assert kept_share(reports) == 0.5 and kept_share(reports, 1) == 0.25
    assert kept_share([{"modules": 8}]) == 1.0  # native mode reports none: nothing rounded into the weights


def test_kept_scales_scale_the_update_to_the_recipe_lr():
    assert kept_scales(0.0, 1e-4, 1) == [1.0]
    assert kept_scales(5e-7, 1e-4, 1) == pytest.approx([1.0, 5e-7 * RECIPE_STEPS / 1e-4])
    assert kept_scales(5e-7, 1e-4, 2)[1] == pytest.approx(kept_scales(5e-7, 1e-4, 1)[1] / 2)


def test_the_floor_is_the_largest_token_change_of_any_engine():
    assert run_to_run_floor([[-1.0, -2.0], [-1.0, -2.0]], [[-1.0, -2.0], [-1.0, -2.001]]) == pytest.approx(1e-3)


def test_probe_stats_log_the_worst_engine():
    base = [[-1.0] * 4, [-1.0] * 4]
    trainer_base, trainer_now = [-1.0] * 4, [-0.9] * 4
    good, bad = [-0.9] * 4, [-1.1] * 4
    row = probe_stats(base, [good, bad], trainer_base, trainer_now, 0.0, 1.0)
    assert row["lora_sync_probe_cosine"] == pytest.approx(-1.0)  # the wrong-sign engine, not the good one
    assert not judge_sync(row)[0]
    # with a change that cannot be judged (below decisive_norm), even a perfect match is no PASS
    tiny = probe_stats(base, [[-0.9999] * 4] * 2, trainer_base, [-0.9999] * 4, 0.0, 1.0)
    assert tiny["lora_sync_probe_rel_error"] == pytest.approx(0.0, abs=1e-6)
    assert tiny["lora_sync_probe_expected_norm"] < decisive_norm(0.0, 4) and not judge_sync(tiny)[0]
    ok = probe_stats(base, [good, good], trainer_base, trainer_now, 0.0, 1.0)
    assert ok["lora_sync_probe_expected_norm"] > decisive_norm(0.0, 4) and judge_sync(ok)[0]
