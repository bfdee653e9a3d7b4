"""Peak GPU memory per process role, until killed: `python -m rft.monitor.gpu_memory OUT_JSON [--interval S]`.

Samples `nvidia-smi --query-compute-apps` and rewrites OUT_JSON ({role: MiB}) at every sample, each process
labelled by rft/monitor/roles.py (vLLM's TP workers under Ray, host pids in containers); the SMOKE=1 run reports it."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rft.io import atomic_write_json
from rft.monitor.roles import peak_by_role


def read_rows(text: str) -> list[tuple[int, str, float]]:
    """(pid, bus id, MiB) of each well-formed line of `nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory`."""
    rows = []
    for line in text.strip().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and parts[2].replace(".", "").isdigit():
            rows.append((int(parts[0]), parts[1], float(parts[2])))
    return rows


def sample_gpu(out: Path, interval: float = 2.0) -> None:
    """Until killed: the peak `used_memory` (MiB) per role of every GPU process, rewritten to `out`."""
    exe = shutil.which("nvidia-smi")
    peaks: dict[str, float] = {}
    while exe:
        res = subprocess.run([exe, "--query-compute-apps=pid,gpu_bus_id,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True)
        atomic_write_json(out, peak_by_role(read_rows(res.stdout), peaks))
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rft.monitor.gpu_memory", description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="the JSON file of peaks per role ({role: MiB})")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between samples (default 2)")
    ns = p.parse_args(argv)
    sample_gpu(ns.out, ns.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
