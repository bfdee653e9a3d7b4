"""Table-driven tests of answer normalization, the safe evaluator and equivalence."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from rft.reward import equality
from rft.reward.equality import answers_equal, compare_fast, normalize_answer, split_sequence
from rft.reward.latex_value import latex_value, values_equal

# (raw answer, normalized form)
NORMALIZATION = [
    ("$42$", "42"),
    ("\\(42\\)", "42"),
    ("\\[42\\]", "42"),
    ("42.", "42"),
    ("\\text{42}", "42"),
    ("\\textbf{42}", "42"),
    ("\\mathrm{42}", "42"),
    ("\\mathbf{42}", "42"),
    ("\\dfrac{1}{2}", "\\frac{1}{2}"),
    ("\\tfrac{1}{2}", "\\frac{1}{2}"),
    (" 4 2 ", "42"),
    ("1,000,000", "1000000"),
    ("042", "42"),
    ("-007", "-7"),
    ("100", "100"),
    ("0.5", "0.5"),
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("30^\\circ", "30"),
    ("30^{\\circ}", "30"),
    ("30\u00b0", "30"),
    ("50\\%", "50"),
    ("50%", "50"),
    ("\\$5", "5"),
    ("x = 5", "5"),
    ("x=\\frac{1}{2}", "\\frac{1}{2}"),
    ("\\theta = 2\\pi", "2\\pi"),
    ("x \\in [0, 1]", "[0,1]"),
    ("\u22125", "-5"),
    ("1\\,000", "1000"),
    ("1{,}000", "1000"),
    ("5\\text{ cm}", "5"),
    ("12 \\mbox{ apples}", "12"),
    ("\\text{Evelyn}", "Evelyn"),
    ("2\\text{ and }3", "2,3"),
    ("\\pi r^2", "\\pi r^2"),
    ("{7}", "7"),
    ("+5", "5"),
    ("\\displaystyle\\frac{1}{2}", "\\frac{1}{2}"),
    ("\u221a2", "\\sqrt2"),
]


@pytest.mark.parametrize(("raw", "norm"), NORMALIZATION)
def test_normalization(raw: str, norm: str) -> None:
    assert normalize_answer(raw) == norm


# (text, value) for the safe evaluator; None means "cannot decide"
EVALUATOR = [
    ("42", Fraction(42)),
    ("-3", Fraction(-3)),
    ("0.25", Fraction(1, 4)),
    (".5", Fraction(1, 2)),
    ("\\frac{3}{4}", Fraction(3, 4)),
    ("\\frac34", Fraction(3, 4)),
    ("\\frac{1}{2^{99}}", Fraction(1, 2**99)),
    ("2^{10}", Fraction(1024)),
    ("2^{-2}", Fraction(1, 4)),
    ("\\sqrt{16}", Fraction(4)),
    ("\\sqrt[3]{27}", Fraction(3)),
    ("\\sqrt{\\frac{9}{4}}", Fraction(3, 2)),
    ("8^{\\frac{2}{3}}", Fraction(4)),
    ("5!", Fraction(120)),
    ("\\binom{6}{2}", Fraction(15)),
    ("2(3+4)", Fraction(14)),
    ("3\\cdot4", Fraction(12)),
    ("12\\div4", Fraction(3)),
    ("-(2-5)", Fraction(3)),
    ("x+1", None),
    ("\\sin{1}", None),
    ("1/0", None),
    ("10^{10^{10}}", None),
    ("\\sqrt{-1}", None),
    ("(-8)^{\\frac{1}{2}}", None),
    ("{" * 500 + "1" + "}" * 500, None),
    ("(" * 30 + "1" + ")" * 30, Fraction(1)),
    ("1+", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "value"), EVALUATOR)
def test_safe_evaluator(text: str, value: Fraction | None) -> None:
    assert latex_value(text) == value


def test_evaluator_floats() -> None:
    assert latex_value("2\\pi") == pytest.approx(6.283185307179586)
    assert latex_value("\\frac{\\sqrt{3}}{2}") == pytest.approx(0.8660254037844386)
    assert latex_value("-\\infty") == float("-inf")


@pytest.mark.parametrize(("base", "num", "den"), [(2, 2, 3), (Fraction(13, 7), 2, 3), (5, 3, 4), (10, -1, 2)])
def test_a_fractional_power_with_an_irrational_root(base, num: int, den: int) -> None:
    """`b^{p/q}` is b to the p/q, also where the q-th root of b is irrational (not that root to the p/q)."""
    want = float(base) ** (num / den)
    assert latex_value(f"b^{{{num}/{den}}}", {"b": Fraction(base)}) == pytest.approx(want, rel=1e-12)


# Issue 2, reward item 4, bullet by bullet: (bullet, [(pred, gold) that must match], [(pred, gold) that must not]).
NORMALIZATION_BULLETS = [
    ("enclosing $..$ / \\(..\\)", [("$42$", "42"), ("\\(42\\)", "42"), ("\\[\\frac{1}{2}\\]", "0.5")],
     [("$42$", "4"), ("\\(42\\)", "24")]),
    ("trailing periods", [("42.", "42"), ("\\frac{1}{2}.", "0.5")], [("42.5", "42"), ("4.2", "42")]),
    ("text/textbf/mathrm/mathbf wrappers",
     [("\\text{42}", "42"), ("\\textbf{42}", "42"), ("\\mathrm{42}", "42"), ("\\mathbf{42}", "42")],
     [("\\text{43}", "42"), ("\\textbf{7}", "1"), ("\\mathrm{4}2", "4")]),
    ("dfrac/tfrac -> frac", [("\\dfrac{1}{2}", "\\frac{1}{2}"), ("\\tfrac{3}{4}", "0.75")],
     [("\\dfrac{2}{1}", "\\frac{1}{2}"), ("\\tfrac{1}{3}", "0.3")]),
    ("whitespace", [(" 42 ", "42"), ("2 \\pi", "2\\pi")], [("1 2", "1,2"), ("\\pi r", "\\pi")]),
    ("thousands commas", [("1,000", "1000"), ("12,345,678", "12345678")],
     [("5,7", "57"), ("1,2", "12"), ("1,000", "1"), ("1,00", "100")]),
    ("leading zeros", [("042", "42"), ("007", "7"), ("00", "0")], [("0.42", "42"), ("042", "0.42"), ("0", "10")]),
    ("left/right", [("\\left(1,2\\right)", "(1,2)"), ("\\left[0,1\\right)", "[0,1)")],
     [("\\left(1,2\\right)", "\\left[1,2\\right]"), ("\\left(1,2\\right)", "(2,1)")]),
    ("degree signs", [("30^\\circ", "30"), ("30^{\\circ}", "30"), ("30\u00b0", "30")],
     [("30^\\circ", "60"), ("30^2", "30"), ("30^{\\circ}", "3")]),
    ("percent", [("50\\%", "50"), ("50%", "50")], [("50\\%", "0.5"), ("50\\%", "5")]),
    ("dollar signs", [("\\$18", "18"), ("\\$1,800", "1800")], [("\\$18", "1.8"), ("\\$1,800", "18")]),
    ("x = 5 -> 5", [("x = 5", "5"), ("x=\\frac{1}{2}", "0.5"), ("n = 7", "n=7")],
     [("x = 5", "x = 6"), ("x = 5", "-5"), ("x \\le 5", "5"), ("x > 5", "5")]),
    ("unicode minus", [("\u22125", "-5"), ("\u2212 5", "-5")], [("\u22125", "5"), ("\u2212 5", "5")]),
    ("1\\,000", [("1\\,000", "1000"), ("1{,}000", "1000")], [("1\\,000", "1"), ("1\\,000", "(1,0)")]),
    ("relative numeric tolerance",
     [("\\frac{\\pi}{10^{7}}", "10^{-7}\\pi"), ("2\\sqrt{2}", "\\sqrt{8}"), ("1e-7", "1e-7")],
     [("10^{-7}\\pi", "2\\cdot10^{-7}\\pi"), ("\\frac{\\pi}{2^{99}}", "\\frac{\\pi}{2^{98}}"),
      ("0.0000001", "0.0000002"), ("1000000000001", "1000000000000"), ("\\sqrt{2}", "1.41"), ("0", "1e-300")]),
]  # fmt: skip


def test_relative_tolerance() -> None:
    assert not values_equal(1e-7, 2e-7)
    assert not values_equal(Fraction(1, 2**99), Fraction(1, 2**98))
    assert not values_equal(2.0**-99, 2.0**-98)
    assert values_equal(1e-7, 1e-7 * (1 + 1e-9))
    assert values_equal(1e12, 1e12 + 1)
    assert not values_equal(0.0, 1e-300)
    assert values_equal(float("inf"), float("inf"))


# (prediction, gold): must be judged equal
MUST_MATCH = [
    ("42", "42"),
    ("042", "42"),
    ("42.0", "42"),
    ("$42$", "42"),
    ("\\text{42}", "42"),
    ("42.", "42"),
    ("1,000", "1000"),
    ("1\\,000", "1000"),
    ("\u22125", "-5"),
    ("x = 5", "5"),
    ("50\\%", "50"),
    ("\\$18", "18"),
    ("30^\\circ", "30"),
    ("\\dfrac{1}{2}", "\\frac{1}{2}"),
    ("\\frac12", "\\frac{1}{2}"),
    ("1/2", "\\frac{1}{2}"),
    ("0.5", "\\frac{1}{2}"),
    ("\\frac{2}{4}", "\\frac{1}{2}"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}"),
    ("\\sqrt{12}", "2\\sqrt{3}"),
    ("2\\pi", "2 \\pi"),
    ("\\pi \\cdot 2", "2\\pi"),
    ("\\left(1, 2\\right)", "(1,2)"),
    ("(1, 2)", "(1,2)"),
    ("(0.5, 2)", "(\\frac{1}{2}, 2)"),
    ("[0, \\infty)", "[0,\\infty)"),
    ("(-\\infty, 3]", "(-\\infty,3]"),
    ("\\{3, 1, 2\\}", "\\{1,2,3\\}"),
    ("3, -2", "-2, 3"),
    ("5\\text{ cm}", "5"),
    ("\\textbf{Evelyn}", "\\text{evelyn}"),
    ("2^{10}", "1024"),
    ("1e-7", "1e-7"),
    ("\\frac{1}{2^{99}}", "2^{-99}"),
    ("x^2+2x+1", "(x+1)^2"),
    ("\\sin x", "\\sin(x)"),
]

# (prediction, gold): must be judged different
MUST_NOT_MATCH = [
    ("41", "42"),
    ("420", "42"),
    ("4.2", "42"),
    ("-42", "42"),
    ("0.33", "\\frac{1}{3}"),
    ("\\frac{1}{3}", "0.3333"),
    ("3.14", "\\pi"),
    ("0.0000001", "0.0000002"),
    ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}"),
    ("(1, 2)", "(2, 1)"),
    ("(1, 2)", "[1, 2]"),
    ("[0, \\infty)", "(0, \\infty)"),
    ("(1, 2, 3)", "(1, 2)"),
    ("12", "(1, 2)"),
    ("\\{1, 2\\}", "\\{1, 3\\}"),
    ("2\\pi", "\\pi"),
    ("\\sqrt{2}", "2"),
    ("none", "5"),
    ("yes", "no"),
    ("", "5"),
    ("1000", "100"),
    ("10^{10^{10}}", "1"),
    ("x^2+1", "(x+1)^2"),
]


def verdicts(match: list[tuple[str, str]], differ: list[tuple[str, str]]) -> list[tuple[str, str, bool]]:
    """(pred, gold, equal) rows of a must-match and a must-not-match table."""
    return [(p, g, True) for p, g in match] + [(p, g, False) for p, g in differ]


@pytest.mark.parametrize(("pred", "gold", "equal"), verdicts(MUST_MATCH, MUST_NOT_MATCH))
def test_must_match_and_must_not_match(pred: str, gold: str, equal: bool) -> None:
    assert answers_equal(pred, gold) is equal


def test_none_never_matches() -> None:
    assert not answers_equal(None, "5") and not answers_equal("5", None)


@pytest.mark.parametrize(
    ("pred", "gold"),
    [p for p in MUST_MATCH + MUST_NOT_MATCH if not any(s in p[0] + p[1] for s in ("x", "\\sin", "10^{10^"))],
)
def test_fast_path_decides_constant_answers(pred: str, gold: str, monkeypatch) -> None:
    """Constant answers never reach math-verify: the symbolic backend raises if called."""
    import rft.reward.symbolic

    def boom(*_args):
        raise AssertionError("symbolic path reached for a constant answer")

    monkeypatch.setattr(rft.reward.symbolic, "symbolic_equal", boom)
    answers_equal(pred, gold)


def test_symbolic_only_when_fast_path_undecided(monkeypatch) -> None:
    import rft.reward.symbolic

    seen: list[tuple[str, str]] = []

    def record(p: str, g: str) -> bool:
        seen.append((p, g))
        return True

    monkeypatch.setattr(rft.reward.symbolic, "symbolic_equal", record)
    assert answers_equal("\\sin x + 1", "1 + \\sin x")
    assert not answers_equal("7", "8") and answers_equal("\\frac{14}{2}", "7")
    assert answers_equal("x^2 + 1", "1 + x^2") and not answers_equal("x^2", "x^3")
    assert seen == [("\\sin x+1", "1+\\sin x")]


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("(1,2)", ("(", ["1", "2"], ")")),
        ("[0,\\infty)", ("[", ["0", "\\infty"], ")")),
        ("\\{1,(2,3)\\}", ("\\{", ["1", "(2,3)"], "\\}")),
        ("1,2", ("", ["1", "2"], "")),
        ("(5)", None),
        ("(1,2", None),
        ("\\frac{1,2}{3}", None),
        # escaped braces nest: a set inside a set or a tuple is one item
        ("\\{\\{1,2\\},3\\}", ("\\{", ["\\{1,2\\}", "3"], "\\}")),
        ("(\\{1,2\\},3)", ("(", ["\\{1,2\\}", "3"], ")")),
        ("\\{1,\\{2,\\{3,4\\}\\}\\}", ("\\{", ["1", "\\{2,\\{3,4\\}\\}"], "\\}")),
        ("1,\\{2,3\\}", ("", ["1", "\\{2,3\\}"], "")),
        ("\\{5\\}", ("\\{", ["5"], "\\}")),  # a one-element set is a set
        ("(\\{1,2,3)", None),  # unbalanced escaped brace
        ("(1,2\\})", None),
        ("\\{1,2", None),
        ("1,2\\}", None),
        ("X,1)", None),
        ("(1,2X", None),
        ("5", None),
        # outer brackets that close early: a bare list of bracketed items
        ("\\{1,2\\},\\{3\\}", ("", ["\\{1,2\\}", "\\{3\\}"], "")),
        ("(1,2),(3,4)", ("", ["(1,2)", "(3,4)"], "")),
        ("[0,1),[2,3]", ("", ["[0,1)", "[2,3]"], "")),
        ("(1)(2)", None),
        ("(((1,2),3),4)", ("(", ["((1,2),3)", "4"], ")")),  # groups nest to any depth
        ("\\{1\\}\\{2\\}", None),
    ],
)
def test_split_sequence(text: str, parts) -> None:
    assert split_sequence(text) == parts


@pytest.mark.parametrize(
    ("pred", "gold", "verdict"),
    [
        ("x+1", "1+x", True),
        ("(x+1)^2", "x^2+2x+1", True),
        ("\\frac{x^2-1}{x-1}", "x+1", True),
        ("\\frac{1}{x}+\\frac{1}{y}", "\\frac{x+y}{xy}", True),
        ("\\pi r^2", "r^2\\pi", True),
        ("\\sqrt{x^2}", "x", True),
        ("x^2+1", "x^2-1", False),
        ("2x", "x+y", None),
        ("\\sin x", "\\sin(x)", None),
        ("xyz", "zyx", False),  # prose-like: compared as words
        ("listen", "silent", False),
        ("a_1+1", "1+a_1", None),
        ("(x,1)", "(x,2)", False),
        ("5", "5", True),
    ],
)
def test_compare_fast_with_variables(pred: str, gold: str, verdict) -> None:
    assert compare_fast(normalize_answer(pred), normalize_answer(gold)) is verdict


def test_answer_length_is_capped() -> None:
    assert len(normalize_answer("1" * 100_000)) <= equality.MAX_ANSWER_CHARS


# Issue 14: answer formats the reward misread, family by family: (family, [(pred, gold) that must match],
# [(pred, gold) that must not]). Each family is a general rule, with neighbours of the reported case.
MISREAD_FAMILIES = [
    ("mixed numbers: integer + proper fraction is a sum, not a product",
     [("2\\frac{1}{2}", "\\frac{5}{2}"), ("2\\dfrac{1}{2}", "2.5"), ("-2\\frac12", "-\\frac{5}{2}"),
      ("3 \\tfrac{3}{4}", "3.75"), ("2 1/2", "5/2"), ("2\u00bd", "2.5"), ("7\\frac{1}{3}\\text{ cups}", "\\frac{22}{3}"),
      ("x = 1\\frac{1}{4}", "1.25")],
     [("2\\frac{1}{2}", "1"), ("2\\frac{1}{2}", "2"), ("2 1/2", "10.5"), ("2\u00bd", "1"),
      ("2\\frac{3}{2}", "3.5"), ("2\\frac{\\sqrt{3}}{2}", "2.5"), ("2\\frac{1}{2}\\pi", "2.5")]),
    ("repeating decimals: a marked repeating block is the exact rational",
     [("0.\\overline{3}", "\\frac{1}{3}"), ("0.1\\overline{6}", "\\frac{1}{6}"), ("0.\\overline{142857}", "\\frac17"),
      ("1.\\overline{3}", "\\frac{4}{3}"), ("0.\\bar{3}", "1/3"), ("0.(6)", "\\frac{2}{3}"), ("0.333\\ldots", "\\frac13"),
      ("0.1666...", "\\frac{1}{6}"), ("0.\\dot{4}", "\\frac{4}{9}")],
     [("0.\\overline{3}", "0.3"), ("0.\\overline{3}", "0.33"), ("0.\\overline{12}", "\\frac{1}{12}"),
      ("0.3", "\\frac{1}{3}"), ("0.12...", "\\frac{4}{33}"), ("0.1\\overline{6}", "\\frac{1}{60}")]),
    ("units after a value, with an exponent or a per-unit, are not part of it",
     [("12 \\text{ cm}^2", "12"), ("12\\,\\text{cm}^{2}", "12"), ("8 \\mathrm{m}^3", "8"), ("5\\text{ m/s}^2", "5"),
      ("5\\,\\mathrm{m}/\\text{s}^{2}", "5"), ("12 cm^2", "12"), ("36 \\text{ square units}", "36"),
      ("\\frac{1}{2}\\text{ cm}^2", "0.5")],
     [("12 \\text{ cm}^2", "144"), ("12^2", "12"), ("2x^2", "2"), ("12 \\text{ cm}^2", "1"), ("3 m^2", "3")]),
    ("money with thousands separators",
     [("\\$1,250", "1250"), ("\\$1,250.50", "1250.5"), ("$1{,}250", "1250")],
     [("\\$1,250", "125"), ("\\$1,250", "1.25"), ("\\$1,250.50", "1250")]),
    ("an answer stated in words: one number in a sentence, a set named in words",
     [("\\text{There are 5 ways}", "5"), ("\\text{There are five ways.}", "5"), ("\\textbf{12 students}", "12"),
      ("\\text{all real numbers}", "(-\\infty, \\infty)"), ("\\text{All real numbers}", "\\mathbb{R}"),
      ("x \\in \\mathbb{R}", "(-\\infty,\\infty)"), ("\\text{no solution}", "\\emptyset"), ("\\varnothing", "\\emptyset")],
     [("\\text{There are 5 ways}", "6"), ("\\text{5 or 6}", "5"), ("\\text{between 2 and 3}", "2"),
      ("\\text{not 5}", "5"), ("\\text{all real numbers except 2}", "\\mathbb{R}"),
      ("\\text{all positive real numbers}", "(-\\infty,\\infty)"), ("\\text{no solution}", "0"),
      ("\\text{There are 5 ways}", "(-\\infty,\\infty)")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "pred", "gold", "equal"),
    [(r, p, g, True) for r, yes, _ in NORMALIZATION_BULLETS + MISREAD_FAMILIES for p, g in yes]
    + [(r, p, g, False) for r, _, no in NORMALIZATION_BULLETS + MISREAD_FAMILIES for p, g in no],
)
def test_normalization_rules_and_misread_families(rule: str, pred: str, gold: str, equal: bool) -> None:
    assert answers_equal(pred, gold) is equal, rule



# Tuples, intervals and sets whose elements only math-verify can decide (`\sin x` vs `\sin(x)`): the fast path
# must answer "undecided" for such an element, never "equal", and the bracket kind must still decide.
SEQUENCE_MUST_MATCH = [
    ("(\\sin x, 2)", "(\\sin(x), 2)"),
    ("[\\sin x, 2)", "[\\sin(x), 2)"),
    ("(2, \\sin x)", "(2, \\sin(x))"),
    ("\\{\\sin x, 2\\}", "\\{2, \\sin(x)\\}"),
    ("\\{\\sin x, \\cos x\\}", "\\{\\cos(x), \\sin(x)\\}"),
    ("\\sin x, 2", "2, \\sin(x)"),
    ("(x+1, 2)", "(1+x, 2)"),
]
SEQUENCE_MUST_NOT_MATCH = [
    ("(\\sin x, 2)", "(\\cos x, 2)"),
    ("(2, \\sin x)", "(2, \\cos x)"),
    ("[\\sin x, 2)", "[\\cos x, 2)"),
    ("(\\sin x, \\cos x)", "(\\cos x, \\sin x)"),  # a tuple is ordered
    ("\\{\\sin x, 2\\}", "\\{2, \\cos x\\}"),
    ("\\sin x, 2", "2, \\cos x"),
    ("(\\sin x, 2)", "(\\sin x, 3)"),
    ("[\\sin x, 2)", "(\\sin(x), 2)"),  # closed vs open end
    # a set or a bare list is not a tuple, in either direction, even with the same elements in order
    ("\\{2, 1\\}", "(1, 2)"),
    ("\\{1, 2\\}", "(1, 2)"),
    ("(1, 2)", "\\{2, 1\\}"),
    ("2, 1", "(1, 2)"),
    ("1, 2", "(1, 2)"),
    ("(2, 1)", "1, 2"),
    ("\\{1, 2\\}", "[1, 2]"),
    ("\\{\\sin x, 2\\}", "(2, \\sin x)"),
    ("\\{2, \\sin x\\}", "(2, \\sin x)"),
]


@pytest.mark.parametrize(("pred", "gold", "equal"), verdicts(SEQUENCE_MUST_MATCH, SEQUENCE_MUST_NOT_MATCH))
def test_sequences_with_symbolic_elements(pred: str, gold: str, equal: bool) -> None:
    assert answers_equal(pred, gold) is equal and answers_equal(gold, pred) is equal


@pytest.mark.parametrize(
    ("pred", "gold", "verdict"),
    [
        ("(\\sin x,2)", "(\\cos x,2)", None),  # one element undecided: the whole tuple is undecided
        ("(2,\\sin x)", "(2,\\cos x)", None),
        ("\\{\\sin x,2\\}", "\\{2,\\cos x\\}", None),
        ("(\\sin x,2)", "(\\cos x,3)", False),  # one element decided unequal: unequal
        ("\\{1,2\\}", "(1,2)", False),
        ("1,2", "(1,2)", False),
        ("\\{1,2\\}", "2,1", True),  # a set and a bare list are both unordered
        ("(1,2)", "(1,2,3)", False),
    ],
)
def test_compare_fast_on_sequences_never_guesses(pred: str, gold: str, verdict) -> None:
    assert compare_fast(pred, gold) is verdict and compare_fast(gold, pred) is verdict


@pytest.mark.parametrize(
    ("pred", "gold", "equal"),
    [
        ("\\{\\{1,2\\},\\{3\\}\\}", "\\{\\{3\\},\\{2,1\\}\\}", True),  # sets of sets, in any order
        ("\\{\\{1,2\\},\\{3\\}\\}", "\\{\\{1,3\\},\\{2\\}\\}", False),
        ("(\\{1,2\\},3)", "(\\{2,1\\},3)", True),
        ("(\\{1,2\\},3)", "(3,\\{1,2\\})", False),
        ("\\{5\\}", "5", False),  # a set is not its element
        ("\\{1,2\\},\\{3\\}", "\\{2,1\\},\\{3\\}", True),  # a list of two sets is not a set of three items
        ("\\{1,2\\},\\{3\\}", "\\{1,2,3\\}", False),
        ("\\{1,2\\},\\{3\\}", "\\{3\\},\\{1,2\\}", True),  # a bare list (several answers) is unordered
        ("(1,2),(3,4)", "(3,4),(1,2)", True),
        ("(1,2),(3,4)", "(1,2),(4,3)", False),  # its items keep their own kind: tuples stay ordered
        ("(1,2),(3,4)", "(1,2,3,4)", False),
    ],
)
def test_nested_sequences(pred: str, gold: str, equal: bool) -> None:
    assert answers_equal(pred, gold) is equal


def test_a_missing_answer_or_label_is_never_equal() -> None:
    assert answers_equal(None, "5") is False and answers_equal("5", None) is False and answers_equal(None, None) is False


def test_undecided_stays_undecided() -> None:
    # the fast path cannot compare trigonometric items: without the symbolic checker that is "not shown equal"
    assert answers_equal("\\sin x", "\\cos x", symbolic=False) is False
    # an unordered comparison with an undecidable pair is undecided, not "different", even if a later pair differs
    assert compare_fast(normalize_answer("\\{3, \\sin x\\}"), normalize_answer("\\{\\cos x, 4\\}")) is None



# Normalization heuristics, rule by rule: (rule, [(pred, gold) that must match], [(pred, gold) that must not]).
HEURISTIC_FAMILIES = [
    ("a decimal ending in `...`: a digit three times or a block twice repeats; anything less is cut off",
     [("0.1212...", "\\frac{4}{33}"), ("0.142857142857...", "\\frac{1}{7}"), ("0.16666...", "\\frac{1}{6}"),
      ("1.333...", "\\frac{4}{3}"), (".333...", "\\frac{1}{3}"), ("0.1\\dot6", "\\frac{1}{6}"),
      ("2.71828...", "2.71828"), ("3.14159...", "3.14159"), ("0.1234...", "0.1234")],
     [("0.66...", "\\frac{2}{3}"), ("0.4166...", "\\frac{5}{12}"), ("0.1234...", "\\frac{34}{99}"),
      ("0.12345671234567...", "\\frac{1234567}{9999999}"), ("2.71828...", "2"), ("0.16666...", "\\frac{2}{3}")]),
    ("unit words in a text wrapper after a value that ends in a symbol",
     [("4\\pi \\text{ cm}", "4\\pi"), ("2\\pi\\text{ cm}", "2\\pi"), ("9\\pi \\mbox{ square units}", "9\\pi"),
      ("6\\pi \\text{ laps}", "6\\pi"), ("2\\pi r \\text{ meters}", "2\\pi r")],
     [("4\\pi \\text{ cm}", "4"), ("9\\pi \\mbox{ square units}", "9")]),
    ("an unclosed wrapper is dropped, its content kept", [("\\textbf{12", "12"), ("\\text{5", "5")],
     [("\\textbf{12", "1")]),
    ("an integer before a fraction that is not proper (0 < p < q) is a product",
     [("2\\frac{3}{2}", "3"), ("3\\frac{4}{4}", "3"), ("2\\frac{0}{5}", "0")],
     [("2\\frac{3}{2}", "2"), ("3\\frac{4}{4}", "4"), ("2\\frac{0}{5}", "2")]),
    ("number words and set phrases, capitalised or ending a sentence",
     [("\\text{Five ways}", "5"), ("\\text{Twelve}", "12"), ("\\text{No real solutions.}", "\\emptyset"),
      ("\\text{All real X}", "\\mathbb{R}")],
     [("\\text{Five ways}", "6"), ("\\text{3 cats and two dogs}", "3"), ("\\text{3 cats and two dogs}", "2"),
      ("\\sqrt{3} times as long", "3"), ("{}", "\\emptyset"), ("{}", "0")]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "pred", "gold", "equal"),
    [(r, p, g, True) for r, yes, _ in HEURISTIC_FAMILIES for p, g in yes]
    + [(r, p, g, False) for r, _, no in HEURISTIC_FAMILIES for p, g in no],
)
def test_normalization_heuristics(rule: str, pred: str, gold: str, equal: bool) -> None:
    assert answers_equal(pred, gold) is equal, rule


@pytest.mark.parametrize(
    ("a", "b"),
    [("0.1666...", "0.1\\overline{6}"), ("0.333...", "0.\\overline{3}"), ("0.1212...", "0.(12)"), ("{}", "")],
)
def test_one_canonical_form(a: str, b: str) -> None:
    """Two notations of one answer (or of none: an empty TeX group) normalize alike, for the first, cheapest test."""
    assert normalize_answer(a) == normalize_answer(b)


@pytest.mark.parametrize(("raw", "norm"), [("\\Delta t", "\\Delta t"), ("2\\Omega r", "2\\Omega r")])
def test_space_after_a_capitalised_command_is_kept(raw: str, norm: str) -> None:
    assert normalize_answer(raw) == norm


@pytest.mark.parametrize("n", [1, 8, 9, 20, 21, 40])
def test_normalization_has_no_item_cap(n: int) -> None:
    """Every wrapper and every stacked unit is removed, however many the answer holds (within its length cap)."""
    wrapped = "(" + ",".join(f"\\mathrm{{{i}}}" for i in range(n)) + ")"
    assert normalize_answer(wrapped) == "(" + ",".join(str(i) for i in range(n)) + ")"
    assert normalize_answer("12" + "\\mathrm{cm}" * n) == "12"


@pytest.mark.parametrize("letters", [2, 39, 40, 41, 80])
def test_space_after_a_command_of_any_length_is_kept(letters: int) -> None:
    """The space between a command and a letter survives whatever the command's length (`\\pi r`)."""
    cmd = "\\" + "p" * letters
    assert normalize_answer(f"{cmd} r") == f"{cmd} r"
    assert normalize_answer(f"x{'p' * letters} r") == f"x{'p' * letters}r"


@pytest.mark.parametrize("gap", ["\n", "\t", "\n  "])
def test_a_lone_backslash_does_not_fuse_with_the_next_word(gap: str) -> None:
    """A line break `\\\\` before a word keeps one space: `\\b` would be another command."""
    assert normalize_answer(f"1 \\\\{gap}y") == "1\\\\ y"


@pytest.mark.parametrize("gold", ["5", "\\sin x", "x+1", "(1,2)", "\\{1,2\\}", "yes"])
def test_an_empty_answer_is_decided_unequal(gold: str) -> None:
    """An empty answer never reaches math-verify: the fast path decides it, in either argument."""
    assert compare_fast("", gold) is False and compare_fast(gold, "") is False


# Answers with structure (issue 31), family by family: (family, pred, gold, equal). Each family is a rule with
# neighbours that must stay apart.
STRUCTURE_FAMILIES = [
    ("tuples in another order", "(2, 5), (1, 3)", "(1,3),(2,5)", True),
    ("tuples in another order", "(2, 5), (1, 4)", "(1,3),(2,5)", False),
    ("a tuple written twice is one", "(1,3),(2,5),(1, 3)", "(2,5),(1,3)", True),
    ("a tuple is still ordered", "(5, 2)", "(2, 5)", False),
    ("`;` separates items", "-4;0;9", "\\{9, -4, 0\\}", True),
    ("`;` separates coordinates", "(1;-1;2),(0;0;3)", "(0, 0, 3), (1, -1, 2)", True),
    ("`;` separates coordinates", "(1;-1;2)", "(1, 2, -1)", False),
    ("names before a tuple", "(3,8)", "(m,n)=(3,8)", True),
    ("names before a tuple", "(8,3)", "(m,n)=(3,8)", False),
    ("named groups", "(2,9),(4,1)", "a=4,b=1;a=2,b=9", True),
    ("named groups", "(9,2),(4,1)", "a=4,b=1;a=2,b=9", False),
    ("a named ratio", "5:12", "S_{ABC}:S_{ABD}=5:12", True),
    ("a named ratio", "12:5", "S_{ABC}:S_{ABD}=5:12", False),
    ("named values", "7, 11", "AB=7, BC=11", True),
    ("joined by or", "g(t)=2 \\text{ or } g(t)=-3", "-3, 2", True),
    ("joined by and", "x = 4 and x = -\\frac{1}{2}", "\\{-\\frac12, 4\\}", True),
    ("joined by and", "x = 4 and x = -\\frac{1}{3}", "\\{-\\frac12, 4\\}", False),
    ("relations", "k \\geq 3", "k >= 3", True),
    ("relations", "k \\ge 3", "k \\geqslant 3", True),
    ("relations", "k \\leq 3", "k >= 3", False),
    ("relations", "n \\neq 0", "n != 0", True),
    ("relations", "m \\lt 8", "m < 8", True),
    ("relations", "m \\gt 8", "m < 8", False),
    ("an interval and its inequality", "-1 \\le t < 6", "t \\in [-1, 6)", True),
    ("an interval and its inequality", "-1 < t < 6", "t \\in [-1, 6)", False),
    ("an interval and its inequality", "9 \\geq u \\geq 2", "[2, 9]", True),
    ("matrices", "\\begin{bmatrix} 3 & 1 \\\\ 0 & 2 \\end{bmatrix}", "\\begin{pmatrix}3&1\\\\0&2\\end{pmatrix}", True),
    ("matrices", "\\left[\\begin{array}{cc} 3 & 1 \\\\ 0 & 2 \\end{array}\\right]", "\\begin{pmatrix}3&1\\\\0&2\\end{pmatrix}", True),
    ("matrices", "\\begin{pmatrix} 3 & 0 \\\\ 1 & 2 \\end{pmatrix}", "\\begin{pmatrix}3&1\\\\0&2\\end{pmatrix}", False),
    ("matrices", "\\begin{pmatrix} 0.5 \\\\ \\frac{3}{4} \\end{pmatrix}", "\\begin{pmatrix}\\frac12\\\\0.75\\end{pmatrix}", True),
    ("a spaced comma is a list", "41, 208", "41208", False),
    ("a thin space is a thousands separator", "41,\\!208", "41208", True),
    ("a number inside a word is not stated", "XK7Q", "7", False),
    ("a float printed in full", "0.142857142857143", "\\frac{1}{7}", True),
    ("a float printed in full", "0.1428571", "\\frac{1}{7}", False),
]


@pytest.mark.parametrize(("family", "pred", "gold", "equal"), STRUCTURE_FAMILIES)
def test_answers_with_structure(family: str, pred: str, gold: str, equal: bool) -> None:
    assert answers_equal(pred, gold) is equal, family
    assert answers_equal(gold, pred) is equal, family


def test_items_only_math_verify_decides_are_compared_one_by_one() -> None:
    """A matrix whose entries need math-verify: each entry goes to it, not the whole matrix."""
    gold = "\\begin{pmatrix}\\sqrt[3]{y}^2 & 1 \\\\ 0 & \\sin(y)\\end{pmatrix}"
    assert answers_equal("\\begin{pmatrix}y^{2/3} & 1 \\\\ 0 & \\sin(y)\\end{pmatrix}", gold)
    assert not answers_equal("\\begin{pmatrix}y^{3/2} & 1 \\\\ 0 & \\sin(y)\\end{pmatrix}", gold)


@pytest.mark.parametrize(
    "hostile",
    [
        "a" * 900 + "1=2",
        "(" * 400 + "x" + ")" * 400 + "=5",
        "1<" * 300 + "x",
        "1 and " * 150,
        "p=1;" * 200,
        "\\begin{pmatrix}" + "1&" * 400 + "\\end{pmatrix}",
        "S_{" * 200 + "=3",
    ],
)
def test_structure_rules_stay_fast_on_hostile_answers(hostile: str) -> None:
    start = time.perf_counter()
    answers_equal(hostile, hostile[::-1], symbolic=False)
    assert time.perf_counter() - start < 0.5


def test_item_by_item_symbolic_calls_are_bounded(monkeypatch) -> None:
    """Sets of items only math-verify decides: at most MAX_SYMBOLIC_ITEMS calls, not one per pair."""
    from rft.reward import symbolic

    calls = []
    monkeypatch.setattr(symbolic, "symbolic_equal", lambda a, b: calls.append((a, b)) or False)
    items = [f"\\sin({k}y)" for k in range(1, 13)]
    assert not answers_equal("\\{" + ", ".join(items) + "\\}", "\\{" + ", ".join(reversed(items)) + "x\\}")
    assert len(calls) <= equality.MAX_SYMBOLIC_ITEMS + 1  # the items, then at most the whole answers once
