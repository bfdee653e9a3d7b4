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
sys.path.insert(0, str(ROOT))  # rft (and rft.fixtures) from this checkout

GOAL_RATIO = 3.0
GOAL_RSS_GIB = 3.0


def baseline(numina_dir: Path) -> None:
    """(a): read every column of every shard batch by batch and hash every problem."""
    import pyarrow.parquet as pq

    from rft.data.problems import problem_hash

    n = 0
    for path in sorted(numina_dir.rglob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
            for problem in batch.column(batch.schema.get_field_index("problem")).to_pylist():
                problem_hash(problem)
                n += 1
    print(f"hashed {n} problems")


def generate(work: Path, rows: int) -> None:
    """Write the NuminaMath-shaped shards and the eval inputs under work/ (run in a subprocess)."""
    from rft.fixtures.data_fixtures import write_eval_inputs_large, write_numina_like

    write_numina_like(work / "numina", rows)
    write_eval_inputs_large(work / "eval")


def timed(cmd: list[str]) -> tuple[float, float, float]:
    """Run cmd; (wall s, CPU s, peak RSS GiB) of that child from wait4's rusage.

    The parent stays small (it never imports pyarrow), because a child's maxrss starts from its parent's
    RSS at fork time.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(cmd)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20  # ru_maxrss is KiB on Linux


def main() -> int:
    """Generate the input, run (a) and (b), print the figures; exit 1 if a goal is missed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=896_215, help="rows of the generated NuminaMath-shaped input")
    p.add_argument("--work-dir", type=Path, default=None, help="parent of the temp dir holding the input")
    p.add_argument("--baseline", type=Path, help=argparse.SUPPRESS)  # internal: run (a) in this process
    p.add_argument("--generate", type=Path, help=argparse.SUPPRESS)  # internal: write the input there
    args = p.parse_args()
    if args.baseline:
        baseline(args.baseline)
        return 0
    if args.generate:
        generate(args.generate, args.rows)
        return 0

    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        work = Path(tmp)
        gen_s, _, _ = timed([sys.executable, __file__, "--generate", str(work), "--rows", str(args.rows)])
        size = sum(f.stat().st_size for f in (work / "numina").rglob("*.parquet")) / 2**20
        print(
            f"generated {args.rows:,} rows in 3 shards ({size:,.0f} MiB parquet) in {gen_s:.1f}s (not counted)"
        )
        ev = work / "eval"
        read = timed([sys.executable, __file__, "--baseline", str(work / "numina")])
        cmd = [sys.executable, str(ROOT / "prepare_sft_data.py"), "--numina", str(work / "numina"),
               "--aime", str(ev / "aime_2024.parquet"), "--math", str(ev / "math"), str(ev / "math500.parquet"),
               "--apex", str(ev / "apex.parquet"), "--gsm8k-train", str(ev / "gsm8k_train.parquet"),
               "--gsm8k-test", str(ev / "gsm8k_test.parquet"), "--out-dir", str(work / "out"), "--no-progress"]  # fmt: skip
        full = timed(cmd)
        check = timed(
            [sys.executable, str(ROOT / "prepare_sft_data.py"), "--verify", "--out-dir", str(work / "out")]
        )

    for name, (wall, cpu, rss) in (("(a) read shards + hash every problem", read),
                                   ("(b) full pipeline end to end", full),
                                   ("    --verify of the written files", check)):  # fmt: skip
        print(f"{name:38s} wall {wall:6.1f} s  cpu {cpu:6.1f} s  peak RSS {rss:.2f} GiB")
    ratio, cpu_ratio = full[0] / read[0], full[1] / read[1]
    print(f"ratio (b)/(a): wall {ratio:.2f}x, cpu {cpu_ratio:.2f}x (goal <= {GOAL_RATIO:.0f}x); "
          f"peak RSS (b) {full[2]:.2f} GiB (goal < {GOAL_RSS_GIB:.0f} GiB)")  # fmt: skip
    ok = ratio <= GOAL_RATIO and full[2] < GOAL_RSS_GIB
    print("goals met" if ok else "GOAL MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
