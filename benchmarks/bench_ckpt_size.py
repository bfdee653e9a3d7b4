"""DeepSpeed checkpoint size of a LoRA run: pristine OpenRLHF 0.9.3 vs our patch series.

For each hidden size, a real ZeRO-3 engine (gloo, world size 1, CPU, fp32) of a 2-layer Qwen2 with LoRA on
q/k/v/o takes one AdamW step and is saved through OpenRLHF's own `DeepspeedStrategy.save_ckpt`, once with the
pristine 0.9.3 source (from the wheel) and once with `patches/series` applied by apply_patches.sh, each in its own
process. Printed: bytes of the tag directory per file kind (model_states, optim_states) and in total, and the
pristine/patched ratio. The frozen base grows with the model, the LoRA part with the rank.
Usage: python benchmarks/bench_ckpt_size.py [--hidden 64 256] [--rank 8]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # rft (and rft.fixtures) from this checkout
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
VARIANTS = ("pristine", "patched")


def measure(hidden: int, rank: int) -> dict:
    """One save with whichever openrlhf is importable (runs in a worker process); sizes and parameter counts."""
    import openrlhf.utils.deepspeed.deepspeed as dsmod

    from rft.fixtures.cpu_trainer import init_gloo
    from rft.fixtures.lora_ckpt import (
        ckpt_bytes,
        cpu_barrier,
        param_counts,
        saved_frozen_names,
        strategy_and_engine,
        train_one_step,
    )

    init_gloo()
    dsmod.torch_dist_barrier_and_cuda_sync = cpu_barrier
    strategy, engine = strategy_and_engine(rank, hidden=hidden, r=rank, targets=TARGETS)
    train_one_step(engine)
    with tempfile.TemporaryDirectory() as d:
        strategy.save_ckpt(engine, d, tag="global_step1", client_state={"global_step": 1})
        tag_dir = Path(d) / "global_step1"
        return {**ckpt_bytes(tag_dir), **param_counts(engine),
                "frozen_saved": len(saved_frozen_names(tag_dir, engine))}


def openrlhf_copies(work: Path) -> dict[str, Path]:
    """{variant: directory whose openrlhf/ is that variant}: the wheel's source, and a patched copy of it."""
    from rft.fixtures.openrlhf_wheel import unpack_pristine_openrlhf
    from rft.fixtures.patched_openrlhf import run_apply

    pristine = unpack_pristine_openrlhf(work / "pristine")
    patched = work / "patched"
    shutil.copytree(pristine, patched)
    res = run_apply(target=patched)
    if res.returncode != 0:
        sys.exit(f"apply_patches.sh failed:\n{res.stdout}{res.stderr}")
    return {"pristine": pristine, "patched": patched}


def run_worker(site: Path, hidden: int, rank: int) -> dict:
    from rft.fixtures.patched_openrlhf import stub_env

    env = stub_env(site)
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{ROOT}"
    res = subprocess.run([sys.executable, __file__, "--worker", "--hidden", str(hidden), "--rank", str(rank)],
                         capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"worker ({site}, hidden {hidden}) failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 256], help="hidden sizes (default 64 256)")
    ap.add_argument("--rank", type=int, default=8, help="LoRA rank on q/k/v/o (default 8)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(measure(args.hidden[0], args.rank)))
        return
    table = Table(title=f"DeepSpeed checkpoint (ZeRO-3, 1 rank, fp32, LoRA r{args.rank} on q/k/v/o), bytes")
    for col in ("hidden", "frozen params", "LoRA params", "variant", "frozen saved", "model_states",
                "optim_states", "total", "pristine/patched"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as work:
        copies = openrlhf_copies(Path(work))
        for hidden in args.hidden:
            got = {v: run_worker(copies[v], hidden, args.rank) for v in VARIANTS}
            ratio = got["pristine"]["total"] / got["patched"]["total"]
            for v in VARIANTS:
                m = got[v]
                table.add_row(str(hidden), f"{m['frozen']:,}", f"{m['trainable']:,}", v, str(m["frozen_saved"]),
                              f"{m['model_states']:,}", f"{m['optim_states']:,}", f"{m['total']:,}",
                              f"{ratio:.1f}x" if v == "patched" else "")
    Console(width=170).print(table)


if __name__ == "__main__":
    main()
