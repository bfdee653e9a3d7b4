"""Data rows for the launch tests: distinct problems with integer labels, optionally with an SFT output."""

from __future__ import annotations

from pathlib import Path

from rft.io import atomic_write_jsonl
from rft.prompts import build_input


def rows(prefix: str, n: int, *, output: bool = False) -> list[dict]:
    out = []
    for i in range(n):
        row = {"input": build_input(f"{prefix} problem number {i}: compute {i} + {i}."), "label": str(2 * i)}
        if output:
            row["output"] = f"{i} + {i} = \\boxed{{{2 * i}}}"
        out.append(row)
    return out


def write_launch_data(d: Path) -> Path:
    """Tiny data files with the names the scripts read (as prepare_sft_data.py writes them); train and eval disjoint."""
    d.mkdir(parents=True, exist_ok=True)
    # 16 prompts: long enough for every recipe's LR preflight at its episode count (see test_full_pool_...).
    atomic_write_jsonl(d / "sft_rl_pool.jsonl", rows("pool", 16))
    atomic_write_jsonl(d / "sft_rl_pool_400.jsonl", rows("pool", 400))
    atomic_write_jsonl(d / "probe_set_200_ood.jsonl", [{**r, "datasource": "probe_ood"} for r in rows("ood", 10)])
    atomic_write_jsonl(d / "gsm8k_rl_pool.jsonl", rows("gsm", 300))
    atomic_write_jsonl(d / "gsm8k_eval.jsonl", rows("gsmeval", 10))
    atomic_write_jsonl(d / "sft_train.jsonl", rows("sft", 20, output=True))
    atomic_write_jsonl(d / "sft_dev.jsonl", rows("dev", 5, output=True))
    return d
