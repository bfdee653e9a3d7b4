"""Data rows for the launch tests: distinct problems with integer labels, optionally with an SFT output."""

from __future__ import annotations

from rft.prompts import build_input


def rows(prefix: str, n: int, *, output: bool = False) -> list[dict]:
    out = []
    for i in range(n):
        row = {"input": build_input(f"{prefix} problem number {i}: compute {i} + {i}."), "label": str(2 * i)}
        if output:
            row["output"] = f"{i} + {i} = \\boxed{{{2 * i}}}"
        out.append(row)
    return out
