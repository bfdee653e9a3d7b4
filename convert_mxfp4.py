#!/usr/bin/env python3
"""Convert an MXFP4 gpt-oss checkpoint into a lossless bf16 copy that the ZeRO-3 actor trains from.

python convert_mxfp4.py openai/gpt-oss-120b /mnt/data/models/gpt-oss-120b-bf16
then: ACTOR_MODEL=/mnt/data/models/gpt-oss-120b-bf16 bash train_grpo_120b.sh   (vLLM keeps the MXFP4 original)
"""

from __future__ import annotations

import argparse
import sys

from rft.gptoss.mxfp4 import ConversionError, NotMxfp4Error, convert_checkpoint

GIB = 1024**3


def build_parser() -> argparse.ArgumentParser:
    """The command line; every flag explained."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Only the MoE expert tensors are MXFP4; they are dequantized exactly (FP4 value x power of two) and "
        "every other tensor is copied unchanged. Tensors stream one at a time (host RAM ~ one output shard). "
        "The output is written to a hidden directory beside OUTPUT and renamed into place only after it verified, "
        "so an interrupted run leaves no OUTPUT behind. Tokenizer, chat template and generation config are copied.",
    )
    p.add_argument("source", help="MXFP4 checkpoint: a local directory or a hub id (e.g. openai/gpt-oss-120b)")
    p.add_argument("output", help="directory to create for the bf16 copy (must not exist yet)")
    p.add_argument(
        "--max-shard-gib", type=float, default=5.0, help="largest output safetensors shard in GiB (default: 5)"
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip re-reading every written tensor and comparing it with the exact dequantization "
        "(verification roughly doubles the run time)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit status 0 on success, 2 on refused input."""
    a = build_parser().parse_args(argv)
    if a.max_shard_gib <= 0:
        print("convert_mxfp4.py: --max-shard-gib must be > 0", file=sys.stderr)
        return 2
    try:
        rep = convert_checkpoint(
            a.source, a.output, max_shard_bytes=int(a.max_shard_gib * GIB), verify=not a.no_verify,
            progress=not a.quiet,
        )
    except (NotMxfp4Error, FileExistsError, FileNotFoundError, ConversionError) as e:
        print(f"convert_mxfp4.py: {e}", file=sys.stderr)
        return 2
    print(
        f"{rep.output}: {rep.tensors} tensors ({rep.bytes_written / GIB:.2f} GiB bf16), "
        f"{len(rep.dequantized)} expert tensors dequantized, {'verified' if not a.no_verify else 'NOT verified'}; "
        f"copied {', '.join(rep.side_files) or 'no side files'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
