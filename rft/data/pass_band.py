"""The RL pool cut to a band of the base model's pass rates (`prepare_sft_data.py --pass-rates`).

A problem the base model solves in every one of its n samples, or in none, gives GRPO a group with one reward
for every sample: zero advantage, nothing learnt, full rollout cost. The default band keeps 0 < pass rate < 1
(with n = 8: 1/8 to 7/8). Pass rates come from `eval_posthoc.py --pass-rates` (rows keyed by problem_hash);
pool rows without one are dropped and counted. `--pass-order easy-first` sorts the band pool by descending
pass rate (a curriculum; OpenRLHF keeps that order only with `--prompt_data_in_order`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rft.data.problems import problem_hash
from rft.data.sources import DataError
from rft.io import read_jsonl

ORDERS = ("pool", "easy-first")
DEFAULT_BAND = (0.01, 0.99)
"""Inclusive bounds: with any n <= 99 samples this drops exactly the never- and always-solved problems."""


@dataclass(frozen=True)
class BandConfig:
    """Where the pass rates are and which band of them the pool keeps, in which order."""

    path: Path
    low: float = DEFAULT_BAND[0]
    high: float = DEFAULT_BAND[1]
    order: str = "pool"


def read_pass_rates(path: Path) -> dict[str, float]:
    """problem_hash -> pass rate of a pass-rate file; a malformed file is a DataError naming it."""
    try:
        rows = read_jsonl(path)
    except (OSError, ValueError) as e:
        raise DataError(f"--pass-rates {path}: unreadable ({e})") from None
    rates = {}
    for n, row in enumerate(rows, 1):
        rate = row.get("pass_rate") if isinstance(row, dict) else None
        if not isinstance(row, dict) or not isinstance(row.get("problem_hash"), str) or not isinstance(
            rate, int | float
        ) or not 0 <= rate <= 1:
            raise DataError(f"--pass-rates {path}:{n}: expected problem_hash and a pass_rate in [0, 1]")
        rates[row["problem_hash"]] = float(rate)
    return rates


def band_pool(pool: Sequence[dict], rates: dict[str, float], cfg: BandConfig) -> tuple[list[dict], dict]:
    """(the pool rows inside the band, in the chosen order; the report section: histogram, share kept)."""
    if not 0 <= cfg.low <= cfg.high <= 1:
        raise DataError(f"--pass-band {cfg.low} {cfg.high}: expected 0 <= LOW <= HIGH <= 1")
    if cfg.order not in ORDERS:
        raise DataError(f"--pass-order {cfg.order!r}: expected one of {', '.join(ORDERS)}")
    measured = [(i, rates.get(problem_hash(r["input"]))) for i, r in enumerate(pool)]
    kept = [(i, p) for i, p in measured if p is not None and cfg.low <= p <= cfg.high]
    if cfg.order == "easy-first":
        kept.sort(key=lambda ip: (-ip[1], ip[0]))
    counts = Counter(round(p, 6) for _, p in measured if p is not None)
    histogram = [
        {"pass_rate": p, "problems": c, "share": c / len(pool), "kept": cfg.low <= p <= cfg.high}
        for p, c in sorted(counts.items())
    ]
    unmeasured = sum(p is None for _, p in measured)
    report = {
        "pass_rates": str(cfg.path),
        "band": [cfg.low, cfg.high],
        "order": cfg.order,
        "pool": len(pool),
        "unmeasured": unmeasured,
        "kept": len(kept),
        "share_kept": len(kept) / len(pool) if pool else 0.0,
        "histogram": histogram,
    }
    if not kept:
        raise DataError(f"--pass-band {cfg.low} {cfg.high}: no pool problem inside the band ({unmeasured} unmeasured)")
    return [pool[i] for i, _ in kept], report
