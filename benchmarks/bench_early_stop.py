"""The early-stop rule's error rates on simulated OOD-probe evals: false stops on a flat run, stops on a decline.

Each eval is a binomial draw of `--probe-size` problems at a true pass rate; the rule (two consecutive drops,
each beyond `z` standard errors) runs on every simulated run, and an exact dynamic programme gives the same
probabilities without sampling. Prints a rich table; `python benchmarks/bench_early_stop.py`.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from rft.monitor.early_stop import DEFAULT_Z, exact_stop_probability, simulate_stop_rate

SCENARIOS = {
    "flat 40% (20 evals)": [0.4] * 20,
    "decline 45% -> 13% (8 pp/eval after 5 flat)": [0.45] * 5 + [0.45 - 0.08 * i for i in range(1, 5)],
    "decline 5 pp/eval (after 5 flat)": [0.45] * 5 + [0.40, 0.35, 0.30, 0.25, 0.20],
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--probe-size", type=int, default=202, help="problems in the OOD probe (default 202)")
    p.add_argument("--runs", type=int, default=2000, help="simulated runs per scenario (default 2000)")
    p.add_argument("--seed", type=int, default=1234, help="random seed of the simulation")
    a = p.parse_args(argv)
    table = Table(title=f"early stop, probe of {a.probe_size}, {a.runs} simulated runs")
    for col in ("scenario", "rule", "stops (simulated)", "stops (exact)"):
        table.add_column(col)
    for name, true_p in SCENARIOS.items():
        for rule, z in ((f"z = {DEFAULT_Z:g}", DEFAULT_Z), ("two drops of any size", 0.0)):
            rate, _ = simulate_stop_rate(true_p, runs=a.runs, probe_size=a.probe_size, z=z, seed=a.seed)
            exact = exact_stop_probability(true_p, probe_size=a.probe_size, z=z)
            table.add_row(name, rule, f"{rate:.2%}", f"{exact:.2%}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
