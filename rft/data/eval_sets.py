"""The eval and probe sets: AIME, MATH (levels), Apex and GSM8K read, integer answers kept, made disjoint.

Every row of every eval input is blocked from training (`EvalSets.blocked`, by `rft.data.problems.problem_hash`);
`eval_row` writes one problem in OpenRLHF's eval shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from rft.data.config import DataConfig, Inputs, choose, seeded_rng
from rft.data.integer_answer import gsm8k_final_answer, parse_integer_answer
from rft.data.problems import problem_hash
from rft.data.solutions import last_boxed_content
from rft.data.sources import DataError, Source, parse_source, read_table, resolve_columns, string_column
from rft.prompts import build_input

PROBLEM_ALIASES = ("problem", "question")


@dataclass
class EvalProblem:
    """One eval/probe problem with its canonical label and where it came from."""

    problem: str
    label: str
    hash: str
    origin: str


def _problems_and_answers(
    source: Source, *, answer_required: bool
) -> tuple[list[str], list[str] | None, pa.Table]:
    """The problem column and (if present) the answer column of a small eval input."""
    table = read_table(source)
    cols = resolve_columns(table.schema.names, {"problem": PROBLEM_ALIASES}, source.label)
    problems = string_column(table, cols["problem"], source.label)
    try:
        answer_col = resolve_columns(table.schema.names, {"answer": ("answer",)}, source.label)["answer"]
    except DataError:
        if answer_required:
            raise
        return problems, None, table
    return problems, string_column(table, answer_col, source.label), table


@dataclass
class EvalInput:
    """Counts for one eval input: rows read, rows usable as integer-answer problems, overlaps dropped."""

    name: str
    spec: str
    rows: int = 0
    usable: int = 0
    overlap: int = 0
    selected: int = 0
    notes: str = ""


@dataclass
class EvalSets:
    """All eval/probe problems plus the hashes of every eval input row (blocked from training)."""

    aime: list[EvalProblem]
    ood: list[EvalProblem]
    gsm8k_eval: list[EvalProblem]
    gsm8k_train: list[EvalProblem]
    blocked: dict[str, str]
    inputs: list[EvalInput]


def _unique(problems: list[EvalProblem], taken: set[str], stat: EvalInput) -> list[EvalProblem]:
    """Drop problems already taken by an earlier eval set or earlier in this one."""
    out = []
    for p in problems:
        if p.hash in taken:
            stat.overlap += 1
            continue
        taken.add(p.hash)
        out.append(p)
    return out


def load_aime(source: Source, stat: EvalInput) -> list[EvalProblem]:
    """AIME problems; every answer must be an integer, else an error naming file, row and column."""
    problems, answers, _ = _problems_and_answers(source, answer_required=True)
    out = []
    for row, (problem, answer) in enumerate(zip(problems, answers, strict=True)):
        label = parse_integer_answer(answer)
        if label is None:
            raise DataError(
                f"{source.label}: row {row}: column 'answer' is {answer!r}, not an integer answer"
            )
        out.append(EvalProblem(problem, label, problem_hash(problem), "aime"))
    stat.rows = stat.usable = len(out)
    return out


def _parse_level(value) -> int | None:
    """MATH level from "Level 5", "5" or 5; None when unknown ("Level ?")."""
    if isinstance(value, int):
        return value
    digits = "".join(ch for ch in str(value or "") if ch.isdigit())
    return int(digits) if digits else None


def load_math(
    source: Source, levels: tuple[int, ...], stat: EvalInput
) -> tuple[list[EvalProblem], list[str]]:
    """MATH problems at the given levels with an integer answer (answer column, else last \\boxed{})."""
    problems, answers, table = _problems_and_answers(source, answer_required=False)
    cols = resolve_columns(table.schema.names, {"level": ("level",)}, source.label)
    if answers is None:
        sol = resolve_columns(table.schema.names, {"answer": ("answer", "solution")}, source.label)["answer"]
        answers = [last_boxed_content(s) for s in string_column(table, sol, source.label)]
    level_values = table.column(cols["level"]).to_pylist()
    out = []
    for problem, answer, level in zip(problems, answers, level_values, strict=True):
        label = parse_integer_answer(answer)
        if _parse_level(level) in levels and label is not None:
            out.append(EvalProblem(problem, label, problem_hash(problem), "math"))
    stat.rows += len(problems)
    stat.usable += len(out)
    return out, problems


def load_integer_set(
    source: Source, origin: str, stat: EvalInput, *, gsm8k: bool
) -> tuple[list[EvalProblem], list[str]]:
    """Problems of Apex or GSM8K whose answer is an integer (GSM8K: the number after `####`)."""
    problems, answers, _ = _problems_and_answers(source, answer_required=True)
    out = []
    for problem, answer in zip(problems, answers, strict=True):
        label = (
            (gsm8k_final_answer(answer) or parse_integer_answer(answer))
            if gsm8k
            else parse_integer_answer(answer)
        )
        if label is not None:
            out.append(EvalProblem(problem, label, problem_hash(problem), origin))
    stat.rows += len(problems)
    stat.usable += len(out)
    return out, problems


def build_eval_sets(inputs: Inputs, cfg: DataConfig) -> EvalSets:
    """Read AIME, MATH, Apex and GSM8K, make the eval sets disjoint, and collect every hash to block."""
    blocked: dict[str, str] = {}
    taken: set[str] = set()
    aime_stat = EvalInput("aime", inputs.aime)
    aime_all = load_aime(parse_source(inputs.aime), aime_stat)
    for p in aime_all:
        blocked.setdefault(p.hash, "aime")
    aime = _unique(aime_all, taken, aime_stat)
    aime_pick = [aime[i] for i in choose(len(aime), cfg.aime_size, seeded_rng(cfg.seed, 1), "AIME", "--aime-size")]
    aime_stat.selected = len(aime_pick)

    apex_stat = EvalInput("apex", inputs.apex)
    apex_all, apex_raw = load_integer_set(parse_source(inputs.apex), "apex", apex_stat, gsm8k=False)
    for text in apex_raw:
        blocked.setdefault(problem_hash(text), "apex")
    apex = _unique(apex_all, taken, apex_stat)
    apex_stat.selected = len(apex)
    apex_stat.notes = "all integer ones"

    math_stat = EvalInput("math", " ".join(inputs.math))
    math_all: list[EvalProblem] = []
    for spec in inputs.math:
        found, raw = load_math(parse_source(spec, "test"), cfg.math_levels, math_stat)
        math_all.extend(found)
        for text in raw:
            blocked.setdefault(problem_hash(text), "math")
    math = _unique(math_all, taken, math_stat)
    math_pick = [
        math[i] for i in choose(len(math), cfg.ood_math_size, seeded_rng(cfg.seed, 2), "MATH", "--ood-math-size")
    ]
    math_stat.selected = len(math_pick)
    math_stat.notes = f"levels {', '.join(map(str, cfg.math_levels))}"
    stats = [aime_stat, math_stat, apex_stat]

    gsm_eval: list[EvalProblem] = []
    gsm_train: list[EvalProblem] = []
    if inputs.gsm8k_test and inputs.gsm8k_train:
        test_stat = EvalInput("gsm8k_test", inputs.gsm8k_test)
        test_all, raw = load_integer_set(
            parse_source(inputs.gsm8k_test, "test"), "gsm8k", test_stat, gsm8k=True
        )
        for text in raw:
            blocked.setdefault(problem_hash(text), "gsm8k_test")
        test = _unique(test_all, taken, test_stat)
        k = cfg.gsm8k_eval_size or len(test)
        gsm_eval = [
            test[i] for i in choose(len(test), k, seeded_rng(cfg.seed, 3), "GSM8K test", "--gsm8k-eval-size")
        ]
        test_stat.selected = len(gsm_eval)
        train_stat = EvalInput("gsm8k_train", inputs.gsm8k_train)
        train_all, _ = load_integer_set(
            parse_source(inputs.gsm8k_train, "train"), "gsm8k", train_stat, gsm8k=True
        )
        gsm_train = _unique(train_all, taken, train_stat)
        train_stat.notes = "pool candidates"
        stats += [test_stat, train_stat]
    ood = math_pick + apex
    return EvalSets(aime_pick, ood, gsm_eval, gsm_train, blocked, stats)


def eval_row(p: EvalProblem, datasource: str, *, origin: bool = False) -> dict:
    """An eval/probe row; `datasource` names the set in OpenRLHF's eval logs (eval_<datasource>_pass1)."""
    row = {"input": build_input(p.problem), "label": p.label, "datasource": datasource}
    if origin:
        row["origin"] = p.origin
    return row
