#!/usr/bin/env python3
"""Benchmark prepare_sft_data.py on a generated 896,215-row NuminaMath-shaped input (3 parquet shards).

Measures in one run, each in its own subprocess: (a) reading the shards and hashing every problem,
(b) the full pipeline end to end. Prints both times, their ratio (goal <= 3x) and each peak RSS (goal < 3 GiB).
Input generation is timed separately and not counted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

GOAL_RATIO = 3.0
GOAL_RSS_GIB = 3.0


def baseline(numina_dir: Path) -> None:
    """(a): read every column of every shard batch by batch and hash every problem."""
    import pyarrow.parquet as pq

    from rft.problems import problem_hash

    n = 0
    for path in sorted(numina_dir.rglob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
            for problem in batch.column(batch.schema.get_field_index("problem")).to_pylist():
                problem_hash(problem)
                n += 1
    print(f"hashed {n} problems")


def timed(cmd: list[str]) -> tuple[float, float]:
    """Run cmd; (wall seconds, peak RSS in GiB) of that child, from wait4's rusage."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(cmd)}")
    return wall, usage.ru_maxrss / 2**20  # ru_maxrss is KiB on Linux


def main() -> int:
    """Generate the input, run (a) and (b), print the figures; exit 1 if a goal is missed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=896_215, help="rows of the generated NuminaMath-shaped input")
    p.add_argument("--work-dir", type=Path, default=None, help="where to generate (default: a temp dir)")
    p.add_argument("--baseline", type=Path, help=argparse.SUPPRESS)  # internal: run (a) in this process
    args = p.parse_args()
    if args.baseline:
        baseline(args.baseline)
        return 0

    from data_fixtures import write_eval_inputs_large, write_numina_like

    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        write_numina_like(work / "numina", args.rows)
        ev = write_eval_inputs_large(work / "eval")
        size = sum(f.stat().st_size for f in (work / "numina").rglob("*.parquet")) / 2**20
        print(f"generated {args.rows:,} rows in 3 shards ({size:,.0f} MiB parquet) in "
              f"{time.perf_counter() - t0:.1f}s (not counted)")

        read_s, read_rss = timed([sys.executable, __file__, "--baseline", str(work / "numina")])
        cmd = [sys.executable, str(ROOT / "prepare_sft_data.py"), "--numina", str(work / "numina"),
               "--aime", str(ev.aime), "--math", *map(str, ev.math), "--apex", str(ev.apex),
               "--gsm8k-train", str(ev.gsm8k_train), "--gsm8k-test", str(ev.gsm8k_test),
               "--out-dir", str(work / "out"), "--no-progress"]  # fmt: skip
        full_s, full_rss = timed(cmd)
        verify_s, verify_rss = timed([sys.executable, str(ROOT / "prepare_sft_data.py"), "--verify",
                                      "--out-dir", str(work / "out")])  # fmt: skip

    ratio = full_s / read_s
    print(f"(a) read shards + hash every problem: {read_s:7.1f} s   peak RSS {read_rss:.2f} GiB")
    print(f"(b) full pipeline end to end:         {full_s:7.1f} s   peak RSS {full_rss:.2f} GiB")
    print(f"    --verify of the written files:    {verify_s:7.1f} s   peak RSS {verify_rss:.2f} GiB")
    print(f"ratio (b)/(a): {ratio:.2f}x (goal <= {GOAL_RATIO:.0f}x); "
          f"peak RSS {full_rss:.2f} GiB (goal < {GOAL_RSS_GIB:.0f} GiB)")  # fmt: skip
    ok = ratio <= GOAL_RATIO and full_rss < GOAL_RSS_GIB
    print("goals met" if ok else "GOAL MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
