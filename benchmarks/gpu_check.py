#!/usr/bin/env python3
"""`make gpu-check`: the trainer side at real gpt-oss shapes on one GPU, in at most --timeout seconds.

python benchmarks/gpu_check.py --out DIR [--tiny] [--timeout 360]
Writes DIR/gpu_check.json and DIR/gpu_check.md and prints the report. Without CUDA (or with --tiny) it runs the
tiny configuration through the same code. What each phase measures: docs/gpu-check.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on the path, for rft and tests.support
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from benchmarks import gpu_check_phases as ph
from benchmarks import gpu_check_trainer as gt

PHASES = ("mxfp4", "actor", "moe_eval", "merge", "attention", "trainer")
# the phases that need DeepSpeed and the patched OpenRLHF (carried to a bare machine by make gpu-check-install)
TRAINER_PHASES = ("trainer",)
# seconds per phase on a GPU: the first four take ~15 s on an H200 and the trainer (build, FusedAdam's JIT build, a
# full-depth 20b) the most; the check's --timeout (450 s) bounds the sum
GPU_BUDGETS = {"mxfp4": 50, "actor": 90, "moe_eval": 60, "merge": 30, "attention": 100, "trainer": 300}
# the tiny configuration takes ~30 s of CPU; a shared CPU machine may stretch that several times
TINY_BUDGETS = {"mxfp4": 60, "actor": 120, "moe_eval": 60, "merge": 60, "attention": 120, "trainer": 240}


FIGURES_FILE = "device_figures.toml"  # what RFT_DEVICE_FIGURES reads


class PhaseTimeout(Exception):
    """A phase (or the whole check) ran past its budget."""


def _alarm(_signum, _frame):
    raise PhaseTimeout()


class Budget:
    """A phase's deadline; `fits(estimate)` says whether another measurement of about that many seconds fits."""

    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.monotonic()

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def fits(self, estimate: float) -> bool:
        return estimate <= self.left()


def _oom_types() -> tuple[type[BaseException], ...]:
    return (torch.cuda.OutOfMemoryError,) if hasattr(torch.cuda, "OutOfMemoryError") else ()


# ---------------------------------------------------------------- phases


def phase_mxfp4(shape: ph.CheckShape, device: torch.device, args, budget: Budget, out: dict) -> dict:
    experts = args.mxfp4_experts or (shape.experts if args.tiny else 8)
    rows = ph.mxfp4_dequant(shape, device, experts)
    out["rows"] = rows
    load = ph.mxfp4_load_path()
    ok = all(r["rft_mismatches"] == 0 and r["exact_in_bf16"] for r in rows)
    return {"rows": rows, "experts_per_layer_measured": experts, "rft_exact": ok, "load": load,
            "transformers_exact": all(r["transformers_mismatches"] == 0 for r in rows),
            "load_exact": not load["mismatched"] and not load["missing"]}


def phase_actor(shape: ph.CheckShape, device: torch.device, args, budget: Budget, out: dict) -> dict:
    rows, notes = out.setdefault("rows", []), out.setdefault("notes", [])
    for depth in shape.depths:
        if rows and not budget.fits(1.5 * rows[-1]["wall_s"] * depth / rows[-1]["layers"]):
            notes.append(f"{depth} layers skipped: would not fit the {budget.seconds:.0f} s budget")
            break
        try:
            t0 = time.monotonic()
            row = ph.actor_step(shape, depth, device, args.steps)
            ph.free(device)
            rows.append(row | {"wall_s": time.monotonic() - t0})
        except _oom_types() as e:
            notes.append(f"{depth} layers: CUDA out of memory ({str(e).splitlines()[0]})")
            traceback.clear_frames(e.__traceback__)  # the model held by the failed call's frames goes too
            ph.free(device)
            break
    extrap = {}
    for model, layers in (("gpt-oss-20b", 24), ("gpt-oss-120b", 36)):
        extrap[model] = {
            "layers": layers,
            "step_s": ph.extrapolate(rows, "step_s", layers),
            "activation_gib": ph.extrapolate(rows, "activation_gib", layers),
            "plan": ph.plan_figures(shape, model),
        }
    return {"rows": rows, "extrapolated": extrap, "notes": notes}


def phase_moe_eval(shape: ph.CheckShape, device: torch.device, args, budget: Budget, out: dict) -> dict:
    rows, notes = out.setdefault("rows", []), out.setdefault("notes", [])
    for experts in (shape.experts, shape.experts_120b):
        if rows and not budget.fits(3 * (rows[-1]["train_s"] + rows[-1]["eval_s"] + rows[-1]["routed_s"]) * experts / rows[-1]["experts"]):
            notes.append(f"{experts} experts skipped: would not fit the {budget.seconds:.0f} s budget")
            break
        try:
            rows.append(ph.moe_eval_gap(shape, args.moe_layers, experts, device))
            ph.free(device)
        except _oom_types() as e:
            notes.append(f"{experts} experts: CUDA out of memory ({str(e).splitlines()[0]})")
            traceback.clear_frames(e.__traceback__)
            ph.free(device)
    if device.type == "cpu":
        notes.append("on CPU transformers takes the per-expert loop in eval mode too: the gap and cost are a GPU's")
    return {"rows": rows, "notes": notes}


def phase_merge(shape: ph.CheckShape, device: torch.device, args, budget: Budget, out: dict) -> dict:
    res = ph.merge_tp2(shape, args.merge_layers, device)
    ph.free(device)
    res["exact"] = all(s["mismatched"] == 0 for s in res["syncs"])
    # W0 + ΔW summed in fp32 and rounded once may differ from the float64 sum's rounding by one bf16 step (of the
    # larger of |W0| and |W|: where they cancel, the fp32 product's own rounding is that large); more is a bug
    res["within_one_ulp"] = all(s["max_ulps"] <= 1.0 for s in res["syncs"])
    res["base_restored"] = res["syncs"][-1]["max_abs_err"] == 0.0
    return res


def phase_attention(shape: ph.CheckShape, device: torch.device, args, budget: Budget, out: dict) -> dict:
    lengths = gt.TINY_LENGTHS if args.tiny else gt.GPU_LENGTHS
    return gt.attention_paths(shape, args.attention_layers, lengths, device, out, budget.fits)


def phase_trainer(shape: ph.CheckShape, device: torch.device, args, budget: Budget, out: dict) -> dict:
    return gt.trainer_phases(shape, args.trainer_layers or (2 if args.tiny else 24), device, out,
                             reentrant=not args.non_reentrant, attn=args.trainer_attn)


RUNNERS: dict[str, Callable] = {"mxfp4": phase_mxfp4, "actor": phase_actor, "moe_eval": phase_moe_eval,
                                "merge": phase_merge, "attention": phase_attention, "trainer": phase_trainer}


def run_phase(name: str, budget_s: float, deadline: float, *call) -> dict:
    """One phase under min(its budget, the time left): ok, timeout (with the rows measured before it), or error."""
    left = deadline - time.monotonic()
    seconds = min(budget_s, left)
    if seconds < 1:
        return {"status": "skipped", "reason": "the check's --timeout was spent before it", "seconds": 0.0}
    budget = Budget(seconds)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    t0 = time.monotonic()
    partial: dict = {}
    try:
        out = {"status": "ok"} | RUNNERS[name](*call, budget, partial)
    except PhaseTimeout:
        out = {"status": "timeout", "reason": f"ran past its {seconds:.0f} s budget: skipped the rest"} | partial
    except Exception as e:  # noqa: BLE001  (one phase's failure is reported; the others still run)
        out = {"status": "error", "reason": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        out |= partial
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    out["seconds"] = time.monotonic() - t0
    out["budget_s"] = seconds
    return out


def environment(device: torch.device) -> dict:
    import importlib.metadata

    import peft
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "transformers": transformers.__version__, "peft": peft.__version__, "device": device.type}
    for dist in ("deepspeed", "openrlhf"):
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env |= {"gpu": props.name, "gpu_gib": props.total_memory / ph.GIB}
    return env


def run_check(args: argparse.Namespace) -> dict:
    cuda = torch.cuda.is_available()
    tiny = args.tiny or not cuda
    device = torch.device("cuda" if cuda and not args.tiny else "cpu")
    args.tiny = tiny
    args.steps = args.steps or (1 if tiny else 2)
    shape = ph.tiny_shape() if tiny else ph.real_shape(args.micro_batch, tuple(args.depths))
    budgets = TINY_BUDGETS if tiny else GPU_BUDGETS
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed's accelerator is chosen at its first import
    if importlib.util.find_spec("flash_attn") is None:  # OpenRLHF imports it; packing is off, so it is never called
        sys.path.append(str(gt.stub_path()))
    deadline = time.monotonic() + args.timeout
    report = {"configuration": "tiny" if tiny else "real", "environment": environment(device),
              "shape": ph.shape_dict(shape), "timeout_s": args.timeout, "phases": {}}
    if tiny and not args.tiny_requested:
        report["note"] = "no CUDA device: the tiny configuration ran"
    if device.type == "cuda":  # context and cuBLAS start-up, kept out of the first phase's timings
        a = torch.ones(256, 256, device=device, dtype=torch.bfloat16)
        _, report["cuda_init_s"] = ph.timed(lambda: a @ a, device)
    t0 = time.monotonic()
    for name in args.phases:
        report["phases"][name] = run_phase(name, budgets[name], deadline, shape, device, args)
        print(f"gpu-check: {name}: {report['phases'][name]['status']} "
              f"({report['phases'][name]['seconds']:.1f} s)", file=sys.stderr, flush=True)
    report["seconds"] = time.monotonic() - t0
    trainer = report["phases"].get("trainer", {})
    if trainer.get("rows"):
        report["beside"] = gt.beside_model(shape, trainer["layers"], trainer["rows"])
    return report


# ---------------------------------------------------------------- report


def _f(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e-2 and x != 0 else f"{x:,.{digits}f}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def _table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(_f(c) for c in r) + " |" for r in rows]


def markdown(report: dict) -> str:
    """The report as Markdown: one table per phase, the memory plan's figures beside the measured ones."""
    env, ph_ = report["environment"], report["phases"]
    out = [f"# gpu-check ({report['configuration']} configuration)", "",
           ", ".join(f"{k} {v}" for k, v in env.items()) + f"; {report['seconds']:.1f} s in all "
           f"(timeout {report['timeout_s']} s)", ""]
    if report.get("note"):
        out += [report["note"], ""]
    s = report["shape"]
    out += [f"Shape: hidden {s['hidden']}, {s['heads']} heads / {s['kv_heads']} kv x {s['head_dim']}, "
            f"{s['experts']} experts top-{s['top_k']}, vocab {s['vocab']:,}, {s['prompt_len']} + {s['gen_len']} "
            f"tokens, micro batch {s['micro_batch']}, LoRA r{s['lora_rank']}/alpha {s['lora_alpha']} on q/k/v/o.", ""]
    for name in PHASES:
        if name not in ph_:
            continue
        p = ph_[name]
        out += [f"## {name}: {p['status']} ({p['seconds']:.1f} s of {p['budget_s']:.0f})", ""]
        if p["status"] != "ok":  # the reason, and the rows measured before it stopped as they are
            out += [p.get("reason", ""), ""]
            if p.get("rows"):
                keys = list(dict.fromkeys(k for r in p["rows"] for k in r))
                out += _table(keys, [[r.get(k) for k in keys] for r in p["rows"]]) + [""]
            continue
        if name == "mxfp4":
            out += _table(["tensor", "transformers on", "mismatches", "max err", "s", "rft mismatches",
                           "rft max err", "rft CPU s", "equal"],
                          [[r["tensor"], r["transformers_device"], r["transformers_mismatches"],
                            r["transformers_max_abs_err"], r["transformers_s"], r["rft_mismatches"],
                            r["rft_max_abs_err"], r["rft_cpu_s"], r["transformers_vs_rft_equal"]] for r in p["rows"]])
            ld = p["load"]
            out += ["", f"rft exact: {_f(p['rft_exact'])}; transformers exact: {_f(p['transformers_exact'])} "
                    f"({p['experts_per_layer_measured']} experts of one layer)", "",
                    f"rank 0's load (`load_dequantized`, device_map cpu) of a tiny MXFP4 checkpoint: "
                    f"{ld['tensors'] - len(ld['mismatched']) - len(ld['missing'])} of {ld['tensors']} tensors exact, "
                    f"dequantized on {', '.join(ld['dequantized_on']) or 'n/a'} ({ld['ldexp_calls']} ldexp calls), "
                    f"{ld['seconds']:.1f} s; exact: {_f(p['load_exact'])}"]
        elif name == "actor":
            out += _table(["layers", "step s", "tokens/s", "warm-up s", "Adam step s", "static GiB", "peak GiB",
                           "activations GiB", "LoRA params"],
                          [[r["layers"], r["step_s"], r["tokens_per_s"], r["warmup_s"], r["optimizer_step_s"],
                            r["static_gib"], r["peak_gib"], r["activation_gib"], r["lora_params"]] for r in p["rows"]])
            out += ["", "Extrapolated in depth (linear through the measured layers) beside the memory plan "
                    "(per actor GPU, ZeRO-3, at the measured tokens and micro batch):", ""]
            out += _table(["model", "layers", "step s", "activations GiB", "plan: activations GiB",
                           "plan: per-GPU total GiB"],
                          [[m, e["layers"], e["step_s"], e["activation_gib"], e["plan"]["activations_gib"],
                            e["plan"]["per_gpu_total_gib"]] for m, e in p["extrapolated"].items()])
        elif name == "moe_eval":
            out += _table(["experts", "layers", "train s", "eval s", "rft eval s", "train peak GiB", "eval peak GiB",
                           "rft eval peak GiB", "eval dense path", "max abs Δ log p", "mean abs Δ log p",
                           "rft eval dense path", "rft eval max abs Δ log p"],
                          [[r["experts"], r["layers"], r["train_s"], r["eval_s"], r["routed_s"], r["train_peak_gib"],
                            r["eval_peak_gib"], r["routed_peak_gib"], r["eval_dense_path"], r["max_abs_gap"],
                            r["mean_abs_gap"], r["routed_dense_path"], r["routed_max_abs_gap"]]
                           for r in p["rows"]])
            out += ["", "eval: transformers' eval mode; rft eval: eval mode with rft.gptoss.moe's routed loop, which rft's "
                    "actor and reference run (Δ log p against the train-mode forward)."]
        elif name == "merge":
            out += _table(["sync", "B = 0", "modules", "s", "max abs ΔW", "max err", "max err (bf16 steps of max(W0, W))",
                           "mismatched", "elements"],
                          [[x["version"], x["b_zero"], x["modules"], x["seconds"], x["max_abs_delta"],
                            x["max_abs_err"], x["max_ulps"], x["mismatched"], x["elements"]] for x in p["syncs"]])
            out += ["", f"TP {p['tp']} on {p['device']} (rank 1 keeps W0 on the host), {p['layers']} layers, "
                    f"TF32 matmul {_f(p['tf32_matmul'])}; exact: {_f(p['exact'])}; within one bf16 step: "
                    f"{_f(p['within_one_ulp'])}; "
                    f"B = 0 restores W0 bit for bit: {_f(p['base_restored'])}"]
        elif name == "attention":
            out += _table(["path", "tokens", "s", "peak GiB", "added GiB", "mean abs Δ log p", "p99 abs Δ log p",
                           "max abs Δ log p", "top-k flips (all layers)", "top-k flips (last layer)"],
                          [[r["path"], r["tokens"], r["s"], r["peak_gib"], r["added_gib"], r["mean_abs_dlogp"],
                            r["p99_abs_dlogp"], r["max_abs_dlogp"], r["expert_flip_share"],
                            r["expert_flip_share_last_layer"]] for r in p["rows"]])
            out += ["", f"{p['layers']} layers; Δ against {p['reference']}; memory: "
                    f"{p['rows'][0]['memory'] if p['rows'] else 'n/a'}. eager: transformers' (the recipes'); "
                    "rft_eager_fp32 and rft_flex: rft/gptoss/attention.py's paths (fp32 softmax with the sinks, fp32 router)."]
        elif name == "trainer":
            out += trainer_markdown(p, report.get("beside"))
        for note in p.get("notes", []):
            out.append(f"- {note}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def trainer_markdown(p: dict, beside: dict | None) -> list[str]:
    """The trainer phases beside the step-time model's seconds and the memory plan's activations."""
    opt = p["optimizer"]
    model_s = (beside or {}).get("model_s", {})
    out = [f"OpenRLHF's patched `Actor` (--attn_implementation {p.get('attn_implementation', 'eager')}), "
           f"{p['layers']} layers ({p['params']:,} parameters, {p['lora_params']:,} LoRA), "
           f"ZeRO-3 at world size 1 over {p['backend']}, {p['tokens']} tokens x micro batch {p['micro_batch']}; "
           f"built in {p['build_s']:.1f} s; static {_f(p['static_gib'])} GiB; optimizer: {opt['optimizer']}"
           + (f" (JIT build {opt['build_s']:.1f} s)" if opt.get("built") else f" ({opt.get('why', '')})")
           + f"; nvcc: {opt['nvcc'] or 'none'}; ninja: {opt['ninja'] or 'none'}; reentrant checkpointing: "
           f"{_f(p['reentrant'])}; LoRA grad norm at the last step: {_f(p.get('grad_norm'))}", ""]
    out += _table(["phase", "s", "warm-up s", "peak GiB", "added GiB", "memory", "model s", "forward s", "backward s",
                   "optimizer s"],
                  [[r["phase"], r["s"], r["warmup_s"], r["peak_gib"], r["added_gib"], r["memory"],
                    model_s.get(r["phase"]), r.get("forward_s"), r.get("backward_s"), r.get("optimizer_s")]
                   for r in p["rows"]])
    out += [""] + [f"- {r['phase']}: {r['what']}" for r in p["rows"]]
    if beside:
        out += [f"- model s: the step-time model's compute for the same tokens at the stated figures (one rank: no "
                f"ZeRO-3 gather); memory plan's activations at {beside['shape']}: "
                f"{beside['plan_activations_gib']:.2f} GiB",
                "- implied device figures (device_figures.toml): "
                + ", ".join(f"{k} = {v:.4g}" for k, v in beside["figures"].items())]
    return out


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    from rft.io import atomic_write_json, atomic_write_text
    from rft.plan.step_time import figures_text

    out_dir.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out_dir / "gpu_check.json", out_dir / "gpu_check.md"
    atomic_write_json(jpath, report)
    atomic_write_text(mpath, markdown(report))
    figures = (report.get("beside") or {}).get("figures")
    if figures:
        env = report["environment"]
        source = (f"make gpu-check, {report['configuration']} configuration, {env.get('gpu', env['device'])}, "
                  f"torch {env['torch']}, {time.strftime('%Y-%m-%d')}: the trainer phases of "
                  f"{report['phases']['trainer']['layers']} layers")
        atomic_write_text(out_dir / FIGURES_FILE, figures_text(figures, source))
    return jpath, mpath


def print_report(text: str) -> None:
    try:
        from rich.console import Console
        from rich.markdown import Markdown
    except ImportError:  # a bare GPU machine may lack rich: the Markdown itself
        print(text)
        return
    Console(width=160).print(Markdown(text))


# ---------------------------------------------------------------- command line


def _depths(text: str) -> list[int]:
    try:
        d = sorted({int(x) for x in text.split(",")})
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--depths: {text!r} is not two comma-separated layer counts") from e
    if len(d) != 2 or d[0] < 1:
        raise argparse.ArgumentTypeError(f"--depths: need two different layer counts >= 1, got {text!r}")
    return d


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="directory for gpu_check.json and gpu_check.md")
    p.add_argument("--tiny", action="store_true", help="the tiny configuration on the CPU (forced without CUDA)")
    p.add_argument("--timeout", type=float, default=450.0,
                   help="seconds for the whole check (default 450); phases that do not fit are skipped")
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES), help="phases to run (default all)")
    p.add_argument("--depths", type=_depths, default=[2, 4],
                   help="two layer counts the actor is measured at, e.g. 2,4 (default; real width only)")
    p.add_argument("--micro-batch", type=int, default=1, help="actor micro batch (default 1, the 20b recipe's)")
    p.add_argument("--steps", type=int, default=0,
                   help="measured actor micro-steps per depth (default 2 on a GPU, 1 on the tiny configuration)")
    p.add_argument("--moe-layers", type=int, default=2, help="layers of the eval-mode MoE model (default 2)")
    p.add_argument("--merge-layers", type=int, default=2, help="attention layers the merge syncs (default 2)")
    p.add_argument("--trainer-layers", type=int, default=0,
                   help="depth of the trainer phases' model (default: 24, gpt-oss-20b's, on a GPU; 2 tiny)")
    p.add_argument("--trainer-attn", default="eager", choices=("eager", "rft_eager_fp32", "rft_flex"),
                   help="the trainer phases' --attn_implementation (default eager, the recipes'; rft/gptoss/attention.py)")
    p.add_argument("--non-reentrant", action="store_true",
                   help="the trainer phases without the recipes' --gradient_checkpointing_use_reentrant (DeepSpeed "
                        "0.18.5 fails that with a frozen base: shows the launch rule's reason)")
    p.add_argument("--attention-layers", type=int, default=2, help="layers of the attention paths' model (default 2)")
    p.add_argument("--mxfp4-experts", type=int, default=0,
                   help="experts of one layer dequantized (default: 8 on a GPU, all on the tiny configuration)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout <= 0 or args.steps < 0 or args.micro_batch < 1 or args.moe_layers < 1 or args.merge_layers < 1:
        build_parser().error("--timeout, --steps, --micro-batch, --moe-layers and --merge-layers must be positive")
    args.tiny_requested = args.tiny
    report = run_check(args)
    jpath, mpath = write_report(report, args.out)
    print_report(mpath.read_text())
    print(f"gpu-check: wrote {jpath} and {mpath}", file=sys.stderr)
    return 0 if all(p["status"] == "ok" for p in report["phases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
