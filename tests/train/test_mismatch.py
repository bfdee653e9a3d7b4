"""rft.train.mismatch: the rollout/trainer gap keys, over micro-batches and ranks (sum/max reductions)."""

from __future__ import annotations

import math

import pytest
import torch

from rft.train.mismatch import BIN_KEYS, KEYS, MismatchStats, is_clipped


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
                                    "mismatch_abs_max": 0.0, "mismatch_kl_pos0_512": 0.0}


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
             "abs_max": torch.tensor([b.abs_max], dtype=torch.float64),
             "bin_n": torch.tensor(b.bin_n, dtype=torch.float64), "bin_k3": torch.tensor(b.bin_k3, dtype=torch.float64)}
    out = a.reduce(_sum_max(other))
    assert out["mismatch_out_of_band"] == pytest.approx(1 / 8)
    assert out["mismatch_abs_max"] == pytest.approx(0.5)
    assert out["mismatch_kl"] == pytest.approx((math.exp(-0.5) - 1 + 0.5) / 8)


def test_no_rollout_log_probs_sends_the_keys_and_reports_nothing():
    s = MismatchStats()
    s.add(torch.zeros(1, 2), None, torch.ones(1, 2))
    sent = []
    assert s.reduce(lambda d, op: sent.append(sorted(d)) or d) == {}
    assert sent == [["bin_k3", "bin_n", "clip", "k3", "n", "oob"], ["abs_max"]]
    assert set(KEYS) == {"mismatch_kl", "mismatch_out_of_band", "mismatch_is_clipped", "mismatch_abs_max"}


def test_kl_is_binned_by_response_position():
    """Positions count action tokens from each response's first (left padding and prompt columns excluded); a bin
    with no tokens sends nothing; the bins' token-weighted means give the overall mismatch_kl."""
    t = 2600
    mask = torch.ones(2, t)
    mask[1, :100] = 0  # the second response starts 100 columns in: its position 0 is column 100
    d = torch.zeros(2, t)
    d[:, 2100:] = 0.2  # late gap: row 0 positions 2100.., row 1 positions 2000..
    d[1, 100:612] = 0.1  # row 1's first 512 positions
    s = MismatchStats()
    s.add(d, torch.zeros(2, t), mask)
    out = s.reduce(_sum_max())
    k3 = {x: math.exp(x) - 1 - x for x in (0.1, 0.2)}
    assert BIN_KEYS == ("mismatch_kl_pos0_512", "mismatch_kl_pos512_2048", "mismatch_kl_pos2048_")
    assert out["mismatch_kl_pos0_512"] == pytest.approx(512 * k3[0.1] / 1024)
    assert out["mismatch_kl_pos512_2048"] == pytest.approx(48 * k3[0.2] / (2 * 1536))
    assert out["mismatch_kl_pos2048_"] == pytest.approx((500 + 452) * k3[0.2] / (552 + 452))
    assert out["mismatch_kl"] == pytest.approx((512 * k3[0.1] + 1000 * k3[0.2]) / (2 * t - 100))
    short = MismatchStats()
    short.add(torch.full((1, 8), 0.1), torch.zeros(1, 8), torch.ones(1, 8))
    assert set(short.reduce(_sum_max())) == {*KEYS, "mismatch_kl_pos0_512"}
