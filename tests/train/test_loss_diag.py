"""The log-ratio clamp and masked diagnostics, through the real patched OpenRLHF PolicyLoss."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from rft.train.loss_diag import LOGRATIO_CLAMP, StepDiagnostics, clamp_log_ratio, ratio_diagnostics


@pytest.fixture
def policy_loss(patched_openrlhf):
    from openrlhf.models.loss import PolicyLoss

    return PolicyLoss


def batch(huge: float = 100.0):
    """2 samples x 4 tokens; sample 0 has one token with log-ratio `huge`; last 2 tokens of sample 1 padded."""
    old = torch.full((2, 4), -2.0)
    delta = torch.tensor([[0.1, huge, -0.3, 0.2], [-0.5, 0.05, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    new = (old + delta) * mask  # like Actor.forward: padded positions are exactly 0
    old = old * mask
    adv = torch.tensor([[-1.0] * 4, [0.5] * 4])
    return new.requires_grad_(), old, adv, mask


def test_ppo_clamp_keeps_loss_and_grads_finite(policy_loss):
    new, old, adv, mask = batch()
    loss_fn = policy_loss(clip_eps_low=0.2, clip_eps_high=0.2)
    loss, clip_ratio, ppo_kl, vllm_kl = loss_fn(new, old, adv, action_mask=mask)
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(new.grad).all()
    assert vllm_kl is None
    # independent computation: PPO token loss with the log-ratio clamped to +-20, masked mean over 6 tokens
    lr = (new - old).detach().clamp(-LOGRATIO_CLAMP, LOGRATIO_CLAMP)
    r = lr.exp()
    tok = -torch.min(r * adv, r.clamp(0.8, 1.2) * adv)
    assert loss.item() == pytest.approx(tok[mask].mean().item(), rel=1e-5)
    assert loss.item() > math.exp(LOGRATIO_CLAMP) / 6 * 0.99


def test_diagnostics_are_masked_and_taken_before_the_clamp(policy_loss):
    new, old, adv, mask = batch(huge=100.0)
    loss_fn = policy_loss()
    loss_fn(new, old, adv, action_mask=mask)
    stats = loss_fn.ratio_stats
    assert stats["logratio_raw_max"] == pytest.approx(100.0)
    assert stats["logratio_max"] == pytest.approx(LOGRATIO_CLAMP)
    assert stats["logratio_min"] == pytest.approx(-0.5)  # unmasked padding would give 0.0 / -(-2) etc.
    assert stats["ratio_max"] == pytest.approx(math.exp(LOGRATIO_CLAMP))
    assert stats["logratio_tokens"] == 6.0
    assert stats["logratio_clamped_frac"] == pytest.approx(1 / 6)
    assert stats["logratio_abs_p99"] == pytest.approx(100.0)


def test_ppo_kl_is_new_vs_old_even_with_vllm_is_correction(policy_loss):
    new, old, adv, mask = batch(huge=0.4)
    rollout = old - 0.3 * mask
    plain = policy_loss()
    _, _, kl_plain, _ = plain(new, old, adv, action_mask=mask)
    corrected = policy_loss(enable_vllm_is_correction=True, vllm_is_truncated_threshold=[0.5, 2.0])
    _, _, kl_corr, vllm_kl = corrected(new, old, adv, action_mask=mask, rollout_log_probs=rollout)
    expected = -((new - old).detach()[mask]).mean()
    assert kl_plain.item() == pytest.approx(expected.item(), abs=1e-6)
    assert kl_corr.item() == pytest.approx(expected.item(), abs=1e-6)  # 0.9.3 returned old-vs-rollout here
    assert vllm_kl.item() == pytest.approx(-0.3, abs=1e-6)


def test_gspo_branch_is_clamped_too(policy_loss):
    new, old, adv, mask = batch(huge=200.0)
    loss_fn = policy_loss(policy_loss_type="gspo")
    loss, *_ = loss_fn(new, old, adv, action_mask=mask)
    assert torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(new.grad).all()
    assert loss_fn.ratio_stats["logratio_raw_max"] == pytest.approx(200.0)


def test_ratio_diagnostics_empty_mask_and_no_mask():
    lr = torch.tensor([[1.0, -30.0]])
    assert ratio_diagnostics(lr, torch.zeros_like(lr, dtype=torch.bool))["logratio_tokens"] == 0.0
    stats = ratio_diagnostics(lr, None)
    assert stats["logratio_min"] == -LOGRATIO_CLAMP and stats["logratio_raw_max"] == 1.0


def test_step_diagnostics_reduce_max_min_sum():
    """Two 'ranks' whose maxima must be reduced with max (the upstream status loop would average them)."""
    ranks = [StepDiagnostics(), StepDiagnostics()]
    ranks[0].add_ratio_stats(ratio_diagnostics(torch.tensor([[0.1, 3.0]]), None))
    ranks[0].add_ratio_stats(ratio_diagnostics(torch.tensor([[0.2, -0.4]]), None))
    ranks[1].add_ratio_stats(ratio_diagnostics(torch.tensor([[25.0, -1.0, 0.0, 0.0]]), None))
    ranks[0].add_grad_norm(torch.tensor(3.5, dtype=torch.float64))
    ranks[1].add_grad_norm(3.5)
    ranks[0].add_grad_norm(None)

    def all_reduce(data, op):  # what strategy.all_reduce computes over the two ranks
        locs = [r.local() for r in ranks]
        if op == "max":
            out = {}
            for k in data:
                if k == "neg_logratio_min":
                    out[k] = max(-loc["logratio_min"] for loc in locs)
                else:
                    out[k] = max(loc[k] for loc in locs)
            return out
        assert op == "sum"
        return {"tokens": sum(r.tokens for r in ranks), "clamped": sum(r.clamped_tokens for r in ranks)}

    out = ranks[0].reduce(all_reduce)
    assert out["logratio_raw_max"] == 25.0
    assert out["logratio_max"] == LOGRATIO_CLAMP
    assert out["logratio_min"] == -1.0
    assert out["logratio_tokens"] == 8.0
    assert out["logratio_clamped_frac"] == pytest.approx(1 / 8)
    assert out["grad_norm"] == 3.5 and out["grad_norm_steps"] == 1.0


@pytest.mark.parametrize("loss_type", ["ppo", "gspo"])
@pytest.mark.parametrize("is_type", [None, "tis", "icepop", "mis"])
@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_every_branch_stays_finite_and_logs_new_vs_old_kl(policy_loss, loss_type, is_type, dual_clip):
    """Every PolicyLoss variant of 0.9.3 (ppo/gspo x no/tis/icepop/mis IS correction x dual-clip) with a +100
    policy log-ratio and a rollout 100 nats off: finite loss and grads (0.9.3: inf, or NaN from icepop/mis's
    exp overflow times a zero mask) and ppo_kl = new-vs-old."""
    new, old, adv, mask = batch(huge=100.0)
    rollout = old - torch.tensor([[0.0, 0.0, 100.0, 0.0], [0.1, 0.0, 0.0, 0.0]]) * mask
    kwargs = dict(policy_loss_type=loss_type, dual_clip=dual_clip)
    if is_type:
        kwargs.update(enable_vllm_is_correction=True, vllm_is_truncated_threshold=[0.5, 2.0],
                      vllm_is_correction_type=is_type)
    loss_fn = policy_loss(**kwargs)
    loss, _, ppo_kl, vllm_kl = loss_fn(new, old, adv, action_mask=mask, rollout_log_probs=rollout if is_type else None)
    assert torch.isfinite(loss), loss
    loss.backward()
    assert torch.isfinite(new.grad).all()
    assert ppo_kl.item() == pytest.approx(-((new - old).detach()[mask]).mean().item(), rel=1e-6)
    assert loss_fn.ratio_stats["logratio_raw_max"] >= 99.0 and loss_fn.ratio_stats["logratio_max"] <= LOGRATIO_CLAMP
    if is_type and loss_type == "ppo":
        assert math.isfinite(vllm_kl.item())


class ThreadGroup:
    """A stand-in for `strategy.all_reduce` across `n` ranks run as threads: each rank's call blocks until every
    rank has sent its dict, then returns the element-wise reduction (max / sum / mean) of what they sent."""

    OPS = {"max": max, "sum": sum, "mean": lambda xs: sum(xs) / len(xs)}

    def __init__(self, n: int) -> None:
        self.n, self.sent = n, [None] * n
        self.barrier = threading.Barrier(n, timeout=30)
        self.calls: list[tuple[int, str, dict]] = []

    def all_reduce_for(self, rank: int):
        def all_reduce(data: dict, op: str) -> dict:
            self.sent[rank] = {k: float(v) for k, v in data.items()}
            self.calls.append((rank, op, dict(self.sent[rank])))
            self.barrier.wait()
            keys = set(self.sent[0])
            assert all(set(s) == keys for s in self.sent), "ranks sent different keys: the collectives would hang"
            out = {k: self.OPS[op]([s[k] for s in self.sent]) for k in keys}
            self.barrier.wait()
            return out

        return all_reduce

    def run(self, ranks: list[StepDiagnostics]) -> list[dict]:
        """Every rank calls `reduce` at once (it is collective); their results, by rank."""
        with ThreadPoolExecutor(len(ranks)) as pool:
            futures = [pool.submit(r.reduce, self.all_reduce_for(i)) for i, r in enumerate(ranks)]
            return [f.result(timeout=60) for f in futures]


def ranks_with(*log_ratios: list[list[float]] | None) -> list[StepDiagnostics]:
    """One StepDiagnostics per rank, fed one micro-batch per tensor (None: a rank with no action tokens)."""
    ranks = []
    for batches in log_ratios:
        d = StepDiagnostics()
        for b in batches or []:
            d.add_ratio_stats(ratio_diagnostics(torch.tensor([b]), None))
        ranks.append(d)
    return ranks


@pytest.mark.parametrize(
    ("per_rank", "expected_min"),
    [
        ([[[0.1, -1.0]], [[-3.0, 0.2]]], -3.0),  # the most negative minimum wins, whichever rank holds it
        ([[[-3.0, 0.2]], [[0.1, -1.0]]], -3.0),
        ([[[0.5, 2.0]], [[1.5, 4.0], [0.75]]], 0.5),  # all log-ratios positive: still the smallest
        ([[[-30.0, 1.0]], [[0.0]]], -LOGRATIO_CLAMP),  # minima are taken after the clamp
        ([None, [[-0.25, 2.0]]], -0.25),  # a rank without action tokens sends -inf and changes nothing
    ],
)
def test_cross_rank_reduction_through_a_real_collective(per_rank, expected_min):
    """Every rank gets the same reduced values, computed from what each rank really sent."""
    ranks = ranks_with(*per_rank)
    flat = [x for batches in per_rank if batches for b in batches for x in b]
    outs = ThreadGroup(len(ranks)).run(ranks)
    assert all(o == outs[0] for o in outs)
    out = outs[0]
    assert out["logratio_min"] == pytest.approx(expected_min)
    assert out["logratio_raw_max"] == pytest.approx(max(flat))
    assert out["logratio_max"] == pytest.approx(min(max(flat), LOGRATIO_CLAMP))
    assert out["ratio_max"] == pytest.approx(math.exp(out["logratio_max"]))
    assert out["logratio_tokens"] == len(flat)
    clamped = sum(abs(x) > LOGRATIO_CLAMP for x in flat)
    assert out["logratio_clamped_frac"] == pytest.approx(clamped / len(flat))


def test_cross_rank_reduction_with_no_tokens_anywhere_and_grad_norms():
    """No rank saw an action token: no ratio keys at all (not -inf, not 0); grad norms still reduce with max."""
    ranks = ranks_with(None, None)
    ranks[0].add_grad_norm(2.0)
    ranks[1].add_grad_norm(5.0)
    ranks[1].add_grad_norm(1.0)
    group = ThreadGroup(2)
    outs = group.run(ranks)
    # grad_norm_steps is each rank's own count of optimizer steps
    assert outs == [{"grad_norm": 5.0, "grad_norm_steps": 1.0}, {"grad_norm": 5.0, "grad_norm_steps": 2.0}]
    assert {op for _, op, _ in group.calls} == {"max", "sum"} and len(group.calls) == 4


def test_local_values_fold_every_micro_batch():
    """One rank, three micro-batches (one without action tokens): this rank's values before any reduction."""
    d = StepDiagnostics()
    d.add_ratio_stats(ratio_diagnostics(torch.tensor([[-2.0, 30.0, 0.5]]), None))
    d.add_ratio_stats(ratio_diagnostics(torch.tensor([[9.0, 9.0]]), torch.zeros(1, 2, dtype=torch.bool)))  # no tokens
    d.add_ratio_stats({})
    d.add_ratio_stats(ratio_diagnostics(torch.tensor([[-1.0, 25.0, -40.0, 0.0, 1.0]]), None))
    out = d.local()
    assert out["logratio_min"] == -LOGRATIO_CLAMP  # the smallest of every micro-batch, after the clamp
    assert out["logratio_raw_max"] == 30.0 and out["logratio_max"] == LOGRATIO_CLAMP
    assert out["logratio_tokens"] == 8.0
    assert out["logratio_clamped_frac"] == pytest.approx(3 / 8)  # 30, 25 and -40 were clamped
    assert "grad_norm" not in out
    first_smaller = StepDiagnostics()
    first_smaller.add_ratio_stats(ratio_diagnostics(torch.tensor([[-3.0]]), None))
    first_smaller.add_ratio_stats(ratio_diagnostics(torch.tensor([[-1.0, 2.0]]), None))
    assert first_smaller.local()["logratio_min"] == -3.0
    assert StepDiagnostics().local() == {}


def test_a_micro_batch_without_tokens_changes_nothing():
    """Its all-zero statistics must not pull a positive minimum or a negative maximum to 0."""
    d = StepDiagnostics()
    d.add_ratio_stats(ratio_diagnostics(torch.tensor([[5.0]]), torch.zeros(1, 1, dtype=torch.bool)))
    d.add_ratio_stats(ratio_diagnostics(torch.tensor([[0.5, 2.0]]), None))
    e = StepDiagnostics()
    e.add_ratio_stats(ratio_diagnostics(torch.tensor([[5.0]]), torch.zeros(1, 1, dtype=torch.bool)))
    e.add_ratio_stats(ratio_diagnostics(torch.tensor([[-0.5, -2.0]]), None))
    assert d.local()["logratio_min"] == 0.5 and e.local()["logratio_raw_max"] == -0.5
    assert d.local()["logratio_tokens"] == 2.0


def test_clamp_bounds_both_sides_and_stops_the_gradient_outside():
    x = torch.tensor([-50.0, -3.0, 0.0, 7.0, 50.0], requires_grad=True)
    y = clamp_log_ratio(x, bound=10.0)
    assert y.tolist() == [-10.0, -3.0, 0.0, 7.0, 10.0]
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    assert clamp_log_ratio(torch.tensor([-1e4, 1e4])).tolist() == [-LOGRATIO_CLAMP, LOGRATIO_CLAMP]
