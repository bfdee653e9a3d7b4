"""Import the single-GPU TRL guide's CoT dataset (one JSON array of {"question", "ground_truth", ...}) as an RL
pool and a held-out eval set in rft's row format, for `DATASET=cot bash train_grpo_small.sh`.

python -m rft.data.cot_json first_round_final_gsm8k_math.json [--out data] [--eval-size 500] [--seed 42]

Writes OUT/cot_rl_pool.jsonl (`input`, `label`) and OUT/cot_eval.jsonl (`input`, `label`, `datasource` = cot),
disjoint by problem hash. Only `question` and `ground_truth` are used (the generated CoT, `predicted_answer` and
`correct` describe the teacher's solution, not the problem); rows missing either, and repeated problems, are
dropped and counted. JSONL input (one object per line) is read too.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rft.data.problems import problem_hash
from rft.io import atomic_write_jsonl
from rft.prompts import build_input

POOL_FILE, EVAL_FILE, DATASOURCE = "cot_rl_pool.jsonl", "cot_eval.jsonl", "cot"


@dataclass
class Imported:
    """The problems kept, in file order, and what was dropped, by reason."""

    rows: list[tuple[str, str]] = field(default_factory=list)  # (question, ground truth)
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


def _records(path: Path) -> list:
    """The file's records: a JSON array (the guide's format), a JSON object holding one, or JSONL."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: neither a JSON array nor JSONL ({e})") from None
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise ValueError(f"{path}: a JSON object without exactly one list of records")
        data = lists[0]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON array of records")
    return data


def _text(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(int(value)) if float(value).is_integer() else str(value)
    return (value.strip() or None) if isinstance(value, str) else None


def import_cot(path: Path) -> Imported:
    """Read and clean the guide's records: question + ground_truth kept, the rest dropped with a reason."""
    out, seen = Imported(), set()
    for rec in _records(path):
        if not isinstance(rec, dict):
            out.drop("not an object")
            continue
        question, truth = _text(rec.get("question")), _text(rec.get("ground_truth"))
        if question is None:
            out.drop("no question")
        elif truth is None:
            out.drop("no ground_truth")
        elif (h := problem_hash(question)) in seen:
            out.drop("repeated problem")
        else:
            seen.add(h)
            out.rows.append((question, truth))
    return out


def split(rows: list[tuple[str, str]], eval_size: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(pool rows, eval rows): a seeded sample of `eval_size` problems held out, the rest in file order."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    held = set(order[: min(eval_size, len(rows))])
    pool = [{"input": build_input(q), "label": a} for i, (q, a) in enumerate(rows) if i not in held]
    ev = [{"input": build_input(q), "label": a, "datasource": DATASOURCE} for i, (q, a) in enumerate(rows) if i in held]
    return pool, ev


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rft.data.cot_json", description=__doc__.split("\n\n")[0])
    p.add_argument("path", type=Path, help="the guide's CoT JSON (a JSON array with question / ground_truth)")
    p.add_argument("--out", type=Path, default=Path("data"), help="output directory (default: data)")
    p.add_argument("--eval-size", type=int, default=500, help="problems held out as cot_eval.jsonl (default 500)")
    p.add_argument("--seed", type=int, default=42, help="seed of the held-out sample (default 42)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Write the pool and the eval set; exit 2 on an unreadable or empty input."""
    args = build_parser().parse_args(argv)
    try:
        got = import_cot(args.path)
    except (OSError, ValueError) as e:
        print(f"cot_json: {e}", file=sys.stderr)
        return 2
    if len(got.rows) <= args.eval_size:
        print(f"cot_json: {args.path}: {len(got.rows)} usable problems, not more than --eval-size {args.eval_size}",
              file=sys.stderr)
        return 2
    pool, ev = split(got.rows, args.eval_size, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(args.out / POOL_FILE, pool)
    atomic_write_jsonl(args.out / EVAL_FILE, ev)
    dropped = ", ".join(f"{n} {why}" for why, n in sorted(got.dropped.items())) or "none"
    print(f"{args.out / POOL_FILE}: {len(pool)} rows; {args.out / EVAL_FILE}: {len(ev)} rows; dropped: {dropped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
