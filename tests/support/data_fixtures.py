"""Offline data fixtures: NuminaMath-1.5-shaped parquet shards with known removals per stage, plus small
AIME / MATH / Apex / GSM8K inputs (files for the CLI runs; overlapping JSONL ones for the in-process tests).
Also a fast generator of a full-size (896,215-row) input for the benchmark.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rft.data.config import DataConfig, Inputs

NUMINA_SOURCES = (
    "olympiads",
    "cn_k12",
    "orca_math",
    "aops_forum",
    "synthetic_math",
    "number_theory",
    "amc_aime",
    "inequalities",
    "synthetic_amc",
    "cn_contest",
    "olympiads_ref",
)
TRAIN_SOURCES = tuple(s for s in NUMINA_SOURCES if s != "amc_aime")
# (raw answer, canonical label): every clean integer form the parser must accept.
CLEAN_ANSWERS = (
    ("42", "42"),
    ("-3", "-3"),
    ("+5", "5"),
    ("042", "42"),
    ("1,000", "1000"),
    ("$12$", "12"),
    ("12 \\text{ cm}", "12"),
)
# Answers stage 2 must remove (None is a null cell).
NOT_INTEGER_ANSWERS = (
    "5,7",
    "3.5",
    "\\frac{1}{2}",
    "proof",
    "notfound",
    "",
    "(1,4),(4,1)",
    "\\frac{13}{6}",
    "x^2+1",
    None,
)
# Solution endings: name -> (template with {box} = raw boxed content, {label}, sft reason).
ENDINGS = {
    "plain": ("Hence the final answer is \\boxed{{{box}}}", "ok"),
    "dollar_period": ("Therefore the answer is $\\boxed{{{box}}}$.", "ok"),
    "paren": ("So we get \\(\\boxed{{{box}}}\\)", "ok"),
    "display": ("Thus\n\\[\\boxed{{{box}}}\\]\n", "ok"),
    "dollar_dollar": ("The result:\n$$\\boxed{{{box}}}$$", "ok"),
    "no_boxed": ("So the answer is {label}.", "no_boxed"),
    "mismatch": ("So the answer is $\\boxed{{{wrong}}}$.", "boxed_mismatch"),
    "several": ("First $\\boxed{{7}}$ then finally $\\boxed{{{box}}}$.", "several_boxed"),
    "not_final": (
        "We get $\\boxed{{{box}}}$. Let us double check this against the constraints once more.",
        "boxed_not_final",
    ),
}
SOLUTION_PREFIX = "We work through the problem step by step, checking every case carefully. "

AIME = [
    ("Find the number of ordered pairs $(m,n)$ of positive integers with $m+n = 100$ and $m < n$.", 49),
    (
        "Let $N$ be the largest four-digit integer divisible by 7 whose digits sum to 20. Find $N \\bmod 1000$.",
        983,
    ),
    ("A frog jumps on the integers starting from 0. How many paths of 6 jumps of +1 or -1 end at 0?", 20),
    ("Find the remainder when $3^{2024}$ is divided by $1000$.", 1),
    ("How many positive divisors does $2^{10} \\cdot 3^{5}$ have?", 66),
    ("Find the sum of the digits of $10^{20} - 20$.", 172),
    ("Let $S$ be the set of integers from 1 to 2024 divisible by 4 or 6. Find $|S| \\bmod 1000$.", 674),
    ("In triangle $ABC$, $AB = 13$, $BC = 14$, $CA = 15$. Find the area of the triangle.", 84),
    ("Find the least positive integer $n$ such that $n!$ ends in exactly 24 zeros.", 100),
    ("Find the number of subsets of $\\{1,2,\\dots,10\\}$ with no two consecutive elements.", 144),
]
APEX = [
    (
        "Find the minimum possible number of chords of a continuous function with one chord of length 2025.",
        "4049",
    ),
    ("Find the largest real k with a_1 + a_2 > k a_3 for every chessboard polygon.", "1/2"),
    (
        "Compute the sum of all possible inradii of triangle ABC with tangent circles of radii 5 and 7.",
        "\\frac{1980}{169}",
    ),
    ("Find the sum of S(p) over all primes p below 50 for divisoral tables.", "6266942768"),
    ("How many distinct rectangles can Hannah form from a 2024 by 2025 rectangle with one cut?", "6"),
    ("Find the value of k(n,p) summed over the given range of n and p.", "138"),
    ("Determine the exact value of the sum of the given series in closed form.", "2^{2025} - 1"),
    ("Find the number of admissible colourings of the 7 by 7 board.", "$1,024$"),
]


@dataclass
class NuminaFixture:
    """Where the fixture shards are and how many rows each stage must remove."""

    shards: list[Path]
    total: int
    removed: dict[str, int]
    eligible: int
    planted_eval_problems: list[str] = field(default_factory=list)
    sft_ok: int = 0


def _row(
    problem, answer, solution, *, source="olympiads", qt="math-word-problem", pv="Yes", sv="Yes"
) -> dict:
    return {
        "problem": problem,
        "solution": solution,
        "answer": answer,
        "problem_type": "Algebra",
        "question_type": qt,
        "problem_is_valid": pv,
        "solution_is_valid": sv,
        "source": source,
        "synthetic": source.startswith("synthetic"),
    }


def _solution(ending: str, raw: str, label: str) -> str:
    template, _ = ENDINGS[ending]
    box = raw.strip("$")
    return SOLUTION_PREFIX + template.format(box=box, label=label, wrong=int(label) + 1)


def _good_problem(i: int) -> str:
    return f"Problem {i}: a farmer has {i + 3} sheep and buys {2 * i + 1} more each week. How many after a while?"


def numina_rows() -> tuple[list[dict], dict[str, int], int, int, list[str]]:
    """All fixture rows in input order, the removals per stage, eligible rows, SFT-ok rows, planted evals."""
    rng = random.Random(1234)
    good, removal = [], []
    sft_ok = 0
    endings = list(ENDINGS)
    for i in range(126):
        raw, label = CLEAN_ANSWERS[i % len(CLEAN_ANSWERS)]
        ending = endings[i % len(endings)]
        sft_ok += ENDINGS[ending][1] == "ok"
        good.append(_row(_good_problem(i), raw, _solution(ending, raw, label), source=TRAIN_SOURCES[i % 10]))
    long_solution = _solution("plain", "42", "42")
    removed = {}
    # 1. question_type
    qts = ["proof", "MCQ", "math-word-problem ", "Math-Word-Problem", "other", None, "proof", "MCQ"]
    removal += [
        _row(f"Prove or choose: statement number {n} about integers.", "42", long_solution, qt=q)
        for n, q in enumerate(qts)
    ]
    removed["question_type"] = len(qts)
    # 2. integer answer
    removal += [
        _row(f"Compute the quantity asked in exercise number {n} exactly.", a, long_solution)
        for n, a in enumerate(NOT_INTEGER_ANSWERS)
    ]
    removed["integer_answer"] = len(NOT_INTEGER_ANSWERS)
    # 3a. AMC/AIME source
    removal += [
        _row(
            f"AMC contest question {n}: how many integers satisfy the rule?",
            "7",
            long_solution,
            source="amc_aime",
        )
        for n in range(5)
    ]
    removed["contest_source"] = 5
    # 3b. copies of eval problems (case and whitespace changed) under other sources
    planted = [AIME[2][0], _math_rows()[0]["problem"], _gsm8k_rows("test")[0]["question"], APEX[4][0]]
    for n, text in enumerate(planted):
        variant = "  " + text.upper().replace(" ", "  \n") + " "
        removal.append(
            _row(variant, "12", long_solution, source=("aops_forum", "olympiads", "cn_k12", "aops_forum")[n])
        )
    removed["eval_overlap"] = len(planted)
    # 4. validity flags
    flags = [
        ("No", "Yes"),
        ("Yes", "No"),
        ("Incomplete", "Yes"),
        ("Yes", "Incomplete"),
        (None, "Yes"),
        ("yes", "Yes"),
    ]
    invalid = [
        _row(f"Invalid problem number {n}: find the value of the expression.", "9", long_solution, pv=p, sv=s)
        for n, (p, s) in enumerate(flags)
    ]
    removal += invalid
    removed["valid"] = len(flags)
    # 6. too short / empty solutions (unique problems)
    short = [
        _row("Find n.", "3", long_solution),
        _row("   Compute 2 + 2.      ", "4", long_solution),
        _row("A long enough problem statement with an empty solution.", "5", ""),
        _row("A long enough problem statement with a blank solution.", "5", "   \n  "),
        _row("A long enough problem statement with a tiny solution.", "5", "Answer: $\\boxed{5}$."),
    ]
    removal += short
    rows = good + removal
    rng.shuffle(rows)
    # 5. duplicates of good rows differing in case / whitespace, after their originals
    dups = []
    for n, src in enumerate(good[:8]):
        text = src["problem"]
        variant = [
            text.upper(),
            text.lower(),
            "  " + text + "\n",
            text.replace(" ", "\t"),
            text.replace(" ", "  "),
        ]
        dups.append({**src, "problem": variant[n % len(variant)], "source": "cn_k12"})
    removed["dedup"] = len(dups)
    removed["length"] = len(short)
    # A valid row whose only earlier twin was removed at stage 4 survives dedup (stage order matters).
    revived = _row(invalid[0]["problem"].upper(), "9", _solution("plain", "9", "9"), source="number_theory")
    rows += dups + [revived]
    eligible = len(good) + 1
    return rows, removed, eligible, sft_ok + 1, planted


def write_numina(dir_: Path, shards: int = 3) -> NuminaFixture:
    """Write the fixture as `train-0000K-of-0000N.parquet` shards under dir_/data."""
    rows, removed, eligible, sft_ok, planted = numina_rows()
    out = dir_ / "data"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, chunk in enumerate(np.array_split(np.arange(len(rows)), shards)):
        path = out / f"train-{k:05d}-of-{shards:05d}.parquet"
        pq.write_table(pa.Table.from_pylist([rows[i] for i in chunk], schema=NUMINA_SCHEMA), path)
        paths.append(path)
    return NuminaFixture(paths, len(rows), removed, eligible, planted, sft_ok)


NUMINA_SCHEMA = pa.schema(
    [
        (c, pa.string())
        for c in (
            "problem",
            "solution",
            "answer",
            "problem_type",
            "question_type",
            "problem_is_valid",
            "solution_is_valid",
            "source",
        )
    ]
    + [("synthetic", pa.bool_())]
)


def _math_rows() -> list[dict]:
    """Hendrycks-style MATH rows: level as "Level N", answer only inside the solution's last \\boxed{}."""
    rows = []
    for n in range(12):
        level = f"Level {4 + n % 2}"
        rows.append(
            {
                "problem": f"MATH hard problem {n}: compute the number of lattice points on circle {n}.",
                "level": level,
                "type": "Number Theory",
                "solution": f"Counting gives $\\boxed{{{n * 4}}}$ after we first try $\\boxed{{1}}$... no: "
                f"the answer is $\\boxed{{{n * 4 + 4}}}$.",
            }
        )
    rows += [
        {
            "problem": f"MATH easy problem {n}: add {n} and {n}.",
            "level": "Level 3",
            "type": "Prealgebra",
            "solution": f"$\\boxed{{{2 * n}}}$",
        }
        for n in range(3)
    ]
    rows += [
        {
            "problem": f"MATH fraction problem {n}: find the ratio.",
            "level": "Level 5",
            "type": "Algebra",
            "solution": f"The ratio is $\\boxed{{\\frac{{{n + 1}}}{{7}}}}$.",
        }
        for n in range(3)
    ]
    rows.append(
        {
            "problem": "MATH unknown-level problem: count the squares.",
            "level": "Level ?",
            "type": "Geometry",
            "solution": "$\\boxed{5}$",
        }
    )
    rows.append({"problem": AIME[0][0], "level": "Level 5", "type": "Counting", "solution": "$\\boxed{49}$"})
    return rows


def _math500_rows() -> list[dict]:
    """MATH-500-style rows: integer level and an answer column."""
    answers = ["17", "-2", "\\frac{3}{4}", "250", "\\sqrt{2}", "9"]
    return [
        {
            "problem": f"MATH-500 problem {n}: evaluate the given expression for case {n}.",
            "solution": "...",
            "answer": a,
            "subject": "Algebra",
            "level": 4 + n % 2,
            "unique_id": f"test/{n}.json",
        }
        for n, a in enumerate(answers)
    ]


def _gsm8k_rows(split: str) -> list[dict]:
    """GSM8K rows: `question`, `answer` ending in `#### N`."""
    n_rows = 30 if split == "train" else 12
    rows = [
        {
            "question": f"GSM8K {split} {n}: Tom has {n + 2} boxes of {n + 5} pens. How many pens?",
            "answer": f"He has {n + 2} * {n + 5} = <<{(n + 2) * (n + 5)}>> pens.\n#### {(n + 2) * (n + 5)}",
        }
        for n in range(n_rows)
    ]
    rows[1]["answer"] = "Big numbers.\n#### 1,000"
    rows[2]["answer"] = "Half of seven.\n#### 3.5"
    if split == "train":
        rows[3]["question"] = _gsm8k_rows("test")[5]["question"]  # a train copy of a test problem
    return rows


@dataclass
class EvalFixtures:
    """Paths of the small eval inputs and the counts the pipeline must find in them."""

    aime: Path
    math: list[Path]
    apex: Path
    gsm8k_train: Path
    gsm8k_test: Path
    aime_rows: int = len(AIME)
    math_usable: int = 0
    apex_integer: int = 0


def write_eval_inputs(dir_: Path) -> EvalFixtures:
    """AIME as parquet with capitalised columns and integer answers, MATH as JSONL + parquet, Apex, GSM8K."""
    dir_.mkdir(parents=True, exist_ok=True)
    aime = dir_ / "aime_2024.parquet"
    pq.write_table(
        pa.table(
            {
                "ID": [f"2024-{n}" for n in range(len(AIME))],
                "Problem": [p for p, _ in AIME],
                "Answer": pa.array([a for _, a in AIME], pa.int64()),
            }
        ),
        aime,
    )
    math_dir = dir_ / "math"
    math_dir.mkdir(exist_ok=True)
    math_jsonl = math_dir / "hendrycks_test.jsonl"
    math_jsonl.write_text("".join(json.dumps(r) + "\n" for r in _math_rows()), encoding="utf-8")
    math500 = dir_ / "math500.parquet"
    pq.write_table(pa.Table.from_pylist(_math500_rows()), math500)
    apex = dir_ / "apex.parquet"
    pq.write_table(
        pa.table(
            {
                "problem_idx": list(range(1, len(APEX) + 1)),
                "problem": [p for p, _ in APEX],
                "answer": [a for _, a in APEX],
            }
        ),
        apex,
    )
    gsm = {}
    for split in ("train", "test"):
        gsm[split] = dir_ / f"gsm8k_{split}.parquet"
        pq.write_table(pa.Table.from_pylist(_gsm8k_rows(split)), gsm[split])
    # usable MATH: 12 hard + 1 AIME copy (dropped later as overlap) + 4 integer MATH-500 answers
    return EvalFixtures(
        aime, [math_dir, math500], apex, gsm["train"], gsm["test"], math_usable=17, apex_integer=5
    )


# ----------------------------------------------------------------------------------------- benchmark scale


def _corpus(rng: np.random.Generator, chars: int) -> str:
    """Pseudo-random math-flavoured text to slice problems and solutions from."""
    words = np.array(
        "the of and number integer sum find let we so is are positive triangle angle prime "
        "value $x$ $y$ $n$ equation solve therefore hence since thus then square root "
        "divisible remainder digits area probability circle radius $\\frac{a}{b}$ $2^k$ "
        "= + - ( ) , . 1 2 3 4 5 6 7 8 9 10 12 15 20 100 1000".split()
    )
    return " ".join(words[rng.integers(0, len(words), chars // 5)].tolist())


def write_numina_like(dir_: Path, n_rows: int = 896_215, shards: int = 3, seed: int = 0) -> list[Path]:
    """A NuminaMath-1.5-shaped input of n_rows with the real dataset's rough mix (70% word problems, ~45% of
    those integer answers, 7% duplicate problems, 0.4% AMC/AIME, mixed solution endings)."""
    rng = np.random.default_rng(seed)
    corpus = _corpus(rng, 4_000_000)
    out = dir_ / "data"
    out.mkdir(parents=True, exist_ok=True)
    clean = [a for a, _ in CLEAN_ANSWERS]
    bad = [a for a in NOT_INTEGER_ANSWERS if a is not None]
    endings = list(ENDINGS)
    paths = []
    start = 0
    for k, size in enumerate(np.diff(np.linspace(0, n_rows, shards + 1).astype(int))):
        idx = np.arange(start, start + size)
        qt = rng.choice(["math-word-problem", "proof", "MCQ", "other"], size, p=[0.704, 0.15, 0.1, 0.046])
        integer = rng.random(size) < 0.453
        ans_pick = rng.integers(0, 1 << 30, size)
        src = rng.choice(
            NUMINA_SOURCES, size, p=[0.2, 0.25, 0.15, 0.05, 0.15, 0.04, 0.004, 0.02, 0.046, 0.08, 0.01]
        )
        valid = rng.random(size) < 0.996
        dup = (rng.random(size) < 0.075) & (idx > 1000)
        slen = rng.integers(300, 2500, size)
        offs = rng.integers(0, len(corpus) - 3000, size)
        end_pick = rng.integers(0, len(endings), size)
        problems, solutions, answers = [], [], []
        for j in range(size):
            i = int(idx[j])
            base = i - 1 - int(ans_pick[j] % 1000) if dup[j] else i  # a duplicate repeats an earlier problem
            o = (base * 7919) % (len(corpus) - 3000)
            problems.append(f"Problem {base}. " + corpus[o : o + 60 + (base * 31) % 540] + "?")
            if dup[j] and ans_pick[j] % 2:
                problems[-1] = problems[-1].upper()
            raw = clean[ans_pick[j] % len(clean)] if integer[j] else bad[ans_pick[j] % len(bad)]
            label = CLEAN_ANSWERS[ans_pick[j] % len(clean)][1] if integer[j] else "1"
            answers.append(raw)
            tail = _solution(endings[end_pick[j]], raw if integer[j] else "1", label)
            so = int(offs[j])
            solutions.append(corpus[so : so + int(slen[j])] + " " + tail)
        table = pa.table(
            {
                "problem": problems,
                "solution": solutions,
                "answer": answers,
                "problem_type": pa.array(["Algebra"] * size),
                "question_type": qt.tolist(),
                "problem_is_valid": np.where(valid, "Yes", "No").tolist(),
                "solution_is_valid": ["Yes"] * size,
                "source": src.tolist(),
                "synthetic": pa.array(np.char.startswith(src, "synthetic")),
            },
            schema=NUMINA_SCHEMA,
        )
        path = out / f"train-{k:05d}-of-{shards:05d}.parquet"
        pq.write_table(table, path, row_group_size=50_000)
        paths.append(path)
        start += size
    return paths


def write_eval_inputs_large(dir_: Path, math_rows: int = 400) -> EvalFixtures:
    """Eval inputs big enough for the default split sizes (18 AIME, 170 MATH, 500 GSM8K eval)."""
    fx = write_eval_inputs(dir_)
    rows = [
        {
            "problem": f"Synthetic MATH problem {n}: count the objects in configuration {n}.",
            "level": f"Level {4 + n % 2}",
            "type": "Counting",
            "solution": f"$\\boxed{{{n}}}$",
        }
        for n in range(math_rows)
    ]
    extra = dir_ / "math" / "extra.jsonl"
    extra.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for split, n_rows in (("train", 7473), ("test", 1319)):
        gsm = [
            {
                "question": f"GSM8K {split} {n}: Ann has {n} coins and finds {n + 3} more. How many?",
                "answer": f"{n} + {n + 3} = {2 * n + 3}\n#### {2 * n + 3}",
            }
            for n in range(n_rows)
        ]
        pq.write_table(pa.Table.from_pylist(gsm), getattr(fx, f"gsm8k_{split}"))
    aime = [
        (f"AIME-style problem {n}: find the remainder when {n}^{n} is divided by 1000.", n * 7 % 1000)
        for n in range(30)
    ]
    pq.write_table(pa.table({"Problem": [p for p, _ in aime], "Answer": [a for _, a in aime]}), fx.aime)
    return fx


# ----------------------------------------------------------------------------------------- small in-process inputs


def small_config(**over) -> DataConfig:
    """The CLI runs' sizes as a DataConfig (no progress bars), with overrides."""
    sizes = {"rl_pool_size": 40, "sft_size": 12, "sft_dev_size": 4, "pool_subset_size": 8, "probe_size": 6,
             "aime_size": 4, "ood_math_size": 10, "gsm8k_eval_size": 5, "progress": False}  # fmt: skip
    return DataConfig(**{**sizes, **over})


def jsonl_source(path: Path, rows: list[dict]) -> str:
    """Rows written as JSONL; returns the path as a source spec."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


AIME_S = [f"Small AIME problem {n}: find the number of tilings of board {n}." for n in range(4)]
APEX_S = [f"Small Apex problem {n}: count the admissible colourings of grid {n}." for n in range(4)]
MATH_S = [f"Small MATH problem {n}: count the lattice points on curve {n}." for n in range(6)]
GSM_TEST = [f"Small GSM8K test {n}: Ann buys {n + 2} bags of apples. How many apples?" for n in range(4)]
GSM_TRAIN = [f"Small GSM8K train {n}: Bob reads {n + 4} pages a day. How many pages?" for n in range(3)]


def small_evals(d: Path) -> dict[str, str | tuple[str, ...]]:
    """Eval inputs with overlaps in each: AIME repeats two rows, Apex copies AIME, MATH copies Apex, GSM8K test
    copies MATH, GSM8K train copies GSM8K test; plus rows each loader must skip."""
    d.mkdir(parents=True, exist_ok=True)
    apex_s = [*APEX_S[:2], AIME_S[1], APEX_S[3]]
    math_s = [*MATH_S[:2], APEX_S[0], *MATH_S[3:5]]
    test_s = [GSM_TEST[0], MATH_S[0], *GSM_TEST[2:]]
    train_s = [GSM_TRAIN[0], GSM_TEST[0], GSM_TRAIN[2]]
    levels = ["Level 5", "Level 3", "Level 4", "Level 12", "Level 5"]
    boxes = ["4", "5", "7", "9", "\\frac{1}{2}"]
    return {
        "aime": jsonl_source(d / "aime.jsonl", [{"problem": p, "answer": str(10 + n)} for n, p in enumerate(AIME_S)]
                       + [{"problem": AIME_S[0].upper(), "answer": "10"}, {"problem": AIME_S[2], "answer": "12"}]),
        "apex": jsonl_source(d / "apex.jsonl", [{"problem": p, "answer": a}
                                          for p, a in zip(apex_s, ["7", "1/2", "11", "So #### 7"], strict=True)]),
        "math": (
            jsonl_source(d / "math.jsonl", [{"problem": p, "level": lv, "solution": f"So $\\boxed{{{b}}}$."}
                                      for p, lv, b in zip(math_s, levels, boxes, strict=True)]),
            jsonl_source(d / "math500.jsonl", [{"problem": MATH_S[5], "level": 4, "answer": "6", "solution": "..."}]),
        ),
        "gsm8k_test": jsonl_source(d / "gsm_test.jsonl", [{"question": q, "answer": a} for q, a in
                                                    zip(test_s, ["So.\n#### 8", "#### 4", "12", "#### 3.5"], strict=True)]),
        "gsm8k_train": jsonl_source(d / "gsm_train.jsonl", [{"question": q, "answer": a} for q, a in
                                                      zip(train_s, ["#### 10", "#### 8", "Total\n#### 1,000"], strict=True)]),
    }  # fmt: skip


def small_inputs(d: Path, **over) -> Inputs:
    """Inputs with the small eval files (numina unused by build_eval_sets)."""
    return Inputs(**{"numina": str(d), **small_evals(d), **over})


SMALL_SIZES = {"aime_size": 2, "ood_math_size": 2, "gsm8k_eval_size": 0}
