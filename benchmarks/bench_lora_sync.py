"""How much of a LoRA update survives merging into bf16 base weights, at the launch scripts' learning rates.

Simulates PEFT's init (A ~ kaiming-uniform, B = 0) plus k Adam-like steps of size lr on A and B, forms
ΔW = scaling * B @ A in fp32 for a gpt-oss q_proj (4096 x 2880), and reports, for W0 ~ N(0, σ) in bf16,
the fraction of elements where bf16(W0 + ΔW) == W0 (update swallowed). Also prints payload sizes.
Usage: python benchmarks/bench_lora_sync.py [--steps 1 3 10 100] [--sigma 0.01 0.02 0.04]
"""

from __future__ import annotations

import argparse
import math

import torch
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

from rft.train.lora_sync import bf16_rounding_report

# (label, r, alpha, lr) as in train_grpo_20b.sh / train_grpo_120b.sh
RECIPES = [("gpt-oss-20b", 32, 64, 5e-7), ("gpt-oss-120b", 64, 128, 1e-6)]
HIDDEN, Q_OUT, KV_OUT = 2880, 4096, 512  # gpt-oss attention: 64 q heads, 8 kv heads, head_dim 64
LAYERS = {"gpt-oss-20b": 24, "gpt-oss-120b": 36}


def simulate_delta(out_f: int, in_f: int, r: int, alpha: float, lr: float, steps: int, coherent: bool,
                   gen: torch.Generator) -> torch.Tensor:
    """ΔW after ``steps`` Adam-like updates of magnitude lr: same sign every step if ``coherent``, else ±lr
    at random each step (a random walk, sampled in closed form as lr * (2 * Binomial(steps, 1/2) - steps))."""
    bound = 1.0 / math.sqrt(in_f)  # kaiming_uniform_(a=sqrt(5)) on [r, in_f], PEFT's default for lora_A
    a = (torch.rand(r, in_f, generator=gen) * 2 - 1) * bound

    def walk(shape: tuple[int, int]) -> torch.Tensor:
        if coherent:
            return steps * lr * (torch.randint(0, 2, shape, generator=gen).float() * 2 - 1)
        heads = torch.binomial(torch.full(shape, float(steps)), torch.full(shape, 0.5), generator=gen)
        return lr * (2 * heads - steps)

    return (alpha / r) * (walk((out_f, r)) @ (a + walk((r, in_f))))


def payload_mb(r: int, layers: int, bytes_per: int = 2) -> float:
    """Adapter bytes for q/k/v/o LoRA on gpt-oss attention."""
    per_layer = r * ((HIDDEN + Q_OUT) * 2 + (HIDDEN + KV_OUT) * 2)
    return per_layer * layers * bytes_per / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 3, 10, 100],
                    help="numbers of optimizer steps after init to evaluate")
    ap.add_argument("--sigma", type=float, nargs="+", default=[0.01, 0.02, 0.04],
                    help="std of the synthetic bf16 base weights W0 (real gpt-oss attention weights unknown here)")
    ap.add_argument("--rows", type=int, default=1024,
                    help="q_proj output rows to simulate (statistics are per element; 4096 is the full matrix)")
    ap.add_argument("--seed", type=int, default=0, help="RNG seed")
    args = ap.parse_args()

    gen = torch.Generator().manual_seed(args.seed)
    w0s = {s: (torch.randn(args.rows, HIDDEN, generator=gen) * s).to(torch.bfloat16) for s in args.sigma}
    table = Table(title=f"bf16 merge of ΔW into W0 (q_proj, {args.rows}x{HIDDEN}): fraction of elements unchanged")
    for col in ["recipe", "steps", "growth", "median |ΔW|"] + [f"swallowed σ={s}" for s in args.sigma] + [
            "kept norm σ=0.02"]:
        table.add_column(col, justify="right")
    jobs = [(rec, k, coh) for rec in RECIPES for k in args.steps for coh in (True, False)]
    for (label, r, alpha, lr), k, coherent in tqdm(jobs, desc="simulating"):
        d = simulate_delta(args.rows, HIDDEN, r, alpha, lr, k, coherent, gen)
        reps = {s: bf16_rounding_report(w, d) for s, w in w0s.items()}
        kept = bf16_rounding_report(w0s[0.02], d)["realized_norm_ratio"] if 0.02 in w0s else float("nan")
        table.add_row(label, str(k), "coherent" if coherent else "random", f"{d.abs().median():.2e}",
                      *[f"{reps[s]['swallowed']:.4f}" for s in args.sigma], f"{kept:.3f}")
    console = Console(width=150)
    console.print(table)
    sizes = Table(title="adapter payload per sync (q/k/v/o)")
    for col in ("recipe", "r", "bf16 MB", "fp32 MB"):
        sizes.add_column(col, justify="right")
    for label, r, _, _ in RECIPES:
        sizes.add_row(label, str(r), f"{payload_mb(r, LAYERS[label]):.1f}", f"{payload_mb(r, LAYERS[label], 4):.1f}")
    console.print(sizes)


if __name__ == "__main__":
    main()
