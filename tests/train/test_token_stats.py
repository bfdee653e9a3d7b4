"""Advantage and entropy statistics reduced across ranks: each rank's TokenStats.reduce runs in its own thread
against a stand-in all_reduce that waits for every rank and really reduces what each one sent."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch

from rft.train.token_stats import ENTROPY_MAX, KEYS, TokenStats, histogram_quantile


class StandInGroup:
    """all_reduce(dict, op) over `world` threads: every call blocks until all ranks sent their dict."""

    def __init__(self, world: int):
        self.world = world
        self.barrier = threading.Barrier(world)
        self.sent: list[dict | None] = [None] * world
        self.calls = 0

    def for_rank(self, rank: int):
        def all_reduce(data: dict, op: str = "mean") -> dict:
            self.sent[rank] = {k: v.clone() if isinstance(v, torch.Tensor) else torch.tensor([float(v)])
                               for k, v in data.items()}
            self.barrier.wait()
            parts = list(self.sent)
            assert all(p.keys() == parts[0].keys() for p in parts)  # same keys on every rank, or a real run hangs
            out = {}
            for k in parts[0]:
                stacked = torch.stack([p[k] for p in parts])
                out[k] = {"sum": stacked.sum(0), "max": stacked.max(0).values, "mean": stacked.mean(0)}[op]
            self.barrier.wait()  # nobody overwrites `sent` before everyone has read it
            if rank == 0:
                self.calls += 1
            return out
        return all_reduce


def reduce_all(ranks: list[TokenStats]) -> list[dict]:
    group, results = StandInGroup(len(ranks)), [None] * len(ranks)

    def run(r):
        results[r] = ranks[r].reduce(group.for_rank(r))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(ranks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert group.calls == 2
    return results


def test_statistics_over_every_token_of_every_rank():
    gen = torch.Generator().manual_seed(0)
    ranks, all_adv, all_ent, rank_adv = [], [], [], []
    for rank in range(3):
        st = TokenStats()
        for micro in range(2 + rank):  # ranks see different numbers of micro-batches and tokens
            length = 5 + 3 * micro + rank
            mask = torch.zeros(2, length, dtype=torch.bool)
            mask[0, : length - 2] = True
            mask[1, 1:] = True
            adv = (torch.randn(2, 1, generator=gen) * (rank + 1) + rank).expand(2, length).clone()
            ent = torch.rand(2, length, generator=gen) * (2.0 + rank)
            st.add(adv, mask, ent)
            all_adv += adv[mask].tolist()
            rank_adv.append((rank, adv[mask].tolist()))
            all_ent += ent[mask].tolist()
        ranks.append(st)
    results = reduce_all(ranks)
    a, e = np.array(all_adv), np.array(all_ent)
    for out in results:  # every rank gets the same, global, numbers
        assert set(out) == set(KEYS)
        assert out["advantage_mean"] == pytest.approx(a.mean(), rel=1e-12)
        assert out["advantage_std"] == pytest.approx(a.std(), rel=1e-9)
        assert (out["advantage_max"], out["advantage_min"]) == (pytest.approx(a.max()), pytest.approx(a.min()))
        assert out["entropy_mean"] == pytest.approx(e.mean(), rel=1e-12)
        for q, key in ((10, "entropy_p10"), (90, "entropy_p90")):
            assert out[key] == pytest.approx(np.percentile(e, q), abs=ENTROPY_MAX / 1600 + 0.01)
    # the ranks differ, so a mean of per-rank statistics would be wrong
    per_rank_std = np.mean([np.std([x for r, xs in rank_adv if r == k for x in xs]) for k in range(3)])
    assert abs(per_rank_std - a.std()) > 0.05


def test_a_rank_without_tokens_sends_the_same_keys():
    full = TokenStats()
    full.add(torch.tensor([[1.0, -1.0, 3.0]]), torch.tensor([[True, True, False]]), torch.tensor([[0.5, 1.5, 9.0]]))
    results = reduce_all([full, TokenStats()])
    for out in results:
        assert out["advantage_mean"] == 0.0 and out["advantage_std"] == 1.0
        assert (out["advantage_max"], out["advantage_min"]) == (1.0, -1.0)
        assert out["entropy_mean"] == 1.0  # the masked-out 9.0 is not a token
    assert reduce_all([TokenStats(), TokenStats()]) == [{}, {}]
    no_entropy = TokenStats()
    no_entropy.add(torch.ones(1, 4), None, None)  # --entropy_loss_coef unset: no entropy keys
    assert set(reduce_all([no_entropy])[0]) == {"advantage_mean", "advantage_std", "advantage_max", "advantage_min"}


def test_histogram_quantile():
    hist = torch.zeros(1600, dtype=torch.float64)
    hist[100] = 10  # ten tokens in [1.00, 1.01)
    assert histogram_quantile(hist, 0.5) == pytest.approx(1.005)
    assert math.isnan(histogram_quantile(torch.zeros(4), 0.5))
