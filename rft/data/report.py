"""The data preparation report: stage table, source mix, answer range, problem lengths, splits.

One JSON-able dict (`build_report`) rendered twice: Markdown for `data/REPORT.md` and rich tables for the
terminal. Nothing in it depends on time or paths of the output, so the same inputs give the same bytes.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table

from rft.data.pipeline import BAND_FILE, PrepareResult, file_specs
from rft.data.solutions import SFT_REASONS

PERCENTILES = (5, 25, 50, 75, 95, 99)


def _nearest_rank(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile of an already sorted list (exact for huge integers)."""
    k = max(0, min(len(sorted_values) - 1, int(np.ceil(q / 100 * len(sorted_values))) - 1))
    return sorted_values[k]


def answer_stats(labels: list[str]) -> dict:
    """Range and percentiles of integer labels (as strings, so 30-digit answers stay exact)."""
    if not labels:
        return {"count": 0}
    values = sorted(int(v) for v in labels)
    return {
        "count": len(values),
        "min": str(values[0]),
        "max": str(values[-1]),
        **{f"p{q}": str(_nearest_rank(values, q)) for q in PERCENTILES},
        "negative": sum(v < 0 for v in values),
        "zero": sum(v == 0 for v in values),
        "over_999": sum(v > 999 for v in values),
    }


def length_stats(lengths: np.ndarray) -> dict:
    """Percentiles of problem lengths in characters."""
    if len(lengths) == 0:
        return {"count": 0}
    out = {"count": int(len(lengths)), "min": int(lengths.min()), "max": int(lengths.max())}
    out.update({f"p{q}": int(np.percentile(lengths, q, method="nearest")) for q in PERCENTILES})
    return out


def build_report(result: PrepareResult) -> dict:
    """All report figures as a plain dict (written as report.json)."""
    numina, splits, cfg = result.numina, result.splits, result.cfg
    problem_chars = pc.utf8_length(pc.utf8_trim_whitespace(numina.table.column("problem"))).to_numpy()
    sources = numina.table.column("source").to_pylist()
    pool_labels = [numina.labels[i] for i in splits.pool]
    in_pool = cfg.probe_id_mode == "in-pool"
    specs = file_specs(cfg.probe_id_mode)
    return {
        "inputs": {
            "numina": result.inputs.numina,
            "aime": result.inputs.aime,
            "math": list(result.inputs.math),
            "apex": result.inputs.apex,
            "gsm8k_train": result.inputs.gsm8k_train,
            "gsm8k_test": result.inputs.gsm8k_test,
        },
        "config": {k: v for k, v in vars(cfg).items() if k not in ("progress", "batch_size")},
        "numina_rows": numina.total_rows,
        "stages": [
            {
                "key": s.key,
                "number": s.number,
                "title": s.title,
                "rows_in": s.rows_in,
                "removed": s.removed,
                "remaining": s.remaining,
                "examples": s.examples,
            }
            for s in numina.stages
        ],
        "eligible": len(numina.labels),
        "source_mix": {
            "input": dict(numina.source_mix.most_common()),
            "eligible": dict(Counter(sources).most_common()),
            "rl_pool": dict(Counter(sources[i] for i in splits.pool).most_common()),
        },
        "answers_rl_pool": answer_stats(pool_labels),
        "problem_chars": {
            "eligible": length_stats(problem_chars),
            "rl_pool": length_stats(problem_chars[splits.pool] if splits.pool else problem_chars[:0]),
        },
        "sft_selection": {
            "examined": sum(splits.sft_reasons.values()),
            **{k: splits.sft_reasons.get(k, 0) for k in SFT_REASONS},
        },
        "eval_inputs": [vars(s) for s in result.evals.inputs],
        "gsm8k_pool_overlap_removed": result.gsm8k_overlap,
        "probe_id_mode": cfg.probe_id_mode,
        "probe_id_note": (
            f"probe_set_200.jsonl: {len(splits.probe)} problems drawn from INSIDE sft_rl_pool.jsonl "
            "(--probe-id-mode in-pool): a training-fit / stability signal, not generalization"
            if in_pool
            else f"probe_set_200.jsonl: {len(splits.probe)} problems HELD OUT of every training file "
            "(--probe-id-mode held-out): in-distribution generalization"
        ),
        "files": {
            name: {
                "rows": len(rows),
                "role": specs[name].role,
                "datasource": specs[name].datasource,
                "subset_of": specs[name].subset_of,
            }
            for name, rows in result.files.items()
        },
    }


def _fmt(n: int) -> str:
    return f"{n:,}"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub Markdown table ('|' in cells escaped)."""
    esc = [[str(c).replace("|", "\\|").replace("\n", " ") for c in r] for r in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in esc])


def _stage_rows(report: dict) -> list[list[str]]:
    rows = [["", "input rows", "", "", _fmt(report["numina_rows"])]]
    for s in report["stages"]:
        rows.append([s["number"], s["title"], _fmt(s["rows_in"]), _fmt(s["removed"]), _fmt(s["remaining"])])
    return rows


def _file_rows(report: dict) -> list[list[str]]:
    return [
        [name, _fmt(f["rows"]), f["role"], f["datasource"] or "", f["subset_of"] or "disjoint from all"]
        for name, f in report["files"].items()
    ]


def _eval_rows(report: dict) -> list[list[str]]:
    return [
        [e["name"], _fmt(e["rows"]), _fmt(e["usable"]), _fmt(e["overlap"]), _fmt(e["selected"]), e["notes"]]
        for e in report["eval_inputs"]
    ]


def _mix_rows(report: dict) -> list[list[str]]:
    mix = report["source_mix"]
    return [
        [src, _fmt(n), _fmt(mix["eligible"].get(src, 0)), _fmt(mix["rl_pool"].get(src, 0))]
        for src, n in mix["input"].items()
    ]


def _stat_rows(stats: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    keys = ["count", "min", *[f"p{q}" for q in PERCENTILES], "max"]
    return ["set", *keys], [[name, *[str(s.get(k, "")) for k in keys]] for name, s in stats.items()]


FILE_HEADER = ["file", "rows", "role", "datasource", "relation"]
STAGE_HEADER = ["#", "stage", "rows in", "removed", "remaining"]
EVAL_HEADER = ["eval input", "rows", "integer/usable", "overlap dropped", "selected", "notes"]
MIX_HEADER = ["source", "input", "eligible", "rl pool"]


def render_markdown(report: dict) -> str:
    """REPORT.md text."""
    out = [
        "# Data preparation report",
        "",
        "Written by `prepare_sft_data.py`; figures also in `report.json`.",
        "",
    ]
    inputs = {k: " ".join(v) if isinstance(v, list) else v for k, v in report["inputs"].items()}
    out += ["## Inputs", ""] + [f"- {k}: `{v}`" for k, v in inputs.items()] + [""]
    out += ["## Filter stages (NuminaMath-1.5)", "", _md_table(STAGE_HEADER, _stage_rows(report)), ""]
    out += ["### Examples of removed rows", ""]
    for s in report["stages"]:
        out.append(f"**{s['number']}. {s['title']}** ({_fmt(s['removed'])} removed)")
        out += [f'- row {e["row"]}: {e["detail"]} - "{e["problem"]}"' for e in s["examples"]] or ["- none"]
        out.append("")
    out += [
        "## Output files",
        "",
        _md_table(FILE_HEADER, _file_rows(report)),
        "",
        report["probe_id_note"] + ".",
        "",
    ]
    out += ["## Eval and probe inputs", "", _md_table(EVAL_HEADER, _eval_rows(report)), ""]
    out += [
        f"GSM8K pool: {report['gsm8k_pool_overlap_removed']} problems removed because a Numina split has them.",
        "",
    ]
    sel = report["sft_selection"]
    out += [
        "## SFT selection",
        "",
        f"Examined {_fmt(sel['examined'])} eligible solutions in seeded order:",
        "",
    ]
    out += [f"- {desc}: {_fmt(sel[k])}" for k, desc in SFT_REASONS.items()] + [""]
    out += ["## Source mix", "", _md_table(MIX_HEADER, _mix_rows(report)), ""]
    head, rows = _stat_rows({"rl pool labels": report["answers_rl_pool"]})
    ans = report["answers_rl_pool"]
    out += ["## Answer range (RL pool)", "", _md_table(head, rows), ""]
    if ans.get("count"):
        out += [f"Negative: {ans['negative']}, zero: {ans['zero']}, above 999: {ans['over_999']}.", ""]
    head, rows = _stat_rows(report["problem_chars"])
    out += ["## Problem length (characters)", "", _md_table(head, rows)]
    if "pass_band" in report:
        out += ["", band_markdown(report["pass_band"]).rstrip()]
    return "\n".join(out) + "\n"


def band_markdown(band: dict) -> str:
    """The pass-band section: the pass-rate histogram over the pool and which bins the band keeps."""
    lo, hi = band["band"]
    rows = [[f"{h['pass_rate']:.3f}", h["problems"], f"{h['share']:.1%} " + "#" * max(1, round(40 * h["share"])),
             "yes" if h["kept"] else "no"] for h in band["histogram"]]  # fmt: skip
    return "\n".join([
        "## RL pool by base pass rate",
        "",
        f"Pass rates: `{band['pass_rates']}`. Kept band: {lo:g} <= pass rate <= {hi:g}, order "
        f"{band['order']}: **{band['kept']} of {band['pool']} problems ({band['share_kept']:.1%})** "
        f"in `{BAND_FILE}`; {band['unmeasured']} pool problems had no pass rate (dropped).",
        "",
        _md_table(["pass rate", "problems", "share of pool", "kept"], rows),
    ]) + "\n"


def _rich_table(title: str, header: list[str], rows: list[list[str]], numeric_from: int = 1) -> Table:
    table = Table(title=title, title_justify="left")
    for n, h in enumerate(header):
        table.add_column(h, justify="right" if n >= numeric_from else "left", overflow="fold")
    for r in rows:
        table.add_row(*[str(c) for c in r])
    return table


def print_report(report: dict, console: Console | None = None) -> None:
    """The report as rich tables on the terminal."""
    console = console or Console()
    stages = _rich_table("Filter stages (NuminaMath-1.5)", STAGE_HEADER, _stage_rows(report), numeric_from=2)
    console.print(stages)
    examples = Table(title="Examples of removed rows", title_justify="left")
    for col in ("stage", "row", "why", "problem"):
        examples.add_column(col, overflow="fold")
    for s in report["stages"]:
        for e in s["examples"][:2]:
            examples.add_row(s["number"], str(e["row"]), e["detail"], e["problem"])
    console.print(examples)
    console.print(_rich_table("Output files", FILE_HEADER, _file_rows(report), numeric_from=1))
    console.print(report["probe_id_note"])
    console.print(_rich_table("Eval and probe inputs", EVAL_HEADER, _eval_rows(report), numeric_from=1))
    console.print(_rich_table("Source mix", MIX_HEADER, _mix_rows(report)))
    head, rows = _stat_rows(
        {
            "rl pool answers": report["answers_rl_pool"],
            **{f"{k} problem chars": v for k, v in report["problem_chars"].items()},
        }
    )
    console.print(_rich_table("Answer range and problem length", head, rows))
