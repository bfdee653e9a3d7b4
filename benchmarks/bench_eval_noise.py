"""The post-hoc eval's deltas when nothing differs: what run-to-run variation alone makes of an A/B.

`eval_posthoc.py` reports each model's delta to its baseline with a 95% paired bootstrap interval over problems.
That interval covers which problems were drawn, not the draws of training or of eval sampling. This benchmark
measures both, with the eval's own code path (`rft.eval.cli`, the real merge and generation):

- **eval draws**: one trained adapter evaluated at each of --eval-seeds seeds (the samples change, the model not);
- **training draws**: the runs of one configuration at different training seeds (bench_filtering.py's seeds of
  one arm: same data, same flags), each evaluated at the same eval seed.

Every pair that differs only by such a draw is a null A/B. Printed per source: the headline's spread, the median
and largest |delta|, and the share of null pairs whose paired interval excludes 0 (a difference the report would
show as an effect). Written to --out/summary.md and summary.json.
Usage: python benchmarks/bench_eval_noise.py --bench runs/bench-filtering [--arm baseline] [--eval-seeds 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # rft from this checkout

from rft.eval.cli import main as eval_main  # noqa: E402
from rft.eval.modes import MODES, RunDir  # noqa: E402
from rft.eval.report import compare  # noqa: E402

DATASET = "demo"


def adapters(bench: Path, arm: str) -> dict[str, Path]:
    """The arm's final adapter of each training seed in a bench_filtering.py output directory."""
    found = {d.name: d / arm / "final" for d in sorted(bench.glob("seed-*"))}
    found = {name: path for name, path in found.items() if (path / "adapter_config.json").is_file()}
    if len(found) < 2:
        raise SystemExit(f"{bench}: fewer than 2 seed-*/{arm}/final adapters (run bench_filtering.py first)")
    return found


def evaluate(models: dict[str, Path], base: Path, dataset: Path, mode: str, eval_seed: int, out: Path,
             extra: list[str]) -> dict[str, dict]:
    """Every model at one eval seed through eval_posthoc's CLI; the finished cells by model name."""
    run_dir = out / f"eval-seed-{eval_seed}"
    argv = [a for name, path in models.items() for a in ("--model", f"{name}={path}")]
    argv += ["--base", str(base), "--dataset", f"{DATASET}={dataset}", "--mode", mode, "--seed", str(eval_seed),
             "--run-dir", str(run_dir), "--merged-dir", str(out / "merged"), *extra]
    if eval_main(argv) != 0:
        raise SystemExit(f"eval_posthoc failed at eval seed {eval_seed}: eval_posthoc.py {' '.join(argv)}")
    return {name: RunDir(run_dir).load_cell(name, DATASET, mode) for name in models}


def null_pairs(cells: dict[tuple[str, int], dict], *, n_boot: int = 2000) -> dict[str, list[dict]]:
    """Every pair of cells that differs only by a draw, with compare()'s delta and paired interval: 'eval' pairs
    (one model, two eval seeds) and 'training' pairs (two models, one eval seed)."""
    models = sorted({m for m, _ in cells})
    seeds = sorted({s for _, s in cells})
    out: dict[str, list[dict]] = {"eval": [], "training": []}
    for m in models:
        for a, b in itertools.combinations(seeds, 2):
            out["eval"].append(compare(cells[(m, b)], cells[(m, a)], n_boot=n_boot, seed=a))
    for s in seeds:
        for a, b in itertools.combinations(models, 2):
            out["training"].append(compare(cells[(b, s)], cells[(a, s)], n_boot=n_boot, seed=s))
    return out


def spread(cells: dict[tuple[str, int], dict], kind: str) -> float:
    """The headline's standard deviation over the draws of `kind`, averaged over the other axis."""
    models = sorted({m for m, _ in cells})
    seeds = sorted({s for _, s in cells})

    def value(m: str, s: int) -> float:
        c = cells[(m, s)]
        return c["figures"][c["headline"]]["value"]

    groups = ([[value(m, s) for s in seeds] for m in models] if kind == "eval"
              else [[value(m, s) for m in models] for s in seeds])
    return statistics.fmean(statistics.stdev(g) for g in groups)


def noise_rows(cells: dict[tuple[str, int], dict], *, n_boot: int = 2000) -> list[dict]:
    """One row per source of draws: pairs, spread, median and largest |delta|, share of 'effects'."""
    rows = []
    for kind, pairs in null_pairs(cells, n_boot=n_boot).items():
        if not pairs:
            continue
        deltas = [abs(p["delta"]) for p in pairs]
        rows.append({
            "source": kind,
            "pairs": len(pairs),
            "sd": spread(cells, kind),
            "median_abs_delta": statistics.median(deltas),
            "max_abs_delta": max(deltas),
            "excludes_zero": sum(not (p["ci95"][0] <= 0 <= p["ci95"][1]) for p in pairs) / len(pairs),
            "median_ci_half_width": statistics.median((p["ci95"][1] - p["ci95"][0]) / 2 for p in pairs),
        })
    return rows


def table(rows: list[dict], headline: str) -> str:
    """The rows as markdown, deltas in percentage points."""
    lines = [f"| draws that differ | null pairs | sd of {headline} | median \\|delta\\| | largest \\|delta\\| | "
             "median interval half-width | pairs whose 95% interval excludes 0 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['source']} | {r['pairs']} | {100 * r['sd']:.1f} pp | {100 * r['median_abs_delta']:.1f} pp "
                     f"| {100 * r['max_abs_delta']:.1f} pp | {100 * r['median_ci_half_width']:.1f} pp "
                     f"| {r['excludes_zero']:.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", type=Path, required=True,
                   help="a bench_filtering.py --out directory: its inputs/ (base model, eval prompts) and seed-*/ARM/final")
    p.add_argument("--arm", default="baseline", choices=("baseline", "filtered"), help="the configuration whose seeds are compared")
    p.add_argument("--eval-seeds", type=int, default=5, help="eval seeds per model (from 1234 on, eval_posthoc's default first)")
    p.add_argument("--mode", default="sampling_pass@8", choices=sorted(MODES), help="eval mode (the headline is its metric)")
    p.add_argument("--max-tokens", type=int, default=8, help="max new tokens (train_grpo_cpu.sh's --generate_max_len)")
    p.add_argument("--backend", default="hf", choices=("hf", "vllm"), help="eval_posthoc's backend (hf: no engine start per model)")
    p.add_argument("--out", type=Path, default=None, help="eval run directories and the summary (default: BENCH/eval-noise)")
    a = p.parse_args(argv)
    out = a.out or a.bench / "eval-noise"
    models = adapters(a.bench, a.arm)
    inputs = a.bench / "inputs"
    extra = ["--max-tokens", str(a.max_tokens), "--backend", a.backend, "--hf-dtype", "float32", "--device", "cpu"]
    cells = {}
    for s in range(1234, 1234 + a.eval_seeds):
        for name, cell in evaluate(models, inputs / "model", inputs / "eval_prompts.jsonl", a.mode, s, out, extra).items():
            cells[(name, s)] = cell
    rows = noise_rows(cells)
    headline = MODES[a.mode].headline
    values = {f"{m} @ {s}": c["figures"][headline]["value"] for (m, s), c in sorted(cells.items())}
    text = (f"{a.mode} ({headline}) on {cells[next(iter(cells))]['n_problems']} problems; {len(models)} training "
            f"seeds of arm {a.arm} x {a.eval_seeds} eval seeds\n\n{table(rows, headline)}\n")
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(text)
    (out / "summary.json").write_text(json.dumps({"rows": rows, "values": values}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
