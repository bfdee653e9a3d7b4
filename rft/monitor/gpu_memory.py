"""Peak GPU memory per process role, until killed: `python -m rft.monitor.gpu_memory OUT_JSON [--interval S]`.

Samples `nvidia-smi --query-compute-apps` and rewrites OUT_JSON ({role: MiB}) at every sample; the SMOKE=1 run
reports it."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rft.io import atomic_write_json


def role_of(pid: int) -> str:
    """A process's role from its title: Ray sets `ray::ActorClass.method`, vLLM its workers' `VLLM::Worker_TP0`."""
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return f"pid {pid}"
    title = title.split()[0] if title else f"pid {pid}"
    return title.split(".")[0] if title.startswith("ray::") else Path(title).name


def sample_gpu(out: Path, interval: float = 2.0) -> None:
    """Until killed: the peak `used_memory` (MiB) per role of every GPU process, rewritten to `out`."""
    exe = shutil.which("nvidia-smi")
    peaks: dict[str, float] = {}
    while exe:
        res = subprocess.run([exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True)
        for line in res.stdout.strip().splitlines():
            pid, mem = (x.strip() for x in line.split(",", 1))
            if pid.isdigit() and mem.replace(".", "").isdigit():
                role = role_of(int(pid))
                peaks[role] = max(peaks.get(role, 0.0), float(mem))
        atomic_write_json(out, peaks)
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
