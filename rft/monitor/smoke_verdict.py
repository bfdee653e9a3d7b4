"""The SMOKE=1 run's PASS or FAIL: `python -m rft.monitor.smoke_verdict METRICS_DIR [--run-status N]`.

PASS only when every step synced every targeted module, `vllm_kl` stayed within KL_BOUND after every sync (step
1's, before any sync, is reported as the floor), the engine's probe change reproduced the trainer's at every sync
(rft.train.sync_probe.judge_sync) and, where the smoke relaunched, the relaunch resumed from the saved step;
a note says whether the recipe's LR moves the served policy at all (docs/launching.md#smoke-mode).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from rft.launch.smoke import SMOKE_STEPS
from rft.launch.supervise import GPU_FILE, RELAUNCH_FILE, TIMED_OUT
from rft.monitor.diagnosis import Thresholds
from rft.monitor.logs import read_metrics
from rft.train.allgather_probe import transport_statement
from rft.train.sync_probe import PROBE_BAND, RECIPE_STEPS, judge_sync, recipe_change, slack

KL_BOUND = Thresholds().vllm_kl_fail  # |vllm_kl| after a sync: the monitor's FAIL line (docs/launching.md#smoke-mode)


def kl_check(rows: dict[int, dict], order: list[int], kl_bound: float) -> tuple[str, bool, str]:
    """|vllm_kl| within the bound at every step after the first: step 1's rollouts precede any sync, so its
    vllm_kl is the engine-vs-trainer floor (MXFP4 vs bf16 on gpt-oss), reported, not judged."""
    kls = [(s, rows[s].get("vllm_kl")) for s in order]
    judged = kls[1:]
    missing = [s for s, v in judged if v is None or not math.isfinite(v)]
    over = [(s, v) for s, v in judged if v is not None and math.isfinite(v) and abs(v) > kl_bound]
    floor = f"step {kls[0][0]} (before any sync, the floor): {kls[0][1]:.2e}" if kls and kls[0][1] is not None \
        else "no step-1 vllm_kl"
    ev = "; ".join([floor] + [f"step {s}: {v:.2e}" if v is not None else f"step {s}: missing" for s, v in judged])
    return (f"|vllm_kl| <= {kl_bound:g} after every sync", bool(judged) and not missing and not over, ev)


def probe_checks(rows: dict[int, dict], order: list[int]) -> list[tuple[str, bool, str]]:
    """Every sync's probe: the engine's change reproduces the trainer's (rft.train.sync_probe.judge_sync)."""
    synced = [s for s in order if "lora_sync_probe_trainer_delta" in rows[s]]
    if not synced:
        return [("the engine's probe change reproduces the trainer's at every sync", False,
                 "no lora_sync_probe_trainer_delta logged (was --lora_sync_probe on?)")]
    verdicts = [(s, *judge_sync(rows[s])) for s in synced]
    floor = rows[synced[0]].get("lora_sync_probe_floor", 0.0)
    return [(f"the engine's probe change reproduces the trainer's at every sync (floor {floor:.1e}, band "
             f"±{PROBE_BAND:g})", all(ok for _, ok, _ in verdicts),
             "; ".join(f"step {s}: {'ok' if ok else 'FAIL'} {why}" for s, ok, why in verdicts))]


def recipe_statement(rows: dict[int, dict]) -> str | None:
    """Whether the recipe's LR moves the served policy within RECIPE_STEPS steps, from the first sync's bf16
    figures (rft.train.sync_probe.recipe_change); None when the run did not report them."""
    row = next((rows[s] for s in sorted(rows) if "lora_sync_recipe_kept" in rows[s]), None)
    if row is None:
        return None
    change = recipe_change(row["lora_sync_probe_trainer_norm"], row["lora_sync_recipe_kept"],
                           row["lora_sync_recipe_scale"])
    floor = slack(row.get("lora_sync_probe_floor", 0.0), row["lora_sync_probe_tokens"])
    lr = row.get("lora_sync_recipe_lr", 0.0)
    how = (f"expected engine change ||X|| {change:.1e} over the probe's {row['lora_sync_probe_tokens']:.0f} tokens "
           f"after {RECIPE_STEPS} steps, {row['lora_sync_recipe_kept']:.1%} of that update surviving bf16 rounding, "
           f"vs the floor {floor:.1e}")
    if change > floor:
        return f"the recipe's learning rate {lr:g} moves the served policy within {RECIPE_STEPS} steps ({how})"
    return (f"the recipe's learning rate {lr:g} does NOT move the served policy within {RECIPE_STEPS} steps: "
            f"the engine keeps serving (nearly) the base model ({how})")


def checks(rows: dict[int, dict], kl_bound: float = KL_BOUND, steps: int = SMOKE_STEPS) -> list[tuple[str, bool, str]]:
    """(check, passed, evidence) for every PASS condition, from the metrics rows by step."""
    order = sorted(rows)
    out = []
    synced = [(s, rows[s].get("lora_sync_modules"), rows[s].get("lora_sync_expected_modules")) for s in order]
    skipped = [s for s in order if rows[s].get("lora_sync_skipped")]
    bad = [f"step {s}: {got} of {want}" for s, got, want in synced if not want or got != want]
    ok = len(order) >= steps and not skipped and not bad
    ev = (f"{len(order)} step(s) (want {steps}); modules synced per step: "
          + ", ".join(f"{got:g}/{want:g}" if got is not None and want else "none" for _, got, want in synced))
    if skipped:
        ev += f"; sync skipped at step(s) {skipped}"
    out.append(("every targeted module synced at every step", ok, ev))
    out.append(kl_check(rows, order, kl_bound))
    out += probe_checks(rows, order)
    return out


def resume_check(metrics_dir: Path) -> tuple[str, bool, str] | None:
    """With a relaunch (RELAUNCH_FILE, written by the supervisor): the relaunch's first logged step must be the
    one after the saved step, so it resumed from the checkpoint rather than from scratch."""
    marker = metrics_dir / RELAUNCH_FILE
    if not marker.is_file():
        return None
    info = json.loads(marker.read_text())
    k = int(info["resumed_from"])
    metrics = metrics_dir / "training_metrics.jsonl"
    tail = metrics.read_bytes()[int(info["offset"]):].decode(errors="replace") if metrics.is_file() else ""
    steps = []
    for line in tail.splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("global_step"), int | float):
            steps.append(int(obj["global_step"]))
    first = min(steps) if steps else None
    return (f"the relaunch resumed from the step-{k} DeepSpeed checkpoint", first == k + 1,
            f"relaunch exited with status {info.get('status', '?')}; its first logged step: "
            f"{first if first is not None else 'none'} (want {k + 1})")


def facts(rows: dict[int, dict], gpu_file: Path | None) -> list[str]:
    """Step time, sync seconds and peak GPU memory per role, for the record."""
    order = sorted(rows)
    stamps = [rows[s]["timestamp"] for s in order if isinstance(rows[s].get("timestamp"), int | float)]
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    lines = [f"step time: {', '.join(f'{g:.1f} s' for g in gaps) or 'one step only'} (between logged steps)"]
    syncs = [rows[s].get("lora_sync_seconds") for s in order if rows[s].get("lora_sync_seconds") is not None]
    lines.append(f"sync seconds: {', '.join(f'{v:.2f}' for v in syncs) or 'none logged'}")
    if gpu_file is not None and gpu_file.is_file():
        peaks = json.loads(gpu_file.read_text())
        lines.append("peak GPU memory per role: " + (", ".join(f"{r} {m / 1024:.1f} GiB" for r, m in
                                                             sorted(peaks.items())) or "no GPU process seen"))
    else:
        lines.append("peak GPU memory per role: n/a (no nvidia-smi sampling here)")
    return lines


def verdict(metrics_dir: Path, run_status: int = 0, **kw) -> tuple[bool, str]:
    """(passed, the printed report) for the smoke run whose metrics are in `metrics_dir`."""
    rows = read_metrics(metrics_dir).records if (metrics_dir / "training_metrics.jsonl").is_file() else {}
    results = checks(rows, **kw)
    resumed = resume_check(metrics_dir)
    if resumed is not None:
        results.append(resumed)
    lines = ["# smoke verdict"]
    if run_status == TIMED_OUT:
        lines.append("  FAIL  the smoke ran past SMOKE_TIMEOUT and was stopped (a hang: the log names the engine "
                     "when an engine call timed out)")
    elif run_status:
        lines.append(f"  FAIL  the training run exited with status {run_status}")
    lines += [f"  {'PASS' if ok else 'FAIL'}  {name}: {ev}" for name, ok, ev in results]
    statement = recipe_statement(rows)
    if statement is not None:
        lines.append(f"  {'note' if 'does NOT' not in statement else 'WARN'}  {statement}")
    gathered = next((t for t in (transport_statement(rows[s]) for s in sorted(rows)) if t is not None), None)
    if gathered is not None:
        lines.append(f"  {'WARN' if gathered[0] else 'info'}  {gathered[1]}")
    lines += [f"  info  {f}" for f in facts(rows, metrics_dir / GPU_FILE)]
    passed = run_status == 0 and all(ok for _, ok, _ in results)
    lines.append(f"SMOKE {'PASS' if passed else 'FAIL'}")
    return passed, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rft.monitor.smoke_verdict", description=__doc__.splitlines()[0])
    p.add_argument("metrics_dir", type=Path, help="the smoke run's $METRICS_LOG_DIR")
    p.add_argument("--run-status", type=int, default=0, help="the training run's exit status (non-zero: FAIL)")
    p.add_argument("--kl-bound", type=float, default=KL_BOUND, help=f"largest |vllm_kl| (default {KL_BOUND:g})")
    p.add_argument("--steps", type=int, default=int(os.environ.get("SMOKE_STEPS", SMOKE_STEPS)),
                   help=f"steps the run must log (default $SMOKE_STEPS or {SMOKE_STEPS})")
    ns = p.parse_args(argv)
    passed, text = verdict(ns.metrics_dir, ns.run_status, kl_bound=ns.kl_bound, steps=ns.steps)
    print(text, flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
