"""rft.data.problems and rft.prompts: problem identity survives case, whitespace and the instruction suffix."""

from __future__ import annotations

from rft.data.problems import normalize_problem, problem_hash
from rft.prompts import INSTRUCTION, build_input, strip_instruction


def test_hash_ignores_case_whitespace_and_instruction():
    a = "Find  the sum of\n all integers n."
    assert problem_hash(a) == problem_hash("find the sum of all integers N.")
    assert problem_hash(a) == problem_hash(build_input(a))
    assert normalize_problem(build_input(a)) == "find the sum of all integers n."


def test_hash_distinguishes_different_problems():
    assert problem_hash("What is 2+2?") != problem_hash("What is 2+3?")


def test_build_and_strip_are_inverse():
    p = "Compute 7 * 6."
    text = build_input(p)
    assert text.endswith(INSTRUCTION) and "\\boxed{}" in text
    assert strip_instruction(text) == p
    assert strip_instruction(p) == p
