"""Smoke mode (`SMOKE=1 bash train_grpo_20b.sh`): a few rollout steps on the real layout, then PASS or FAIL on
"does the LoRA sync land on the real engine".

The launcher rewrites the recipe (`smoke_flags`): 3 rollout steps, a learning rate that moves the policy in one
update, eval and checkpoints off, `vllm_kl` and the sync probe on. The patched actor scores a fixed probe
prompt in every engine before the first sync and after each (`probe_token_ids`, `mean_prompt_logprob`). After
the run `verdict` reads the metrics: PASS only when every step synced every targeted module, `vllm_kl` stayed
within KL_BOUND at every step, and the probe moved by more than PROBE_MIN_MOVE after the first update.
`gpu-sample` records peak GPU memory per process role while the run lasts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rft.io import atomic_write_json, flag_value
from rft.monitor.diagnosis import Thresholds

SMOKE_STEPS = 3
SMOKE_LR = 1e-4  # LoRA: one Adam step at 1e-4 moves a bf16 merge visibly (docs/launching.md#smoke-mode)
KL_BOUND = Thresholds().vllm_kl_fail  # |vllm_kl| after a sync: the monitor's FAIL line (docs/launching.md#smoke-mode)
PROBE_MIN_MOVE = 1e-3  # mean |Δ log-prob| per probe token after the first update
PROBE_TEXT = (
    "Problem: Find the remainder when 2^10 is divided by 7. Put the final answer in \\boxed{}.\n"
    "Solution: 2^3 = 8 = 1 (mod 7), so 2^10 = 2^9 * 2 = 1 * 2 = 2 (mod 7). The answer is \\boxed{2}."
)
GPU_FILE = "smoke_gpu_memory.json"


def smoke_flags(tokens: list[str], steps: int | None = None, lr: float | None = None) -> list[str]:
    """The recipe's flags with the smoke run's appended (later flags win in the launcher) and no resume.

    Steps: SMOKE_STEPS (default 3); LR: SMOKE_LR, default the larger of the recipe's and 1e-4."""
    steps = steps or int(os.environ.get("SMOKE_STEPS") or SMOKE_STEPS)
    rbs = int(flag_value(tokens, "--rollout_batch_size") or 8)
    recipe_lr = float(flag_value(tokens, "--actor_learning_rate") or 0)
    env_lr = os.environ.get("SMOKE_LR")
    lr = lr if lr is not None else float(env_lr) if env_lr else max(recipe_lr, SMOKE_LR)
    out = [t for t in tokens if t != "--load_checkpoint"]
    return out + [
        "--max_samples", str(steps * rbs), "--num_episodes", "1", "--lr_warmup_ratio", "0",
        "--actor_learning_rate", f"{lr:g}", "--eval_steps", "-1", "--save_steps", "-1",
        "--enable_vllm_is_correction", "--lora_sync_probe",
    ]


# ---------------------------------------------------------------- the probe (runs in the actor, rank 0)


def probe_token_ids(pretrain: str) -> list[int]:
    """PROBE_TEXT in the model's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(pretrain, trust_remote_code=True)(PROBE_TEXT)["input_ids"]


def mean_prompt_logprob(output) -> float:
    """Mean log-prob of the prompt's own tokens (after the first) in a vLLM RequestOutput with prompt_logprobs."""
    ids, lps = output.prompt_token_ids, output.prompt_logprobs
    values = [lps[i][ids[i]].logprob for i in range(1, len(ids)) if lps[i] is not None and ids[i] in lps[i]]
    if not values:
        raise ValueError("the probe came back without prompt log-probs")
    return sum(values) / len(values)


# ---------------------------------------------------------------- the verdict


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
    from rft.monitor.logs import read_metrics

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


# ---------------------------------------------------------------- GPU memory per role


def role_of(pid: int) -> str:
    """A process's role from its title: Ray sets `ray::ActorClass.method`, vLLM its workers' `VLLM::Worker_TP0`."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return f"pid {pid}"
    title = title.split()[0] if title else f"pid {pid}"
    return title.split(".")[0] if title.startswith("ray::") else Path(title).name


def sample_gpu(out: Path, interval: float = 2.0) -> None:
    """Until killed: the peak `used_memory` (MiB) per role of every GPU process, rewritten to `out`."""
    exe = shutil.which("nvidia-smi")
    peaks: dict[str, float] = {}
    while exe:
        res = subprocess.run([exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True)
        for line in res.stdout.strip().splitlines():
            pid, mem = (x.strip() for x in line.split(",", 1))
            if pid.isdigit() and mem.replace(".", "").isdigit():
                role = role_of(int(pid))
                peaks[role] = max(peaks.get(role, 0.0), float(mem))
        atomic_write_json(out, peaks)
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rft.smoke", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verdict", help="PASS (exit 0) or FAIL (exit 1) from a smoke run's metrics")
    v.add_argument("metrics_dir", type=Path)
    v.add_argument("--run-status", type=int, default=0, help="the training run's exit status")
    v.add_argument("--kl-bound", type=float, default=KL_BOUND)
    v.add_argument("--min-probe-move", type=float, default=PROBE_MIN_MOVE)
    v.add_argument("--steps", type=int, default=int(os.environ.get("SMOKE_STEPS", SMOKE_STEPS)))
    g = sub.add_parser("gpu-sample", help="record peak GPU memory per process role until killed")
    g.add_argument("out", type=Path)
    ns = p.parse_args(argv)
    if ns.cmd == "gpu-sample":
        sample_gpu(ns.out)
        return 0
    passed, text = verdict(ns.metrics_dir, ns.run_status, kl_bound=ns.kl_bound, min_move=ns.min_probe_move,
                           steps=ns.steps)
    print(text, flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
