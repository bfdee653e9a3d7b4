"""Score rft's grader (and math-verify's, when installed) on a peer's test suite of (gold, pred, expected) cases.

The suite is read, never imported or run: every `@pytest.mark.parametrize` over `gold`, `pred` and `expected`
(or `result`) in `<suite>/tests/test_*.py` is parsed with `ast` and its literal cases kept. A pred is graded as
a response (`rft.reward.exact_match.grade`: extraction, then equality) unless it is a short bare answer, which is
compared as an answer; a gold holding boxes is read through the extraction too. math-verify goes through the same
harness as a reward function (`bench_reward.math_verify_reward_func`). Cases that encode a convention rft
refuses on purpose are listed with their reason and counted apart (see CONVENTIONS and docs/rewards.md).

    python benchmarks/bench_peer_suite.py /tmp/Math-Verify     # a checkout or `git archive` of the suite
"""

from __future__ import annotations

import argparse
import ast
import logging
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rft.reward.equality import answers_equal  # noqa: E402
from rft.reward.exact_match import grade  # noqa: E402
from rft.reward.extraction import extract_answer, final_answer  # noqa: E402

BARE_PRED_CHARS = 60
GOLD_SOLUTION_CHARS = 200  # a longer gold is a worked solution: its answer is extracted
_PROSE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_MATH_WRAP = re.compile(r"^\s*(?:\$\$|\$|\\\(|\\\[)(.*?)(?:\$\$|\$|\\\)|\\\])\s*\.?\s*$", re.DOTALL)


@dataclass(frozen=True)
class Case:
    """One parametrized case: where it is, gold, pred, expected verdict, and the other parameters given."""

    file: str
    line: int
    gold: str
    pred: str
    expected: bool
    params: tuple[tuple[str, object], ...] = ()


# (name, test, reason): a case where `test` holds encodes a convention rft does not follow, on purpose.
def _param(case: Case, name: str) -> object:
    return dict(case.params).get(name)


_SPLIT_SPAN = re.compile(r"(?:\$|\\\()[ \t]*\n")
_BRACE_PAIR = re.compile(r"\{[^{}]*,[^{}]*\}")
_PAREN_PAIR = re.compile(r"\([^()]*,[^()]*\)")
_FRACTION = re.compile(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}")
_SHORT_DECIMAL = re.compile(r"-?\d+\.(\d{1,4})(?!\d)")


def _braces_as_tuple(case: Case) -> bool:
    """`{1,3}` (unescaped braces) on one side, the parenthesised pair on the other."""
    a, b = _unwrap_math(case.gold), _unwrap_math(case.pred)
    return any(_BRACE_PAIR.fullmatch(x) and _PAREN_PAIR.fullmatch(y) for x, y in ((a, b), (b, a)))


def _rounded_decimal(case: Case) -> bool:
    """A decimal of at most 4 places on one side that rounds (is not) a fraction `\\frac{p}{q}` on the other."""
    for a, b in ((case.gold, case.pred), (case.pred, case.gold)):
        fractions = [Fraction(int(p), int(q)) for p, q in _FRACTION.findall(a) if int(q)]
        for m in _SHORT_DECIMAL.finditer(b):
            d = Fraction(m.group(0))
            half_unit = Fraction(1, 2 * 10 ** len(m.group(1)))
            if any(d != v and abs(d - v) <= half_unit for v in fractions):
                return True
    return False


_COMMA_DECIMAL = re.compile(r"(?<![\d,(\[{])\d+,\d+(?![\d,)\]}])")  # not an item of a bracketed list
_POINT_DECIMAL = re.compile(r"\d+\.\d+")


def _decimal_comma(case: Case) -> bool:
    """One side writes with a comma (`0,111`) the decimal the other writes with a point (`0.111`)."""
    commas = {m.replace(",", ".") for m in _COMMA_DECIMAL.findall(case.gold + " " + case.pred)}
    return bool(commas & set(_POINT_DECIMAL.findall(case.gold + " " + case.pred)))

CONVENTIONS: list[tuple[str, Callable[[Case], bool], str]] = [
    (
        "non-strict variables",
        lambda c: _param(c, "strict") is False,
        "math-verify's strict=False mode treats differently named variables as equal (f(x) = f(y)); a reward "
        "grades in strict mode, as math-verify's own default does",
    ),
    (
        "one-way set relation",
        lambda c: _param(c, "allow_set_relation_comp") is False and not c.expected,
        "an interval gold refusing the inequality it means unless a flag is set; rft grades a pair the same "
        "both ways round (the inequality-gold direction is graded and counted)",
    ),
    (
        "rounded decimal",
        lambda c: c.expected and _rounded_decimal(c),
        "a decimal rounded to a few places (`0.33`, `2.6667`) for an exact fraction (1/3, 8/3); math-verify rounds "
        "both sides (to `precision` places), rft compares rationals exactly so that a near miss earns nothing",
    ),
    (
        "braces as a tuple",
        lambda c: c.expected and _braces_as_tuple(c),
        "`{1,3}` (unescaped braces: a TeX group) equal to the pair `(1,3)`; rft reads the group as a bare list "
        "(the solutions 1 and 3), which is not an ordered pair",
    ),
    (
        "math span across lines",
        lambda c: not c.expected and bool(_SPLIT_SPAN.search(c.pred)),
        "an inline span broken over lines (`Answer $ \\n 9 \\n $`) refused as math; TeX reads it, and so "
        "does rft: the number a reader sees there is the answer",
    ),
    (
        "decimal comma",
        _decimal_comma,
        "`1,22` read as 1.22 collides with a thousands separator (`1,220`) and with lists (`1,2`): rft reads a "
        "comma as a separator",
    ),
]


def literal_cases(path: Path) -> tuple[list[Case], int]:
    """The literal (gold, pred, expected) cases of one test file, and how many non-literal cases were skipped."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    cases, skipped = [], 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not _is_parametrize(node.func) or len(node.args) < 2:
            continue
        try:
            names = [n.strip() for n in ast.literal_eval(node.args[0]).split(",")]
        except (ValueError, AttributeError, SyntaxError):
            continue
        verdict = "expected" if "expected" in names else "result" if "result" in names else None
        if not {"gold", "pred"} <= set(names) or verdict is None or not isinstance(node.args[1], ast.List):
            continue
        for elt in node.args[1].elts:
            try:
                values = dict(zip(names, ast.literal_eval(elt), strict=True))
            except (ValueError, TypeError, SyntaxError):
                skipped += 1
                continue
            extra = tuple((k, v) for k, v in values.items() if k not in ("gold", "pred", verdict))
            cases.append(Case(path.name, elt.lineno, values["gold"], values["pred"], bool(values[verdict]), extra))
    return cases, skipped


def _is_parametrize(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and func.attr == "parametrize"


def _unwrap_math(text: str) -> str:
    m = _MATH_WRAP.match(text)
    return m.group(1).strip() if m and "$" not in m.group(1) else text.strip()


def bare_answer(text: str) -> str | None:
    """The text as an answer when it is one (short, no box, no prose outside math), else None."""
    bare = _unwrap_math(text)
    if len(bare) > BARE_PRED_CHARS or "\\boxed" in bare or "\n" in bare:
        return None
    return bare if bare != text.strip() or not _PROSE.search(bare) else None


def gold_answer(gold: str) -> str:
    """The gold as a label: the answer of its boxes, what the extraction finds in a long one, else itself."""
    if "\\boxed" in gold or "\\fbox" in gold:
        found = final_answer(gold)
    elif len(gold) > GOLD_SOLUTION_CHARS:
        found = extract_answer(gold).answer
    else:
        found = None
    return found if found is not None else _unwrap_math(gold)


def rft_verdict(case: Case) -> bool:
    """rft's verdict: a short bare pred compared as an answer, anything else graded as a response."""
    label = gold_answer(case.gold)
    bare = bare_answer(case.pred)
    if bare is not None:
        return answers_equal(bare, label)
    return grade(case.pred + "<|im_end|>", label).correct


def math_verify_verdict(case: Case) -> bool:
    """math-verify's verdict through the reward harness of bench_reward.py (gold wrapped as LaTeX)."""
    from benchmarks.bench_reward import math_verify_reward_func

    out = math_verify_reward_func([case.pred], [""], [_unwrap_math(case.gold)])
    return out["rewards"][0] > 0.5


@dataclass
class Tally:
    """Agreement counts for one file (or all)."""

    n: int = 0
    agree: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, verdict: bool, expected: bool) -> None:
        self.n += 1
        self.agree += verdict == expected
        self.fp += verdict and not expected
        self.fn += expected and not verdict

    def cell(self) -> str:
        return f"{self.agree}/{self.n} = {self.agree / self.n:.1%} (FP {self.fp}, FN {self.fn})" if self.n else "-"


def convention_of(case: Case) -> tuple[str, str] | None:
    return next(((name, why) for name, test, why in CONVENTIONS if test(case)), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite", type=Path, help="root of the peer's checkout (its tests/test_*.py are read)")
    ap.add_argument("--no-math-verify", action="store_true", help="score rft only, even when math-verify imports")
    ap.add_argument("--show", type=int, default=0, help="print this many disagreements of rft (outside conventions)")
    args = ap.parse_args()
    files = sorted((args.suite / "tests").glob("test_*.py"))
    if not files:
        sys.exit(f"bench_peer_suite: no tests/test_*.py under {args.suite}")
    logging.disable(logging.WARNING)
    arms: dict[str, Callable[[Case], bool]] = {"rft": rft_verdict}
    if not args.no_math_verify:
        try:
            import math_verify  # noqa: F401

            arms["math-verify"] = math_verify_verdict
        except ImportError:
            print("math-verify is not installed: its arm is skipped")
    tallies: dict[tuple[str, str, str], Tally] = {}
    conventions: list[tuple[Case, str, str]] = []
    misses: list[tuple[Case, str]] = []
    non_literal = 0
    for path in files:
        cases, skipped = literal_cases(path)
        non_literal += skipped
        for case in cases:
            conv = convention_of(case)
            if conv is not None:
                conventions.append((case, *conv))
            for arm, fn in arms.items():
                verdict = fn(case)
                for scope in ("all", "outside conventions"):
                    if scope == "all" or conv is None:
                        for f in (case.file, "TOTAL"):
                            tallies.setdefault((arm, scope, f), Tally()).add(verdict, case.expected)
                if arm == "rft" and conv is None and verdict != case.expected:
                    misses.append((case, "FP" if verdict else "FN"))
    names = sorted({f for _, _, f in tallies if f != "TOTAL"}) + ["TOTAL"]
    for arm in arms:
        print(f"\n{arm}")
        print("| file | all cases | outside conventions |\n|---|---|---|")
        for f in names:
            print(f"| {f} | {tallies.get((arm, 'all', f), Tally()).cell()} | "
                  f"{tallies.get((arm, 'outside conventions', f), Tally()).cell()} |")
    print(f"\nconvention differences skipped ({len(conventions)}); non-literal cases not read: {non_literal}")
    for case, name, why in conventions:
        print(f"- {case.file}:{case.line} {name}: {why}")
    for case, kind in misses[: args.show]:
        print(f"{kind} {case.file}:{case.line} gold={case.gold!r} pred={case.pred[-200:]!r}")


if __name__ == "__main__":
    main()
