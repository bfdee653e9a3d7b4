"""The peer-suite scorer: cases read with `ast` (never run), conventions told apart, agreement counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.bench_peer_suite import Case, convention_of, literal_cases, rft_verdict
from rft.provenance import REPO_ROOT as ROOT

SUITE = '''
import pytest
import math

raise SystemExit("this file must never be imported")


@pytest.mark.parametrize(
    "gold, pred, expected",
    [
        (r"$(a,b)=(2,7)$", r"so \\boxed{(2, 7)}", 1),
        ("$12$", "$13$", 0),
        (f"{math.pi:.3f}", "$3.142$", 1),
        ("$2,5$", "$2.5$", 1),
    ],
)
def test_pairs(gold, pred, expected):
    pass


@pytest.mark.parametrize("gold, pred, strict, result", [("$g(s)$", "$g(t)$", False, 1)])
def test_loose(gold, pred, strict, result):
    pass


@pytest.mark.parametrize("pred, expected", [("A", ["a"])])
def test_other_shape(pred, expected):
    pass
'''


def _suite(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_peer.py").write_text(SUITE, encoding="utf-8")
    return tmp_path


def test_literal_cases_are_read_without_running_the_file(tmp_path: Path) -> None:
    cases, skipped = literal_cases(_suite(tmp_path) / "tests" / "test_peer.py")
    assert skipped == 1  # the f-string case
    assert [(c.gold, c.expected) for c in cases] == [
        ("$(a,b)=(2,7)$", True), ("$12$", False), ("$2,5$", True), ("$g(s)$", True),
    ]
    assert cases[-1].params == (("strict", False),)


def test_conventions_are_told_apart() -> None:
    assert convention_of(Case("f", 1, "$2,5$", "$2.5$", True))[0] == "decimal comma"
    assert convention_of(Case("f", 1, "$g(s)$", "$g(t)$", True, (("strict", False),)))[0] == "non-strict variables"
    assert convention_of(Case("f", 1, "$\\frac{1}{3}$", "$0.33$", True))[0] == "rounded decimal"
    assert convention_of(Case("f", 1, "$\\frac{1}{2}$", "$0.5$", True)) is None  # exact: no convention
    assert convention_of(Case("f", 1, "$(2,5)$", "$2.5$", True)) is None  # a list, not a decimal comma


def test_rft_verdicts() -> None:
    assert rft_verdict(Case("f", 1, "$(a,b)=(2,7)$", "so \\boxed{(2, 7)}", True))
    assert not rft_verdict(Case("f", 1, "$12$", "$13$", False))
    assert rft_verdict(Case("f", 1, "$x \\ge 1$", "Therefore $x >= 1$ holds.", True))


def test_report(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_peer_suite.py"), str(_suite(tmp_path)), "--no-math-verify"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    assert "| test_peer.py | 2/4 = 50.0% (FP 0, FN 2) | 2/2 = 100.0% (FP 0, FN 0) |" in out
    assert "convention differences skipped (2); non-literal cases not read: 1" in out


def test_a_suite_without_tests_is_an_error(tmp_path: Path) -> None:
    got = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_peer_suite.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert got.returncode != 0 and f"no tests/test_*.py under {tmp_path}" in got.stderr
