"""One gloo rank of repeated ZeRO-3 `from_pretrained` loads (launched by tests/cpu/test_standins.py).

usage: python tests/cpu/zero3_load_worker.py RANK WORLD_SIZE PORT LOADS MODEL_DIR in-order|deepspeed|setting
After each load every parameter's local partition is compared with the checkpoint on disk; prints one JSON line:
{"rank": R, "loads": N, "bad_loads": B, "first": [[name, differing, non_finite], ...]}.
`deepspeed` leaves DeepSpeed's coalesced all-gather as it is, to see the race on gloo (it is not in any test);
`setting` leaves it too and sets DeepSpeed's own `zero_optimization.stage3_allgather_sequential` instead.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def partition_diffs(model, reference: dict, rank: int) -> list[list]:
    """[name, elements differing, non-finite elements] for each local partition that differs from `reference`."""
    diffs = []
    for name, p in model.named_parameters():
        part = p.ds_tensor.flatten()
        want = reference[name].flatten().to(part.dtype)[rank * part.numel() : (rank + 1) * part.numel()]
        got = part[: want.numel()]
        if not torch.equal(want, got):
            diffs.append([name, int((want != got).sum()), int((~torch.isfinite(got.float())).sum())])
    return diffs


def main() -> None:
    rank, world, port, loads, model_dir, mode = sys.argv[1:7]
    rank, world, loads = int(rank), int(world), int(loads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    from rft.cpu import standins as cpu_standins

    cpu_standins.install(torch)
    import deepspeed
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    if mode == "in-order":
        cpu_standins.install_in_order_allgather()
    deepspeed.init_distributed(dist_backend="gloo")
    reference = load_file(os.path.join(model_dir, "model.safetensors"))
    zero = {"stage": 3, "stage3_allgather_sequential": True} if mode == "setting" else {"stage": 3}
    config = {"zero_optimization": zero, "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1,
              "train_batch_size": world}
    bad, first = 0, []
    for _ in range(loads):
        ds_config = HfDeepSpeedConfig(config)  # noqa: F841  (transformers loads under zero.Init while it lives)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
        diffs = partition_diffs(model, reference, rank)
        bad += bool(diffs)
        first = first or diffs
        del model, ds_config
    print(json.dumps({"rank": rank, "loads": loads, "bad_loads": bad, "first": first}), flush=True)


if __name__ == "__main__":
    main()
