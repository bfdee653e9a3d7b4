"""The SMOKE=1 run's PASS or FAIL: `python -m rft.monitor.smoke_verdict METRICS_DIR [--run-status N]`.

PASS only when every step synced every targeted module, `vllm_kl` stayed within KL_BOUND at every step, and
the sync probe moved by more than PROBE_MIN_MOVE after the first update (docs/launching.md#smoke-mode).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from rft.launch.smoke import SMOKE_STEPS
from rft.launch.supervise import GPU_FILE
from rft.monitor.diagnosis import Thresholds
from rft.monitor.logs import read_metrics

KL_BOUND = Thresholds().vllm_kl_fail  # |vllm_kl| after a sync: the monitor's FAIL line (docs/launching.md#smoke-mode)
PROBE_MIN_MOVE = 1e-3  # mean |Δ log-prob| per probe token after the first update


def checks(rows: dict[int, dict], kl_bound: float = KL_BOUND, min_move: float = PROBE_MIN_MOVE,
           steps: int = SMOKE_STEPS) -> list[tuple[str, bool, str]]:
    """(check, passed, evidence) for the three PASS conditions, from the metrics rows by step."""
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
    kls = [(s, rows[s].get("vllm_kl")) for s in order]
    missing = [s for s, v in kls if v is None or not math.isfinite(v)]
    over = [(s, v) for s, v in kls if v is not None and math.isfinite(v) and abs(v) > kl_bound]
    out.append((f"|vllm_kl| <= {kl_bound:g} after every sync", bool(kls) and not missing and not over,
                ", ".join(f"step {s}: {v:.2e}" if v is not None else f"step {s}: missing" for s, v in kls)
                or "no steps"))
    first = next((rows[s].get("lora_sync_probe_delta") for s in order if "lora_sync_probe_delta" in rows[s]), None)
    out.append((f"probe log-prob moved > {min_move:g} after the first update",
                first is not None and first > min_move,
                f"smallest engine change {first:.2e}" if first is not None else "no lora_sync_probe_delta logged"))
    return out


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
    lines = ["# smoke verdict"]
    if run_status:
        lines.append(f"  FAIL  the training run exited with status {run_status}")
    lines += [f"  {'PASS' if ok else 'FAIL'}  {name}: {ev}" for name, ok, ev in results]
    lines += [f"  info  {f}" for f in facts(rows, metrics_dir / GPU_FILE)]
    passed = run_status == 0 and all(ok for _, ok, _ in results)
    lines.append(f"SMOKE {'PASS' if passed else 'FAIL'}")
    return passed, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rft.monitor.smoke_verdict", description=__doc__.splitlines()[0])
    p.add_argument("metrics_dir", type=Path, help="the smoke run's $METRICS_LOG_DIR")
    p.add_argument("--run-status", type=int, default=0, help="the training run's exit status (non-zero: FAIL)")
    p.add_argument("--kl-bound", type=float, default=KL_BOUND, help=f"largest |vllm_kl| (default {KL_BOUND:g})")
    p.add_argument("--min-probe-move", type=float, default=PROBE_MIN_MOVE,
                   help=f"smallest probe change after the first update (default {PROBE_MIN_MOVE:g})")
    p.add_argument("--steps", type=int, default=int(os.environ.get("SMOKE_STEPS", SMOKE_STEPS)),
                   help=f"steps the run must log (default $SMOKE_STEPS or {SMOKE_STEPS})")
    ns = p.parse_args(argv)
    passed, text = verdict(ns.metrics_dir, ns.run_status, kl_bound=ns.kl_bound, min_move=ns.min_probe_move,
                           steps=ns.steps)
    print(text, flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
