"""The data pipeline's settings and input specs, and the seeded draws every split and eval set makes from them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rft.data.sources import DataError


@dataclass
class DataConfig:
    """Every knob of the pipeline; the defaults reproduce the data layout in docs/data.md."""

    seed: int = 42
    rl_pool_size: int = 50_000
    sft_size: int = 5_000
    sft_dev_size: int = 500
    pool_subset_size: int = 400
    probe_size: int = 200
    probe_id_mode: str = "in-pool"
    aime_size: int = 18
    ood_math_size: int = 170
    math_levels: tuple[int, ...] = (4, 5)
    gsm8k_eval_size: int = 500
    gsm8k_pool_size: int = 0
    exclude_sources: tuple[str, ...] = ("amc_aime",)
    require_valid: bool = True
    min_problem_chars: int = 20
    min_solution_chars: int = 50
    batch_size: int = 65_536
    progress: bool = True


@dataclass
class Inputs:
    """Source specs of every input dataset (local paths or hub ids); gsm8k_* None skips the GSM8K files."""

    numina: str
    aime: str
    math: tuple[str, ...]
    apex: str
    gsm8k_train: str | None
    gsm8k_test: str | None


def seeded_rng(seed: int, purpose: int) -> np.random.Generator:
    """An independent generator per purpose, so changing one size never reshuffles another split."""
    return np.random.default_rng([seed, purpose])


def choose(n: int, k: int, rng: np.random.Generator, what: str, flag: str) -> list[int]:
    """k distinct indices out of n in increasing order; too few candidates is an error naming the flag."""
    if k > n:
        raise DataError(f"{what}: only {n} eligible problems, but {flag} asks for {k}")
    return sorted(rng.choice(n, size=k, replace=False).tolist())
