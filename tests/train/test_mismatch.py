"""rft.train.mismatch: the rollout/trainer gap keys, over micro-batches and ranks (sum/max reductions)."""

from __future__ import annotations

import math

import pytest
import torch

from rft.train.mismatch import KEYS, MismatchStats, is_clipped


def _sum_max(other: dict | None = None):
    """`strategy.all_reduce` of a world where the other rank sent `other` (None: world of one)."""

    def all_reduce(d, op):
        if other is None:
            return d
        return {k: (v + other[k] if op == "sum" else torch.maximum(v, other[k])) for k, v in d.items()}

    return all_reduce


def test_gaps_of_both_signs_do_not_cancel():
    trainer = torch.zeros(1, 4)
    rollout = torch.tensor([[0.3, -0.3, 0.05, 0.0]])  # mean difference 0.0125: vllm_kl reads almost nothing
    mask = torch.ones(1, 4)
    s = MismatchStats("tis", (0.5, 5.0))
    s.add(trainer, rollout, mask)
    out = s.reduce(_sum_max())
    d = -rollout[0].double()
    k3 = (d.exp() - 1 - d).mean().item()
    assert out["mismatch_kl"] == pytest.approx(k3)
    assert out["mismatch_kl"] > 0.02
    assert out["mismatch_out_of_band"] == pytest.approx(0.5)  # exp(-0.3)=0.74, exp(0.3)=1.35 out; 0.95, 1 in
    assert out["mismatch_abs_max"] == pytest.approx(0.3)
    assert out["mismatch_is_clipped"] == 0.0


def test_padding_and_non_finite_tokens_are_left_out():
    trainer = torch.tensor([[0.0, 0.0, 5.0]])
    rollout = torch.tensor([[0.0, float("-inf"), -5.0]])
    mask = torch.tensor([[1, 1, 0]])
    s = MismatchStats()
    s.add(trainer, rollout, mask)
    assert s.reduce(_sum_max()) == {"mismatch_kl": 0.0, "mismatch_out_of_band": 0.0, "mismatch_is_clipped": 0.0,
                                    "mismatch_abs_max": 0.0}


def test_clipped_share_follows_the_correction_type():
    d = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # exp(1) = 2.7 > 2
    mask = torch.ones(2, 4, dtype=torch.bool)
    assert is_clipped(d, mask, "tis", (0.5, 2.0)).sum() == 1
    assert is_clipped(d, mask, "icepop", (0.5, 2.0)).sum() == 1
    # mis drops the whole first sequence only when its mean log-ratio leaves the band: 0.25 -> 1.28 < 2
    assert is_clipped(d, mask, "mis", (0.5, 2.0)).sum() == 0
    assert is_clipped(d, mask, "mis", (0.5, 1.2)).sum() == 4
    with pytest.raises(ValueError, match="unknown"):
        is_clipped(d, mask, "bogus", (0.5, 2.0))


def test_two_ranks_combine_by_tokens_and_max():
    a, b = MismatchStats(), MismatchStats()
    a.add(torch.zeros(1, 2), torch.tensor([[0.5, 0.0]]), torch.ones(1, 2))
    b.add(torch.zeros(1, 6), torch.zeros(1, 6), torch.ones(1, 6))
    other = {"n": torch.tensor([b.n], dtype=torch.float64), "k3": torch.tensor([b.k3_sum], dtype=torch.float64),
             "oob": torch.tensor([b.out_of_band], dtype=torch.float64),
             "clip": torch.tensor([b.clipped], dtype=torch.float64),
             "abs_max": torch.tensor([b.abs_max], dtype=torch.float64)}
    out = a.reduce(_sum_max(other))
    assert out["mismatch_out_of_band"] == pytest.approx(1 / 8)
    assert out["mismatch_abs_max"] == pytest.approx(0.5)
    assert out["mismatch_kl"] == pytest.approx((math.exp(-0.5) - 1 + 0.5) / 8)


def test_no_rollout_log_probs_sends_the_keys_and_reports_nothing():
    s = MismatchStats()
    s.add(torch.zeros(1, 2), None, torch.ones(1, 2))
    sent = []
    assert s.reduce(lambda d, op: sent.append(sorted(d)) or d) == {}
    assert sent == [["clip", "k3", "n", "oob"], ["abs_max"]]
    assert set(KEYS) == {"mismatch_kl", "mismatch_out_of_band", "mismatch_is_clipped", "mismatch_abs_max"}
