#!/usr/bin/env python3
"""Offline MXFP4 -> bf16 conversion: throughput and peak host memory on a synthetic gpt-oss-shaped checkpoint.

python benchmarks/bench_mxfp4.py --layers 4 --experts 32 --hidden 1024
Prints bf16 GiB written per second and the peak RSS growth, to size a gpt-oss-20b/120b conversion.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from rft.gptoss.mxfp4 import convert_checkpoint

GIB = 1024**3


def write_synthetic(path: Path, layers: int, experts: int, hidden: int) -> None:
    """Random MXFP4 expert blocks/scales (gpt-oss layout, intermediate = hidden) plus a small bf16 tensor."""
    path.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    weight_map = {}
    for layer in range(layers):
        p = f"model.layers.{layer}.mlp.experts."
        shard = {
            p + "gate_up_proj_blocks": torch.randint(0, 256, (experts, 2 * hidden, hidden // 32, 16), generator=g,
                                                     dtype=torch.uint8),
            p + "gate_up_proj_scales": torch.randint(120, 130, (experts, 2 * hidden, hidden // 32), generator=g,
                                                     dtype=torch.uint8),
            p + "down_proj_blocks": torch.randint(0, 256, (experts, hidden, hidden // 32, 16), generator=g,
                                                  dtype=torch.uint8),
            p + "down_proj_scales": torch.randint(120, 130, (experts, hidden, hidden // 32), generator=g,
                                                  dtype=torch.uint8),
            f"model.layers.{layer}.input_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        }
        name = f"model-{layer + 1:05d}-of-{layers:05d}.safetensors"
        save_file(shard, str(path / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, name))
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = {"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4"}}
    (path / "config.json").write_text(json.dumps(config))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4, help="number of layers (one source shard each)")
    ap.add_argument("--experts", type=int, default=32, help="experts per layer")
    ap.add_argument("--hidden", type=int, default=1024, help="hidden = intermediate size (multiple of 32)")
    ap.add_argument("--max-shard-gib", type=float, default=5.0, help="output shard size limit (bounds host RAM)")
    ap.add_argument("--no-verify", action="store_true", help="time the conversion without the verification pass")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "src", Path(tmp) / "dst"
        write_synthetic(src, a.layers, a.experts, a.hidden)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
        t0 = time.perf_counter()
        rep = convert_checkpoint(src, dst, max_shard_bytes=int(a.max_shard_gib * GIB), verify=not a.no_verify,
                                 progress=False)
        dt = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    out_gib = rep.bytes_written / GIB
    largest = a.experts * 2 * a.hidden * a.hidden * 2 / GIB  # one layer's gate_up_proj in bf16
    print(f"bf16 written: {out_gib:.2f} GiB in {dt:.1f} s ({out_gib / dt:.2f} GiB/s, verify={not a.no_verify})")
    print(f"peak RSS growth: {max(rss1 - rss0, 0):.2f} GiB (largest output tensor {largest:.2f} GiB, "
          f"shard limit {a.max_shard_gib:g} GiB, whole output {out_gib:.2f} GiB)")


if __name__ == "__main__":
    main()
