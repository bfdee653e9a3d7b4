"""The smoke's transport check: one all-gather of a ZeRO-3-sized shard across the actor ranks, timed, as GB/s
against the step-time model's figure and the floor below which the gathers alone would be half the step
(docs/step-time.md#the-transport). `measure_allgather` is plain torch.distributed (NCCL on the node, gloo in tests).
"""

from __future__ import annotations

import time
from typing import Any

MAX_SHARD_BYTES = 1 << 30  # a probe never allocates more than 1 GiB a rank (n GiB for the gathered tensor)
ALLGATHER_KEYS = ("allgather_gb_s", "allgather_shard_mb", "allgather_ranks", "allgather_model_gb_s",
                  "allgather_floor_gb_s")


def measure_allgather(shard_bytes: int, group: Any = None, device: Any = "cpu", iters: int = 3) -> dict[str, float]:
    """All-gather `shard_bytes` from every rank of `group` `iters` times after one warm-up; the median over the
    slowest rank of each, as bus GB/s (nccl-tests' busbw: shard x (n - 1) / s). Raises if a shard lands wrong."""
    import torch
    import torch.distributed as dist

    n, rank = dist.get_world_size(group), dist.get_rank(group)
    shard = torch.full((shard_bytes,), rank % 251, dtype=torch.uint8, device=device)
    out = torch.empty(shard_bytes * n, dtype=torch.uint8, device=device)

    def sync() -> None:
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    dist.all_gather_into_tensor(out, shard, group=group)
    times = []
    for _ in range(iters):
        out.zero_()
        sync()
        dist.barrier(group=group)
        start = time.perf_counter()
        dist.all_gather_into_tensor(out, shard, group=group)
        sync()
        took = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX, group=group)  # the collective ends with its slowest rank
        times.append(float(took.item()))
    firsts = out.view(n, shard_bytes)[:, [0, -1]].cpu()
    expected = torch.arange(n, dtype=torch.int64).remainder(251)
    if not (firsts[:, 0].long().equal(expected) and firsts[:, 1].long().equal(expected)):
        raise RuntimeError(f"all-gather probe: rank {rank} received the wrong shards {firsts.tolist()}")
    seconds = sorted(times)[len(times) // 2]
    return {"allgather_gb_s": shard_bytes * (n - 1) / seconds / 1e9, "allgather_shard_mb": shard_bytes / 1e6,
            "allgather_ranks": float(n), "allgather_s": seconds}


def zero3_shard_bytes(model: Any, world: int) -> int:
    """A rank's share of one decoder layer's bf16 parameters (what ZeRO-3 gathers at a time), at most 1 GiB."""
    params = sum(getattr(p, "ds_numel", None) or p.numel() for p in model.parameters())
    config = getattr(model, "config", None) or getattr(getattr(model, "base_model", None), "config", None)
    layers = getattr(config, "num_hidden_layers", None) or 1
    return int(min(MAX_SHARD_BYTES, max(1, 2 * params // layers // max(world, 1))))


def floor_and_model(args: Any) -> tuple[float | None, float | None]:
    """(floor, the model's figure) in GB/s for the run's flags (rft.plan.step_time); (None, None) for a model
    the step-time model does not know (e.g. the CPU profile's tiny one)."""
    import argparse
    import os

    from rft.plan.step_time import FIGURES_ENV, FiguresError, gather_floor, load_figures, shape_for

    shape = shape_for(getattr(args, "pretrain", None) or "")
    if shape is None:
        return None, None
    a = argparse.Namespace(**{**vars(args), "judge_reward": False,
                              "vllm_num_engines": getattr(args, "vllm_num_engines", None) or 0})
    try:
        figures = load_figures(os.environ.get(FIGURES_ENV))
    except FiguresError:  # the launch already warned about the file; the stated figures stand
        figures = load_figures(None)
    floor = gather_floor(shape, a, figures)
    return (floor / 1e9 if floor else None), figures["allgather_bytes_s"] / 1e9


def allgather_probe(owner: Any, model: Any, args: Any) -> dict[str, float]:
    """Every actor rank, once per process (cached on `owner`): the measurement, the model's figure and the floor
    (nothing on a single rank)."""
    if getattr(owner, "_rft_allgather_done", False):
        return {}
    owner._rft_allgather_done = True
    import torch
    import torch.distributed as dist

    if dist.get_world_size() < 2:
        return {}  # one rank gathers nothing
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    stats = measure_allgather(zero3_shard_bytes(model, dist.get_world_size()), device=device)
    floor, figure = floor_and_model(args)
    stats.pop("allgather_s")
    if figure is not None:
        stats["allgather_model_gb_s"] = figure
    if floor is not None:
        stats["allgather_floor_gb_s"] = floor
    return stats


def transport_statement(row: dict) -> tuple[bool, str] | None:
    """(below the floor, the smoke verdict's line) from a metrics line with the probe's keys; None without them."""
    rate = row.get("allgather_gb_s")
    if rate is None:
        return None
    floor, figure = row.get("allgather_floor_gb_s"), row.get("allgather_model_gb_s")
    text = (f"all-gather: {rate:.1f} GB/s bus rate across {int(row.get('allgather_ranks', 0))} actor ranks "
            f"(a {row.get('allgather_shard_mb', 0):.3g} MB shard a rank)")
    if figure is not None:
        text += f"; the step-time model assumes {figure:.0f} GB/s"
    if floor is None:
        return False, text + "; no floor (the step-time model does not know this model)"
    low = rate < floor
    return low, text + (f"; {'BELOW' if low else 'above'} the floor {floor:.1f} GB/s, under which the ZeRO-3 "
                        "gathers alone would take half the predicted step (docs/step-time.md#the-transport)")
