"""`prepare_sft_data.py --verify`: re-read every data file and prove the properties the report claims."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rft.data.integer_answer import parse_integer_answer
from rft.data.pipeline import BAND_FILE, FILES, GSM8K_FILES, MANIFEST, REPORT_JSON, REPORT_MD, TRAINING_ROLES
from rft.data.problems import problem_hash
from rft.data.solutions import SFT_OK, sft_output
from rft.io import read_jsonl, sha256_file
from rft.prompts import INSTRUCTION

MAX_PROBLEMS_LISTED = 3


@dataclass
class Check:
    """One verification result."""

    name: str
    ok: bool
    detail: str = ""


def _row_problems(name: str, rows: list[dict], entry: dict) -> list[str]:
    """What is wrong with the rows of one file (keys, label type and form, input, datasource, output)."""
    keys = set(entry["keys"])
    problems = []
    for n, row in enumerate(rows, 1):
        where = f"{name}:{n}"
        if set(row) != keys:
            problems.append(f"{where}: keys {sorted(row)} != {sorted(keys)}")
            continue
        label = row["label"]
        if not isinstance(label, str):
            problems.append(f"{where}: label {label!r} is a JSON {type(label).__name__}, not a string")
        elif parse_integer_answer(label) != label:
            problems.append(f"{where}: label {label!r} is not a canonical integer string")
        if not isinstance(row["input"], str) or not row["input"].rstrip().endswith(INSTRUCTION):
            problems.append(f"{where}: input does not end with the answer instruction")
        if entry["datasource"] and row.get("datasource") != entry["datasource"]:
            problems.append(f"{where}: datasource {row.get('datasource')!r} != {entry['datasource']!r}")
        if "output" in keys and isinstance(label, str) and sft_output(row["output"], label)[1] != SFT_OK:
            problems.append(f"{where}: output does not end in exactly one \\boxed{{{label}}}")
    return problems


def _listed(items: list[str]) -> str:
    more = f" (+{len(items) - MAX_PROBLEMS_LISTED} more)" if len(items) > MAX_PROBLEMS_LISTED else ""
    return "; ".join(items[:MAX_PROBLEMS_LISTED]) + more


def verify(out_dir: Path) -> list[Check]:
    """All checks over the files listed in out_dir/MANIFEST.json."""
    checks: list[Check] = []
    try:
        manifest = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
        entries: dict[str, dict] = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [Check("manifest", False, f"{out_dir / MANIFEST}: unreadable ({type(e).__name__}: {e})")]
    expected = [n for n in FILES if n not in GSM8K_FILES or any(g in entries for g in GSM8K_FILES)]
    missing = [n for n in expected if n not in entries]
    checks.append(
        Check("manifest lists every data file", not missing, f"missing: {missing}" if missing else "")
    )

    hashes: dict[str, list[str]] = {}
    for name, entry in entries.items():
        path = out_dir / name
        if not path.is_file():
            checks.append(Check(f"{name}", False, f"{path}: missing"))
            continue
        digest = sha256_file(path)
        checks.append(
            Check(
                f"{name} sha256",
                digest == entry["sha256"],
                "" if digest == entry["sha256"] else f"{digest[:12]} != manifest {entry['sha256'][:12]}",
            )
        )
        try:
            rows = read_jsonl(path)
        except ValueError as e:
            checks.append(Check(f"{name} rows", False, str(e)))
            continue
        ok_count = len(rows) == entry["rows"]
        checks.append(
            Check(
                f"{name} row count",
                ok_count,
                f"{len(rows)} rows" + ("" if ok_count else f" != manifest {entry['rows']}"),
            )
        )
        bad = _row_problems(name, rows, entry)
        checks.append(Check(f"{name} keys, string labels, inputs", not bad, _listed(bad)))
        hashes[name] = [problem_hash(r["input"]) for r in rows if isinstance(r.get("input"), str)]
        dupes = len(hashes[name]) - len(set(hashes[name]))
        checks.append(
            Check(f"{name} unique problems", not dupes, f"{dupes} duplicate problems" if dupes else "")
        )

    sets = {n: set(h) for n, h in hashes.items()}
    shared = []
    for a, b in combinations(sets, 2):
        if entries[a].get("subset_of") == b or entries[b].get("subset_of") == a:
            sub, parent = (a, b) if entries[a].get("subset_of") == b else (b, a)
            extra = len(sets[sub] - sets[parent])
            checks.append(
                Check(f"{sub} inside {parent}", not extra, f"{extra} problems outside" if extra else "")
            )
        elif BAND_FILE in (a, b) and entries[a].get("subset_of") and entries[a].get("subset_of") == entries[b].get(
            "subset_of"
        ):
            continue  # the pass-rate band pool shares its parent with the 400 subset / in-pool probe by design
        elif sets[a] & sets[b]:
            shared.append(f"{a} & {b}: {len(sets[a] & sets[b])} problems")
    pairs = len(sets) * (len(sets) - 1) // 2
    checks.append(Check(f"pairwise disjoint ({pairs} pairs less subsets)", not shared, _listed(shared)))

    training = [n for n in sets if entries[n]["role"] in TRAINING_ROLES]
    for name in sets:
        role = entries[name]["role"]
        if role not in ("eval", "probe"):
            continue
        if role == "probe" and entries[name].get("subset_of"):
            checks.append(
                Check(
                    f"{name} vs training",
                    True,
                    f"inside {entries[name]['subset_of']} by design "
                    f"(probe_id_mode={manifest.get('probe_id_mode')})",
                )
            )
            continue
        leaked = {t: len(sets[name] & sets[t]) for t in training if sets[name] & sets[t]}
        checks.append(
            Check(f"{name} in no training file", not leaked, f"found in {leaked}" if leaked else "")
        )

    for name, digest in manifest.get("reports", {}).items():
        path = out_dir / name
        actual = sha256_file(path) if path.is_file() else "missing"
        checks.append(
            Check(f"{name} sha256", actual == digest, "" if actual == digest else f"{path}: {actual[:12]}")
        )
    if set(manifest.get("reports", {})) != {REPORT_MD, REPORT_JSON}:
        checks.append(
            Check("manifest lists the reports", False, f"got {sorted(manifest.get('reports', {}))}")
        )
    return checks


def print_checks(checks: list[Check], console: Console | None = None) -> bool:
    """Print the checks as a rich table; True when all passed."""
    console = console or Console()
    table = Table(title="Data verification", title_justify="left")
    for col in ("check", "result", "detail"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(c.name, "[green]ok[/green]" if c.ok else "[red]FAIL[/red]", c.detail)
    console.print(table)
    failed = [c for c in checks if not c.ok]
    console.print(f"{len(checks) - len(failed)} checks passed, {len(failed)} failed")
    return not failed
