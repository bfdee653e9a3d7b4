"""Build every data file the launch scripts and the evaluation read, from NuminaMath-1.5 and the eval sets.

python prepare_sft_data.py                      # hub ids by default, writes data/
python prepare_sft_data.py --verify             # re-check data/ against data/MANIFEST.json
python prepare_sft_data.py --pass-rates data/pass_rates.jsonl   # + sft_rl_pool_band.jsonl (a pass-rate band)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from rft.data.pass_band import DEFAULT_BAND, ORDERS, BandConfig, band_pool, read_pass_rates
from rft.data.pipeline import BAND_FILE, PROBE_ID_MODES, DataConfig, Inputs, prepare, write_outputs
from rft.data.report import band_markdown, build_report, print_report, render_markdown
from rft.data.sources import DataError
from rft.data.verify import print_checks, verify
from rft.options import from_args

HENDRYCKS_MATH = tuple(
    f"EleutherAI/hendrycks_math:{c}@test"
    for c in (
        "algebra",
        "counting_and_probability",
        "geometry",
        "intermediate_algebra",
        "number_theory",
        "prealgebra",
        "precalculus",
    )
)
SOURCE_HELP = "a local parquet/JSONL/JSON/CSV file or directory, or a hub id OWNER/NAME[:CONFIG][@SPLIT]"


# (flag, help) of the integer settings; each flag's default is the DataConfig field of its name
SIZE_FLAGS = (
    ("--seed", "seed of every split and sample"),
    ("--rl-pool-size", "rows of sft_rl_pool.jsonl"),
    ("--sft-size", "rows of sft_train.jsonl"),
    ("--sft-dev-size", "rows of sft_dev.jsonl"),
    ("--pool-subset-size", "rows of sft_rl_pool_400.jsonl (from the pool)"),
    ("--probe-size", "rows of probe_set_200.jsonl"),
    ("--aime-size", "rows of aime_eval.jsonl (seeded sample)"),
    ("--ood-math-size", "MATH rows in probe_set_200_ood.jsonl"),
    ("--gsm8k-eval-size", "rows of gsm8k_eval.jsonl (0: all)"),
    ("--gsm8k-pool-size", "rows of gsm8k_rl_pool.jsonl (0: all)"),
)
CHAR_FLAGS = (
    ("--min-problem-chars", "stage 6: shortest problem"),
    ("--min-solution-chars", "stage 6: shortest solution"),
)


def _add_int(group: argparse._ArgumentGroup, flag: str, d: DataConfig, help_: str) -> None:
    """An integer flag whose default is the field of `d` named like it."""
    group.add_argument(flag, type=int, default=getattr(d, flag[2:].replace("-", "_")), help=help_)


def build_parser() -> argparse.ArgumentParser:
    """The command line; every flag explained."""
    d = DataConfig()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    io = p.add_argument_group("inputs and output (each input is " + SOURCE_HELP + ")")
    io.add_argument(
        "--numina", default="AI-MO/NuminaMath-1.5", help="NuminaMath-1.5 (the three parquet shards)"
    )
    io.add_argument(
        "--aime", default="HuggingFaceH4/aime_2024", help="AIME problems with problem/answer columns"
    )
    io.add_argument(
        "--math",
        nargs="+",
        default=list(HENDRYCKS_MATH),
        help="MATH test problems (level as 'Level 5' or 5; answer column, else the last \\boxed{} of solution)",
    )
    io.add_argument(
        "--apex", default="MathArena/apex-shortlist", help="MathArena Apex shortlist (CC BY-NC-SA 4.0)"
    )
    io.add_argument(
        "--gsm8k-train", default="openai/gsm8k:main@train", help="GSM8K train split (small-profile pool)"
    )
    io.add_argument(
        "--gsm8k-test", default="openai/gsm8k:main@test", help="GSM8K test split (small-profile eval)"
    )
    io.add_argument("--skip-gsm8k", action="store_true", help="do not read GSM8K nor write the gsm8k_* files")
    io.add_argument(
        "--out-dir", type=Path, default=Path("data"), help="directory for the data files and reports"
    )

    sz = p.add_argument_group("split sizes and selection")
    for flag, help_ in SIZE_FLAGS:
        _add_int(sz, flag, d, help_)
    sz.add_argument(
        "--probe-id-mode",
        choices=PROBE_ID_MODES,
        default=d.probe_id_mode,
        help="in-pool: the ID probe is drawn from inside the RL pool (training-fit signal); "
        "held-out: drawn from the same eligible rows but kept out of every training file",
    )
    sz.add_argument(
        "--math-levels",
        type=int,
        nargs="+",
        default=list(d.math_levels),
        help="MATH levels eligible for the OOD probe",
    )

    flt = p.add_argument_group("filters")
    flt.add_argument(
        "--exclude-sources",
        nargs="*",
        default=list(d.exclude_sources),
        help="NuminaMath sources dropped in stage 3",
    )
    flt.add_argument(
        "--require-valid",
        action=argparse.BooleanOptionalAction,
        default=d.require_valid,
        help='stage 4: keep only problem_is_valid == solution_is_valid == "Yes"',
    )
    for flag, help_ in CHAR_FLAGS:
        _add_int(flt, flag, d, help_)

    band = p.add_argument_group("a pool by base pass rate")
    band.add_argument(
        "--pass-rates",
        type=Path,
        help=f"per-problem pass rates of the base model over the RL pool (eval_posthoc.py --pass-rates: JSONL "
        f"rows with problem_hash and pass_rate); adds {BAND_FILE}, the pool problems inside --pass-band, a "
        "declared subset of the pool, and a pass-rate histogram with the share kept to REPORT.md",
    )
    band.add_argument(
        "--pass-band",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        default=list(DEFAULT_BAND),
        help="inclusive pass-rate band kept; the default drops the never- and always-solved problems (zero "
        "advantage for every sample of their groups)",
    )
    band.add_argument(
        "--pass-order",
        choices=ORDERS,
        default="pool",
        help="order of the band pool: the pool's (seeded random) or easy-first (descending pass rate, a curriculum; "
        "train with --prompt_data_in_order to keep it)",
    )
    run = p.add_argument_group("running")
    run.add_argument("--batch-size", type=int, default=d.batch_size, help="rows per parquet record batch")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.add_argument(
        "--verify",
        action="store_true",
        help="only re-read the files in --out-dir and check counts, keys, string labels, disjointness, "
        "eval/probe leakage and the manifest hashes; exit 1 on any failure",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline (or --verify); 0 on success, 1 on any failure."""
    args = build_parser().parse_args(argv)
    console = Console()
    if args.verify:
        return 0 if print_checks(verify(args.out_dir), console) else 1
    cfg = from_args(  # every flag named like a DataConfig field sets it
        DataConfig, args,
        math_levels=tuple(args.math_levels), exclude_sources=tuple(args.exclude_sources), progress=not args.no_progress,
    )  # fmt: skip
    inputs = Inputs(
        numina=args.numina,
        aime=args.aime,
        math=tuple(args.math),
        apex=args.apex,
        gsm8k_train=None if args.skip_gsm8k else args.gsm8k_train,
        gsm8k_test=None if args.skip_gsm8k else args.gsm8k_test,
    )
    try:
        result = prepare(inputs, cfg)
        band_report = None
        if args.pass_rates:
            band_cfg = BandConfig(args.pass_rates, *args.pass_band, order=args.pass_order)
            rows, band_report = band_pool(result.files["sft_rl_pool.jsonl"], read_pass_rates(args.pass_rates), band_cfg)
            result.files[BAND_FILE] = rows
    except DataError as e:
        Console(stderr=True).print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        return 1
    report = build_report(result)
    if band_report:
        report["pass_band"] = band_report
    write_outputs(result, args.out_dir, render_markdown(report), report)
    print_report(report, console)
    if band_report:
        console.print(band_markdown(band_report), highlight=False)
    console.print(
        f"wrote {len(result.files)} data files, REPORT.md, report.json and MANIFEST.json to {args.out_dir}"
    )
    return 0

