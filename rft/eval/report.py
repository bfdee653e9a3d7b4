"""Post-hoc eval reports: baseline comparison (delta + flips), run summary, markdown table, console table.

The markdown block is meant for rl_grpo_research.md: one row per model x dataset x mode, every figure
with its 95% bootstrap interval over problems, the resolution of one problem, and the SFT verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rft.eval.passk import paired_bootstrap_ci
from rft.io import atomic_write_json, atomic_write_text

SFT_BOXED_THRESHOLD = 0.95  # the playbook: SFT only when the \boxed{} rate is below 95%


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal."""
    return f"{100 * x:.1f}%"


def compare(cell: dict, base: dict, *, n_boot: int, seed: int) -> dict:
    """Headline delta vs the baseline cell (paired bootstrap CI) and the per-problem flips."""
    if cell["problem_ids"] != base["problem_ids"]:
        raise ValueError(f"{cell['model']} and {base['model']} on {cell['dataset']} saw different problems")
    name = cell["headline"]
    mine, theirs = cell["figures"][name]["per_problem"], base["figures"][name]["per_problem"]
    lo, hi = paired_bootstrap_ci(mine, theirs, n_boot=n_boot, seed=seed)
    pids = cell["problem_ids"]
    fixed = [p for p, a, b in zip(pids, cell["solved"], base["solved"], strict=True) if a and not b]
    broken = [p for p, a, b in zip(pids, cell["solved"], base["solved"], strict=True) if b and not a]
    delta = cell["figures"][name]["value"] - base["figures"][name]["value"]
    return {
        "baseline": base["model"],
        "metric": name,
        "delta": delta,
        "ci95": [lo, hi],
        "fixed": fixed,
        "broken": broken,
    }


def summarize(cells: Sequence[dict], baseline: str, *, settings: dict, n_boot: int, seed: int) -> dict:
    """The run summary: every cell's figures, its comparison to the baseline, per-model format rates."""
    index = {(c["model"], c["dataset"], c["mode"]): c for c in cells}
    out_cells = []
    for c in cells:
        entry = {
            k: c[k]
            for k in (
                "model",
                "dataset",
                "mode",
                "headline",
                "n_problems",
                "n_samples",
                "rates",
                "model_dir",
                "dataset_path",
                "prompts_sha256",
            )
        }
        entry["figures"] = {k: {"value": v["value"], "ci95": v["ci95"]} for k, v in c["figures"].items()}
        base = index.get((baseline, c["dataset"], c["mode"]))
        if c["model"] != baseline and base is not None:
            entry["vs_baseline"] = compare(c, base, n_boot=n_boot, seed=seed)
        greedy = index.get((c["model"], c["dataset"], "greedy_pass@1"))
        if c["mode"] == "nondet_proxy_pass@8" and greedy is not None:  # fragile solutions show up as this gap
            entry["gap_vs_greedy_pass@1"] = (
                c["figures"]["pass@8"]["value"] - greedy["figures"]["pass@1"]["value"]
            )
        out_cells.append(entry)
    per_model: dict[str, dict] = {}
    for name in dict.fromkeys(c["model"] for c in cells):
        mine = [c for c in cells if c["model"] == name]
        basis = [c for c in mine if c["mode"] == "greedy_pass@1"] or mine  # the playbook checks at T=0
        n = sum(c["n_samples"] for c in basis)
        m: dict = {"basis": sorted({c["mode"] for c in basis}), "samples": n}
        for k in ("boxed", "boxed_in_final", "truncated"):
            m[k] = sum(c["rates"][k] * c["n_samples"] for c in basis) / n
        m["sft_needed"] = m["boxed"] < SFT_BOXED_THRESHOLD
        per_model[name] = m
    return {
        "baseline": baseline,
        "settings": settings,
        "n_boot": n_boot,
        "cells": out_cells,
        "models": per_model,
    }


def fig(f: dict) -> str:
    return f"{pct(f['value'])} [{pct(f['ci95'][0])}, {pct(f['ci95'][1])}]"


def _fig_plain(f: dict) -> str:
    return f"{f['value']:.2f} [{f['ci95'][0]:.2f}, {f['ci95'][1]:.2f}]"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f} pp"


def markdown_report(summary: dict, title: str) -> str:
    """The markdown block for rl_grpo_research.md: results table, flips, format check / SFT verdict."""
    s = summary["settings"]
    base = summary["baseline"]
    lines = [
        f"### {title}",
        "",
        f"Backend `{s['backend']}`, max tokens {s['max_new_tokens']}, seed {s['seed']}, reasoning effort "
        f"`{s['reasoning_effort']}`, chat date `{s['chat_date']}`. Brackets: 95% bootstrap CI over problems "
        f"({summary['n_boot']} resamples). Modes are never mixed: compare rows of the same mode only.",
        "",
        f"| model | dataset (problems; 1 problem =) | mode | headline | Δ vs {base} [95% CI] | other figures | "
        "boxed | truncated | fixed | broken |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in summary["cells"]:
        head = c["figures"][c["headline"]]
        others = "; ".join(
            f"{k} {_fig_plain(v) if k == 'distinct_answers' else fig(v)}"
            for k, v in c["figures"].items()
            if k != c["headline"]
        )
        if "gap_vs_greedy_pass@1" in c:
            others += f"; gap vs greedy_pass@1 {_pp(c['gap_vs_greedy_pass@1'])}"
        vs = c.get("vs_baseline")
        delta = (
            "baseline"
            if c["model"] == base
            else (f"{_pp(vs['delta'])} [{_pp(vs['ci95'][0])}, {_pp(vs['ci95'][1])}]" if vs else "n/a")
        )
        fixed = str(len(vs["fixed"])) if vs else ""
        broken = str(len(vs["broken"])) if vs else ""
        lines.append(
            f"| {c['model']} | {c['dataset']} ({c['n_problems']}; {100 / c['n_problems']:.1f} pp) | {c['mode']} | "
            f"{c['headline']} {fig(head)} | {delta} | {others or '-'} | {pct(c['rates']['boxed'])} | "
            f"{pct(c['rates']['truncated'])} | {fixed} | {broken} |"
        )
    flips = [c for c in summary["cells"] if c.get("vs_baseline")]
    if flips:
        lines += [
            "",
            f"Per-problem flips vs `{base}` (solved = greedy correct / maj@8 correct / any of 8 correct):",
            "",
        ]
        for c in flips:
            vs = c["vs_baseline"]
            lines.append(
                f"- {c['model']} · {c['dataset']} · {c['mode']}: fixed {len(vs['fixed'])} "
                f"({', '.join(vs['fixed']) or '-'}); broken {len(vs['broken'])} "
                f"({', '.join(vs['broken']) or '-'})"
            )
    lines += [
        "",
        "Format check (greedy_pass@1 samples where run, else all; SFT only if the \\boxed{} rate "
        f"< {pct(SFT_BOXED_THRESHOLD)}):",
        "",
        "| model | samples | boxed | boxed in final answer | truncated | SFT verdict |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in summary["models"].items():
        verdict = "SFT needed" if m["sft_needed"] else "no SFT needed"
        lines.append(
            f"| {name} | {m['samples']} | {pct(m['boxed'])} | {pct(m['boxed_in_final'])} | "
            f"{pct(m['truncated'])} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def write_reports(root: Path, summary: dict, title: str) -> Path:
    """Write summary.json and results.md into the run directory; returns the markdown path."""
    atomic_write_json(root / "summary.json", summary)
    md = root / "results.md"
    atomic_write_text(md, markdown_report(summary, title))
    return md


def print_summary(summary: dict) -> None:
    """A rich table of the headline figures, one row per cell, mode always shown."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"post-hoc eval (baseline: {summary['baseline']})")
    for col in ("model", "dataset", "mode", "headline [95% CI]", "Δ vs baseline", "boxed", "truncated"):
        table.add_column(col)
    for c in summary["cells"]:
        vs = c.get("vs_baseline")
        table.add_row(
            c["model"],
            c["dataset"],
            c["mode"],
            f"{c['headline']} {fig(c['figures'][c['headline']])}",
            _pp(vs["delta"]) if vs else "-",
            pct(c["rates"]["boxed"]),
            pct(c["rates"]["truncated"]),
        )
    Console(stderr=True).print(table)
