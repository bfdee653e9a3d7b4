"""Mutation testing (mutmut) of the modules where a bug costs a run, one module at a time, on a copy.

`make mutate` or `python scripts/mutate.py [MODULE ...]`. For each module in SCOPES the tracked and untracked
(not ignored) files are copied to a temporary directory, mutmut mutates that module there (its own copy in
`mutants/`, switched per mutant at run time) and runs only the module's own test files (`-x`, and within them only
the tests that reach the mutated function). The checkout is never written to; the copy is removed at the end, also
on Ctrl-C or SIGTERM. Prints a kill-rate table per module and every surviving mutant with its diff; survivors
listed with a reason in docs/mutation.md (the table of equivalent mutants) count as equivalent, not as misses.
The report also goes to .cache/mutate/report.json and .cache/mutate/survivors.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "mutation.md"


@dataclass(frozen=True)
class Scope:
    """Source files mutated together, and the test files that cover them."""

    sources: tuple[str, ...]
    tests: tuple[str, ...]
    deselect: tuple[str, ...] = ()  # tests that cannot run on mutmut's copy


SCOPES: dict[str, Scope] = {
    "answer": Scope(("rft/reward/extraction.py", "rft/reward/equality.py"),
                     ("tests/reward/test_extraction.py", "tests/reward/test_equality.py")),
    # `python -S` (no site-packages) cannot import mutmut's trampolines
    "extraction": Scope(("rft/reward/exact_match.py",), ("tests/reward/test_exact_match.py",),
                        ("tests/reward/test_exact_match.py::test_loads_from_a_checkout_without_install",)),
    "lora": Scope(("rft/train/lora_payload.py", "rft/train/lora_merge.py"),
                  ("tests/train/test_lora_payload.py", "tests/train/test_lora_merge.py")),
    "lr_schedule": Scope(("rft/plan/lr_schedule.py",), ("tests/plan/test_lr_schedule.py",)),
    "early_stop": Scope(("rft/monitor/early_stop.py",), ("tests/monitor/test_early_stop.py",)),
    "playbook": Scope(("rft/monitor/diagnosis.py",), ("tests/monitor/test_diagnosis.py",)),
    "passk": Scope(("rft/eval/passk.py",), ("tests/eval/test_passk.py",)),
    "loss_diag": Scope(("rft/train/loss_diag.py",), ("tests/train/test_loss_diag.py",)),
    "data": Scope(("rft/data/pipeline.py", "rft/data/eval_sets.py", "rft/data/config.py"),
                  ("tests/data/test_pipeline.py", "tests/data/test_eval_sets.py")),
}

# A pytest plugin written into the copy. mutmut forks every mutant's run from a process that has already run
# the tests once, so an lru_cache there (equality._normalize) would answer from the unmutated code: emptied per test.
CACHE_RESET_PLUGIN = "mutmut_cache_reset"
CACHE_RESET_SOURCE = '''"""Empty every functools cache of the loaded rft modules before each test (see scripts/mutate.py)."""
import sys


def pytest_runtest_setup(item):
    for name, module in list(sys.modules.items()):
        if name == "rft" or name.startswith("rft."):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info"):
                    value.cache_clear()
'''
# Passed to every pytest run mutmut makes: the fast suite only, no cache writes in the copy.
PYTEST_ARGS = ["-m", "not vllm and not slow", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning",
               "-p", CACHE_RESET_PLUGIN]  # fmt: skip
# Shared with the checkout instead of copied (large, read-only for the tests).
LINKED = (".cache/wheels",)
STATUS = {1: "killed", 3: "killed", 0: "survived", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout",
          255: "timeout", 5: "no tests", 33: "no tests", 34: "skipped", None: "not checked"}  # fmt: skip
EQUIVALENT_ROW = re.compile(r"^\|\s*`([\w.\u01c1]+__mutmut_\d+)`\s*\|\s*(.+?)\s*\|\s*$")


class Interrupted(Exception):
    """SIGTERM, turned into an exception so the copy is still removed."""


def documented_equivalents(doc: Path = DOC) -> dict[str, str]:
    """Mutant name -> one-line reason, from the equivalent-mutants tables of docs/mutation.md."""
    if not doc.is_file():
        return {}
    rows = (EQUIVALENT_ROW.match(line) for line in doc.read_text().splitlines())
    return {m.group(1): m.group(2) for m in rows if m}


def project_files(root: Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files (what a fresh clone plus local edits holds)."""
    out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root, check=True,
                         capture_output=True).stdout  # fmt: skip
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]


def make_copy(root: Path, dest: Path, scope: Scope) -> None:
    """The project at `dest`, with a [tool.mutmut] section for `scope` appended to its pyproject.toml."""
    files = project_files(root)
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    for rel in LINKED:
        if (root / rel).exists():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).symlink_to(root / rel)
    (dest / f"{CACHE_RESET_PLUGIN}.py").write_text(CACHE_RESET_SOURCE)
    config = {
        "source_paths": ["rft"],
        "only_mutate": list(scope.sources),
        "pytest_add_cli_args_test_selection": list(scope.tests),
        "pytest_add_cli_args": PYTEST_ARGS + [a for test in scope.deselect for a in ("--deselect", test)],
        # everything beside rft/ (tests read data, scripts and patches relative to the project root)
        "also_copy": sorted({rel.split("/")[0] for rel in files} - {"rft"} | {*LINKED, f"{CACHE_RESET_PLUGIN}.py"}),
        "use_git_change_detection": False,
    }  # fmt: skip
    with (dest / "pyproject.toml").open("a") as f:
        f.write("\n[tool.mutmut]\n")
        for key, value in config.items():
            f.write(f"{key} = {json.dumps(value)}\n")


def read_results(copy: Path, scope: Scope) -> tuple[dict[str, str], dict[str, str]]:
    """Mutant name -> status, and mutant name -> source file, from mutmut's per-file metadata in the copy."""
    results: dict[str, str] = {}
    paths: dict[str, str] = {}
    for src in scope.sources:
        meta = copy / "mutants" / (src + ".meta")
        if meta.is_file():
            codes = json.loads(meta.read_text())["exit_code_by_key"]
            results.update({k: STATUS.get(v, "suspicious") for k, v in codes.items()})
            paths.update(dict.fromkeys(codes, src))
    return results, paths


DIFF_CODE = """import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({name: get_diff_for_mutant(name, path=path) for name, path in json.loads(sys.argv[1])}))
"""


def mutant_diffs(copy: Path, names: dict[str, str], env: dict[str, str]) -> dict[str, str]:
    """Each mutant's diff against the original (mutant name -> source path), as `mutmut show` prints it."""
    if not names:
        return {}
    res = subprocess.run([sys.executable, "-c", DIFF_CODE, json.dumps(sorted(names.items()))], cwd=copy, env=env,
                         capture_output=True, text=True)  # fmt: skip
    if res.returncode != 0:
        return {name: f"(no diff: {res.stderr.strip().splitlines()[-1:]})" for name in names}
    keep = ("+", "-")
    return {name: "\n".join(ln for ln in diff.splitlines() if ln.startswith(keep) and not ln.startswith(("+++", "---")))
            for name, diff in json.loads(res.stdout).items()}  # fmt: skip


def run_module(name: str, scope: Scope, max_children: int, log_dir: Path) -> dict:
    """Mutate one module on a fresh copy; its results, survivor diffs and timing."""
    start = time.monotonic()
    copy = Path(tempfile.mkdtemp(prefix=f"rft-mutate-{name}-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MUTANT_UNDER_TEST")}
    # mutmut forks each mutant's run from a process that already ran torch: a forked OpenMP pool hangs
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    try:
        make_copy(ROOT, copy, scope)
        log = log_dir / f"{name}.log"
        with log.open("w") as f:
            # its own process group: mutmut's forked workers (a hung one included) end with it, also on Ctrl-C
            proc = subprocess.Popen([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)],
                                    cwd=copy, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
            try:
                proc.wait()
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        results, paths = read_results(copy, scope)
        diffs = mutant_diffs(copy, {k: paths[k] for k, v in results.items() if v == "survived"}, env)
        return {"module": name, "sources": list(scope.sources), "tests": list(scope.tests), "rc": proc.returncode,
                "log": str(log), "results": results, "diffs": diffs, "seconds": round(time.monotonic() - start)}
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def summarize(report: list[dict], equivalents: dict[str, str], console: Console) -> None:
    """The per-module kill-rate table, then every survivor that is not a documented equivalent."""
    table = Table(title="mutation testing: kill rate per module")
    for col in ("module", "mutants", "killed", "timeout", "survived", "equivalent", "not run", "kill rate",
                "excl. equivalent", "time"):  # fmt: skip
        table.add_column(col, justify="left" if col == "module" else "right")
    for r in report:
        statuses = list(r["results"].values())
        killed, timeout = statuses.count("killed"), statuses.count("timeout")
        survived = [k for k, v in r["results"].items() if v == "survived"]
        equiv = [k for k in survived if k in equivalents]
        tested = killed + timeout + len(survived)
        rate = (killed + timeout) / tested if tested else float("nan")
        rate_eq = (killed + timeout) / (tested - len(equiv)) if tested - len(equiv) else float("nan")
        r["summary"] = {"mutants": len(statuses), "killed": killed, "timeout": timeout, "survived": len(survived),
                        "equivalent": len(equiv), "not_run": len(statuses) - tested, "kill_rate": rate,
                        "kill_rate_excl_equivalent": rate_eq}  # fmt: skip
        table.add_row(r["module"], str(len(statuses)), str(killed), str(timeout), str(len(survived)), str(len(equiv)),
                      str(len(statuses) - tested), f"{rate:.1%}", f"{rate_eq:.1%}", f"{r['seconds']}s")  # fmt: skip
    console.print(table)
    for r in report:
        open_ = {k: d for k, d in r["diffs"].items() if k not in equivalents}
        if open_:
            console.rule(f"{r['module']}: {len(open_)} surviving mutants ({', '.join(r['sources'])})")
            for k, d in open_.items():
                console.print(f"[bold]{k}[/bold]", highlight=False)
                console.print(d, markup=False, highlight=False)
        if r["rc"] not in (0, None) and not r["results"]:
            console.print(f"[red]{r['module']}: mutmut exited {r['rc']}; see {r['log']}[/red]")
    seen = {k for r in report for k in r["results"]}
    modules = {r["module"] for r in report}
    stale = [k for k in equivalents if k not in seen and any(k.startswith(p) for p in _prefixes(modules))]
    if stale:
        console.print(f"[yellow]docs/mutation.md lists {len(stale)} equivalent mutants that match no mutant of this run "
                      f"(renumbered by an edit?): {', '.join(stale)}[/yellow]")  # fmt: skip


def _prefixes(modules: set[str]) -> list[str]:
    return [src[:-3].replace("/", ".") + "." for m in modules for src in SCOPES[m].sources]


def write_report(report: list[dict], equivalents: dict[str, str], out: Path) -> None:
    """report.json (everything) and survivors.md (each survivor's diff, marked equivalent or not)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    lines = ["# Surviving mutants", ""]
    for r in report:
        lines += [f"## {r['module']} ({', '.join(r['sources'])})", ""]
        for k, d in r["diffs"].items():
            why = equivalents.get(k)
            lines += [f"### `{k}`" + (f": equivalent, {why}" if why else ""), "", "```diff", d, "```", ""]
    (out / "survivors.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="*", metavar="MODULE", help=f"modules to mutate (default: all): {', '.join(SCOPES)}")
    p.add_argument("--max-children", type=int, default=min(2, os.cpu_count() or 1), help="parallel mutants")
    p.add_argument("--out", type=Path, default=ROOT / ".cache" / "mutate", help="report directory")
    a = p.parse_args(argv)
    unknown = [m for m in a.modules if m not in SCOPES]
    if unknown:
        p.error(f"unknown modules {unknown}; choose from {', '.join(SCOPES)}")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(Interrupted()))
    console = Console(width=None if sys.stdout.isatty() else 150)
    equivalents = documented_equivalents()
    a.out.mkdir(parents=True, exist_ok=True)
    report = []
    try:
        for name in a.modules or list(SCOPES):
            console.print(f"mutating {name}: {', '.join(SCOPES[name].sources)} against {', '.join(SCOPES[name].tests)}")
            report.append(run_module(name, SCOPES[name], a.max_children, a.out))
            console.print(f"  {name}: {len(report[-1]['results'])} mutants in {report[-1]['seconds']}s")
    except (KeyboardInterrupt, Interrupted):
        console.print("[red]interrupted: the temporary copy is removed; partial results below[/red]")
    summarize(report, equivalents, console)
    write_report(report, equivalents, a.out)
    return 0 if report else 1


if __name__ == "__main__":
    sys.exit(main())
