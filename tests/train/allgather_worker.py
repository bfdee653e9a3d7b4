"""One gloo rank of the all-gather probe (launched by tests/train/test_allgather_probe.py).

usage: python tests/train/allgather_worker.py RANK WORLD_SIZE PORT SHARD_BYTES OUT_JSON
Runs the real `measure_allgather` and `allgather_probe` (a tiny gpt-oss-shaped module, the 20b recipe's flags);
every rank writes what it measured.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from rft.train.allgather_probe import allgather_probe, measure_allgather


class TwoLayers(torch.nn.Module):
    """Two decoder-layer stand-ins: 2 x 64 x 64 + 2 x 64 parameters, config.num_hidden_layers = 2."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(num_hidden_layers=2)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(2))


def main(rank: int, world: int, port: int, shard_bytes: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    measured = measure_allgather(shard_bytes)
    from rft.plan.step_time import recipe
    from tests.plan.test_step_time import RECIPE_20B

    args = recipe(RECIPE_20B)
    owner = SimpleNamespace()
    probe = allgather_probe(owner, TwoLayers(), args)
    again = allgather_probe(owner, TwoLayers(), args)
    dist.destroy_process_group()
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"measured": measured, "probe": probe, "again": again}, fh)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
