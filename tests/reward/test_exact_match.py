"""The reward: response isolation, Harmony, truncation, grading, schemes, and OpenRLHF's real call path."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rft.fixtures.reward_files import load_reward_module, write_reward_toml
from rft.provenance import REPO_ROOT as ROOT
from rft.reward import exact_match
from rft.reward.exact_match import (
    EXTRA_LOG_KEYS,
    Grade,
    as_tensors,
    as_text,
    batch_rows,
    grade,
    harmony_final,
    harmony_messages,
    isolate_response,
    make_reward_func,
    reward_value,
    safe_grade,
    scored_region,
    user_message,
)
from tests.reward.openrlhf_path import run_through_openrlhf
from tests.reward.prompts import HARMONY_PROMPT, QWEN_PROMPT, harmony

REWARD_FILE = ROOT / "reward_func_em.py"


# ---------------------------------------------------------------------------------------------------
# Response isolation
# ---------------------------------------------------------------------------------------------------

RESPONSE = "3*12 = 36, minus 7 gives \\boxed{29}.<|im_end|>"


@pytest.mark.parametrize(
    ("query", "prompt"),
    [
        (QWEN_PROMPT + RESPONSE, QWEN_PROMPT),  # exact prefix
        ("<|endoftext|>" + QWEN_PROMPT + RESPONSE, QWEN_PROMPT),  # decode added a BOS
        (QWEN_PROMPT[120:] + RESPONSE, QWEN_PROMPT),  # prompt left-truncated by OpenRLHF
        (QWEN_PROMPT.replace("step by step", "step  by\tstep").replace("\n<|im_start|>assistant\n",
                                                                      " \n <|im_start|> assistant \n")
         + RESPONSE, QWEN_PROMPT),  # re-spaced by the tokenizer
        (QWEN_PROMPT.replace("You are", "Ты") .replace("apples", "pears")[:-10] + "assistant\n" + RESPONSE,
         QWEN_PROMPT.replace("apples", "oranges and more")[:-30] + "unrelated"),  # only the chat header helps
    ],
)
def test_isolation_finds_the_response(query: str, prompt: str) -> None:
    assert isolate_response(query, prompt).strip() == RESPONSE


def test_isolation_keeps_prompt_numbers_out() -> None:
    """A prompt full of numbers and a boxed example; the response has no answer: nothing to credit."""
    g = grade(isolate_response(QWEN_PROMPT + "I am not sure.<|im_end|>", QWEN_PROMPT), "12")
    assert (g.has_answer, g.correct) == (False, False)
    q = HARMONY_PROMPT + harmony("thinking", "no idea")
    g = grade(isolate_response(q, HARMONY_PROMPT), "99")
    assert (g.has_answer, g.correct, g.has_boxed) == (False, False, False)


def test_isolation_without_prompt_returns_query() -> None:
    assert isolate_response("abc", "") == "abc"
    assert isolate_response("abc", None) == "abc"


# ---------------------------------------------------------------------------------------------------
# Harmony, truncation, grading
# ---------------------------------------------------------------------------------------------------


def test_harmony_final_message() -> None:
    text = harmony("a \\boxed{1}", "Answer: \\boxed{2}")
    final, offset = harmony_final(text)
    assert final == "Answer: \\boxed{2}" and text[offset:].startswith(final)
    assert harmony_final(harmony("only analysis", None)) == ("", len(harmony("only analysis", None)))


# (response, label, finished, expected (correct, answer, method, has_answer, has_boxed, truncated))
GRADES = [
    # Qwen-style
    ("so \\boxed{29}<|im_end|>", "29", None, (True, "29", "boxed", True, True, False)),
    ("so \\boxed{28}<|im_end|>", "29", None, (False, "28", "boxed", True, True, False)),
    ("The answer is 29.<|im_end|>", "29", None, (True, "29", "phrase", True, False, False)),
    ("36 - 7 = 29<|im_end|><|endoftext|>", "29", None, (True, "29", "last_number", True, False, False)),
    ("Natalia sold 24.\n#### 72<|im_end|>", "72", None, (True, "72", "gsm8k", True, False, False)),
    # Truncated: no end-of-turn text -> no fallback credit; a closed box still counts
    ("36 - 7 = 29 and then", "29", None, (False, None, "none", False, False, True)),
    ("The answer is 29", "29", None, (False, None, "none", False, False, True)),
    ("so \\boxed{29} and more rambling", "29", None, (True, "29", "boxed", True, True, True)),
    ("so \\boxed{29} then \\boxed{\\frac{1}{", "29", None, (False, None, "none", False, False, True)),
    ("done \\boxed{29}<|im_end|>", "29", False, (True, "29", "boxed", True, True, True)),
    ("36 - 7 = 29", "29", True, (True, "29", "last_number", True, False, False)),
    ("The answer is 29.", "29", False, (False, None, "none", False, False, True)),
    ("3 * 12 = 36 apples, 36 - 7 = 29.\n#### 29", "29", False, (False, None, "none", False, False, True)),
    # An unclosed last box marks truncation even with end-of-turn text: no fallback to the phrase before it
    ("The answer is 29. Check: \\boxed{29<|im_end|>", "29", None, (False, None, "none", False, False, True)),
    # Harmony: final channel only
    (harmony("maybe \\boxed{41}", "So \\boxed{42}."), "42", None, (True, "42", "boxed", True, True, False)),
    (harmony("it is \\boxed{42}", "The answer is 41"), "42", None, (False, "41", "phrase", True, False, False)),
    (harmony("it is \\boxed{42}", "I could not finish"), "42", None, (False, None, "none", False, False, False)),
    (harmony("it is \\boxed{42} so 42", None, ""), "42", None, (False, None, "none", False, False, True)),
    (harmony("ok", "42", end=""), "42", None, (False, None, "none", False, False, True)),
    (harmony("ok", "\\boxed{42}", end=""), "42", None, (True, "42", "boxed", True, True, True)),
    (harmony("ok", "\\boxed{42}", end="<|end|>"), "42", None, (True, "42", "boxed", True, True, True)),
    ("<|channel|>final <|constrain|>text<|message|>\\boxed{7}<|return|>", "7", None,
     (True, "7", "boxed", True, True, False)),
    # Harmony decoded without special tokens (skip_special_tokens=True)
    ("analysisMaybe \\boxed{41}.assistantfinalIt is \\boxed{42}.", "42", True, (True, "42", "boxed", True, True, False)),
    # Symbolic labels
    ("\\boxed{\\dfrac{\\sqrt{3}}{2}}<|im_end|>", "\\frac{\\sqrt{3}}{2}", None,
     (True, "\\dfrac{\\sqrt{3}}{2}", "boxed", True, True, False)),
    ("\\boxed{[0, \\infty)}<|im_end|>", "[0,\\infty)", None, (True, "[0, \\infty)", "boxed", True, True, False)),
]


@pytest.mark.parametrize(("response", "label", "finished", "expected"), GRADES)
def test_grade(response: str, label: str, finished: bool | None, expected: tuple) -> None:
    g = grade(response, label, finished=finished)
    assert (g.correct, g.answer, g.method, g.has_answer, g.has_boxed, g.truncated) == expected


def test_boxed_in_final() -> None:
    assert grade("x " * 100 + "\\boxed{3}<|im_end|>", "3").boxed_in_final
    assert not grade("\\boxed{3}" + " then I checked it" * 20 + "<|im_end|>", "3").boxed_in_final
    long_analysis = harmony("think " * 500, "\\boxed{3}")
    assert grade(long_analysis, "3").boxed_in_final


@pytest.mark.parametrize("label", [None, "", "   ", b"", True])
def test_bad_labels_score_and_log(label, caplog, monkeypatch) -> None:
    monkeypatch.setattr(exact_match._warn_label, "count", 0)  # the rate limit counts across tests
    with caplog.at_level(logging.WARNING, logger="rft.reward.exact_match"):
        g = grade("\\boxed{5}<|im_end|>", label)
    assert not g.correct and g.has_answer
    assert any("label" in r.getMessage() for r in caplog.records)


def test_numeric_labels_are_accepted() -> None:
    assert grade("\\boxed{5}<|im_end|>", 5).correct
    assert grade("\\boxed{5}<|im_end|>", "005").correct


HOSTILE = [
    "",
    "x" * 1_000_000,
    "\\boxed{" * 10_000,
    "{" * 10_000 + "}" * 10_000 + "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_001 + "<|im_end|>",
    "}}}{{{\\boxed{1}}}}{{{" * 1000,
    "\\boxed{\\frac{1}{2}",
    bytes(random.Random(0).getrandbits(8) for _ in range(100_000)).decode("latin-1"),
    "the answer is " * 50_000,
    "#### " * 100_000,
    "1," * 300_000,
    harmony("\\boxed{1}" * 10_000, "\\boxed{" * 5000),
    "<|channel|>" * 50_000,
    "\x00\ud800\uffff" * 1000,
]


@pytest.mark.parametrize("response", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
@pytest.mark.parametrize("label", ["5", None, "\\frac{\\sqrt{3}}{2}", "x+1"])
def test_never_raises_never_hangs(response: str, label) -> None:
    fn = make_reward_func("signed")
    start = time.perf_counter()
    out = fn([QWEN_PROMPT + response], [QWEN_PROMPT], [label])
    assert time.perf_counter() - start < 5.0
    assert out["rewards"].shape == (1,) and float(out["rewards"][0]) in (1.0, -1.0, -0.5)


def test_reward_func_survives_missing_and_odd_arguments() -> None:
    fn = make_reward_func()
    out = fn(["\\boxed{1}<|im_end|>", None, b"\\boxed{2}<|im_end|>"], None, None)
    assert out["rewards"].tolist() == [0.0, 0.0, 0.0]
    assert fn([], [], [])["rewards"].shape == (0,)
    out = fn(["p\\boxed{2}<|im_end|>", "p\\boxed{3}<|im_end|>"], ["p"], ["2"])
    assert out["scores"].tolist() == [1.0, 0.0]


# ---------------------------------------------------------------------------------------------------
# Schemes and the OpenRLHF contract
# ---------------------------------------------------------------------------------------------------


def test_schemes() -> None:
    right, wrong, empty = grade("\\boxed{1}<|im_end|>", "1"), grade("\\boxed{2}<|im_end|>", "1"), grade("", "1")
    assert [reward_value(g, "binary") for g in (right, wrong, empty)] == [1.0, 0.0, 0.0]
    assert [reward_value(g, "signed") for g in (right, wrong, empty)] == [1.0, -1.0, -0.5]


def test_scheme_is_read_when_the_file_is_loaded(monkeypatch, tmp_path) -> None:
    """reward_func_em.py takes [reward] scheme from the reward.toml that RFT_REWARD_CONFIG names."""
    path = tmp_path / "reward.toml"
    monkeypatch.setenv("RFT_REWARD_CONFIG", str(path))
    write_reward_toml(path, reward={"scheme": "signed"})
    signed = load_reward_module(REWARD_FILE)
    write_reward_toml(path, reward={"scheme": "binary"})
    binary = load_reward_module(REWARD_FILE)
    args = ([QWEN_PROMPT + "no idea<|im_end|>"], [QWEN_PROMPT], ["29"])
    assert float(signed.reward_func(*args)["rewards"][0]) == -0.5
    assert float(binary.reward_func(*args)["rewards"][0]) == 0.0
    write_reward_toml(path, reward={"scheme": "bogus"})
    with pytest.raises(ValueError, match=r"reward.toml: \[reward\] scheme = 'bogus'"):
        load_reward_module(REWARD_FILE)


QWEN_RESPONSE = "3 boxes of 12 is 36. 36 - 7 = 29.\n\nThe final answer is $\\boxed{29}$.<|im_end|>"
GSM8K_RESPONSE = "3 * 12 = 36 apples. 36 - 7 = 29 apples remain.\n#### 29<|im_end|>"
HARMONY_RESPONSE = harmony("6*7... is it \\boxed{41}? No: 42.", "6 \\times 7 = \\boxed{42}")


def test_openrlhf_loading_and_threaded_calls() -> None:
    """Loaded by file path and called through asyncio.to_thread, as agent.py does."""
    module = load_reward_module(REWARD_FILE)

    async def score(query: str, prompt: str, label: str) -> dict:
        return await asyncio.to_thread(module.reward_func, [query], [prompt], [label])

    async def main() -> list[dict]:
        return await asyncio.gather(
            score(QWEN_PROMPT + QWEN_RESPONSE, QWEN_PROMPT, "29"),
            score(QWEN_PROMPT + GSM8K_RESPONSE, QWEN_PROMPT, "29"),
            score(HARMONY_PROMPT + HARMONY_RESPONSE, HARMONY_PROMPT, "42"),
            score(HARMONY_PROMPT + HARMONY_RESPONSE, HARMONY_PROMPT, "41"),
            score(QWEN_PROMPT + "\\boxed{x^2-1}<|im_end|>", QWEN_PROMPT, "(x-1)(x+1)"),
        )

    results = asyncio.run(main())
    assert [float(r["rewards"][0]) for r in results] == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert [float(r["extra_logs"]["parse_method"][0]) for r in results] == [2.0, 1.0, 2.0, 2.0, 2.0]
    for r in results:
        assert set(r["extra_logs"]) == set(EXTRA_LOG_KEYS)
        for v in [r["rewards"], r["scores"], *r["extra_logs"].values()]:
            assert isinstance(v, torch.Tensor) and v.dtype.is_floating_point and v.shape == (1,)


@pytest.mark.slow
def test_real_openrlhf_executor_and_experience_maker() -> None:
    """The real SingleTurnAgentExecutor loads our file and decodes prompt+response with a real tokenizer;
    the real experience maker turns the result into tensors. Only the vLLM engine is a stand-in."""
    qwen_prompt = QWEN_PROMPT.replace("You are a helpful assistant.", "Current date: 2025-01-01")
    cases = [
        (qwen_prompt, QWEN_RESPONSE, "29", "stop"),
        (qwen_prompt, GSM8K_RESPONSE, "29", "stop"),
        (qwen_prompt, "36 - 7 = 29 and so on and so", "29", "length"),
        (HARMONY_PROMPT, HARMONY_RESPONSE, "42", "stop"),
        (HARMONY_PROMPT, harmony("it is \\boxed{42}", "I give up"), "42", "stop"),
    ]
    results = run_through_openrlhf(REWARD_FILE, cases)
    assert [r["reward"] for r in results] == [[1.0], [1.0], [0.0], [1.0], [0.0]]
    assert [r["info"]["parse_method"] for r in results] == [[2.0], [1.0], [0.0], [2.0], [0.0]]
    assert [r["info"]["truncated_response"] for r in results] == [[0.0], [0.0], [1.0], [0.0], [0.0]]
    for r in results:
        assert set(EXTRA_LOG_KEYS) <= set(r["info"])


def test_grade_dataclass_fields() -> None:
    """The interface other helpers code against."""
    assert list(Grade.__dataclass_fields__) == [
        "correct", "answer", "method", "has_answer", "has_boxed", "boxed_in_final", "truncated", "label_missing",
    ]


@pytest.mark.parametrize("label", [None, "", "  ", False])
def test_a_missing_label_is_counted_in_extra_logs(label) -> None:
    """A row without a usable label scores 0 and says so (label_missing), so the metrics count bad data."""
    g = grade("so \\boxed{7}<|im_end|>", label)
    assert not g.correct and g.extra_logs()["label_missing"] == 1.0
    assert grade("so \\boxed{7}<|im_end|>", "7").extra_logs()["label_missing"] == 0.0


def test_loads_from_a_checkout_without_install(tmp_path: Path) -> None:
    """`python -S` hides site-packages (and our installed package): the file finds `rft/` beside itself."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('reward_func', {str(REWARD_FILE)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "import json; cases = json.loads(sys.argv[1])\n"
        "print([float(m.reward_func([q], [p], [lab])['rewards'][0]) for p, q, lab in cases])\n"
    )
    cases = [
        (QWEN_PROMPT, QWEN_PROMPT + QWEN_RESPONSE, "29"),
        (QWEN_PROMPT, QWEN_PROMPT + GSM8K_RESPONSE, "29"),
        (HARMONY_PROMPT, HARMONY_PROMPT + HARMONY_RESPONSE, "42"),
        (HARMONY_PROMPT, HARMONY_PROMPT + HARMONY_RESPONSE, "41"),
    ]
    proc = subprocess.run([sys.executable, "-S", "-c", code, json.dumps(cases)], capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1.0, 1.0, 1.0, 0.0]"


def test_isolation_is_bounded_on_large_mismatched_input(caplog, monkeypatch) -> None:
    monkeypatch.setattr(exact_match._warn_isolation, "count", 0)  # the rate limit counts across tests
    query = "x" * 1_000_000 + " a" * 200_000
    prompt = "y z " * 300 + "w" * 100
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="rft.reward.exact_match"):
        assert len(isolate_response(query, prompt)) == len(query) - len(prompt)
    assert time.perf_counter() - start < 1.0
    assert any("could not locate the prompt" in r.getMessage() for r in caplog.records)


# Truncated responses earn credit only from a closed box: each fallback form below is credited when the response
# ended on its own, and earns nothing (no answer at all) when generation hit the token limit.
FALLBACK_FORMS = [
    "The answer is 29.",
    "**Final Answer:** 29",
    "3 * 12 = 36, and 36 - 7 = 29",
    "36 apples, 7 eaten.\n#### 29",
    "\\boxed{12}. Wait, that is wrong: the correct answer is 29.",  # a correction after a box is a fallback too
]


@pytest.mark.parametrize("body", FALLBACK_FORMS)
def test_truncated_responses_get_no_fallback_credit_through_grade(body: str) -> None:
    done = grade(body + "<|im_end|>", "29")
    assert (done.correct, done.answer, done.truncated) == (True, "29", False)
    assert done.method != "boxed"
    for g in (grade(body, "29"), grade(body + "<|im_end|>", "29", finished=False)):
        assert g.truncated and not g.correct and g.method in ("none", "boxed")
        assert g.answer == ("12" if "\\boxed" in body else None)  # only the box may be read
    assert grade(body, "12").correct is ("\\boxed" in body)


@pytest.mark.parametrize("body", FALLBACK_FORMS)
def test_truncated_responses_get_no_fallback_credit_through_reward_func(body: str) -> None:
    """The same rule through OpenRLHF's entry point: rewards, scores and the truncation log, both schemes."""
    queries = [QWEN_PROMPT + body + "<|im_end|>", QWEN_PROMPT + body, QWEN_PROMPT + body + " and then \\boxed{29} so"]
    for scheme, expected in (("binary", [1.0, 0.0, 1.0]), ("signed", [1.0, -1.0 if "\\boxed" in body else -0.5, 1.0])):
        out = make_reward_func(scheme)(queries, [QWEN_PROMPT] * 3, ["29"] * 3)
        assert out["rewards"].tolist() == expected, scheme
        assert out["scores"].tolist() == [1.0, 0.0, 1.0]
        assert out["extra_logs"]["truncated_response"].tolist() == [0.0, 1.0, 1.0]
        assert out["extra_logs"]["has_boxed"].tolist() == [0.0, float("\\boxed" in body), 1.0]


# ----------------------------------------------------------------- isolation when the prompt is not in the query

CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize(
    ("query", "response"),
    [
        # the header after the *last* user turn, not the first assistant turn, not a header the model wrote
        (CHATML.format("A") + "old<|im_end|>\n" + CHATML.format("B") + "new <|im_start|>assistant\nmore", "new <|im_start|>assistant\nmore"),
        (CHATML.format("only") + "R", "R"),  # the user marker at offset 0
        ("<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistantR", "R"),  # no newline after the header
        ("<|start|>user<|message|>Q<|end|><|start|>assistant<|channel|>final<|message|>R", "<|channel|>final<|message|>R"),
    ],  # fmt: skip
)
def test_isolation_falls_back_to_the_header_after_the_last_user_turn(query: str, response: str) -> None:
    # a prompt that matches nothing in the query (re-templated): only the chat markup can place the response
    assert isolate_response(query, "an unrelated prompt text, re-rendered") == response


@pytest.mark.parametrize(
    ("prompt", "query", "response"),
    [
        ("abcd efgh", "abcd  efghRESP", "RESP"),  # 8 characters besides spaces are enough to align
        ("Solve: what is one plus one? Answer in a box.", "Solve:  what is  one plus one?\nAnswer in a box.RESP", "RESP"),
        # a left-truncated, re-spaced prompt: only its last 64 non-space characters are aligned
        ("X" + "y" * 64, "Z" + " y" * 64 + "RESP", "RESP"),
    ],  # fmt: skip
)
def test_isolation_aligns_a_re_spaced_prompt(prompt: str, query: str, response: str) -> None:
    assert isolate_response(query, prompt) == response


T24 = "abcdefghijklmnopqrstuvwx"  # 24 characters


@pytest.mark.parametrize(
    ("prompt", "query", "response"),
    [
        # the whole prompt found after a BOS: its first occurrence ends it, even if the response repeats it
        ("abcdefghij", "Xabcdefghij R abcdefghij S", " R abcdefghij S"),
        # the longest tail found wins over a shorter one that also occurs earlier in the query
        ("H" * 100 + "ZZZZZ" + T24 + "0123456789." + T24, "ZZZZZ" + T24 + "0123456789." + T24 + "R", "R"),
        ("q" + "H" * 232 + T24, "H" * 40 + T24 + "x" + "H" * 232 + T24 + "R", "R"),
        # a left-truncated prompt of which only the last 24 characters survive
        ("m" * 50 + "k" + T24, "j" + T24 + "R", "R"),
        # an 8-character prompt is found as it is, not aligned across spaces to an earlier look-alike
        ("abcdefgh", "Xa b c d e f g h Y abcdefghR", "R"),
        # alignment reads the prompt's last 512 characters: here 7 non-space ones, too few to align on
        ("Q" + " " * 505 + "abcdefg", "Q abcdefgR", ""),
    ],  # fmt: skip
)
def test_isolation_by_the_prompt_tail(prompt: str, query: str, response: str) -> None:
    assert isolate_response(query, prompt) == response


def test_isolation_gives_up_after_the_prompt_length_and_says_so(caplog, monkeypatch) -> None:
    monkeypatch.setattr(exact_match._warn_isolation, "count", 0)
    with caplog.at_level(logging.WARNING, logger="rft.reward.exact_match"):
        assert isolate_response("0123456789", "qqqq") == "456789"
    (record,) = [r for r in caplog.records if "could not locate" in r.getMessage()]
    assert record.getMessage() == (
        "rft.reward.exact_match: could not locate the prompt in the query (query 10 chars, prompt 4 chars); "
        "scoring the text after the first 4 characters [occurrence 1]"
    )


# ----------------------------------------------------------------- what reaches grade: text, labels, regions


def test_as_text_coerces_what_arrives() -> None:
    assert as_text(None) == "" and as_text(5) == "5" and as_text("s") == "s"
    assert as_text(b"\\boxed{5}") == "\\boxed{5}" and as_text(b"5\xff") == "5\ufffd"


def test_byte_labels_are_decoded_leniently() -> None:
    assert grade("\\boxed{5}<|im_end|>", b"5").correct
    g = grade("\\boxed{5}<|im_end|>", b"5\xff")  # an undecodable byte: a wrong label, not a crash
    assert not g.correct and not g.label_missing


@pytest.mark.parametrize(("label", "shown"), [(True, "label is True"), ("   ", "label is empty ('   ')")])
def test_bad_label_log_names_the_label(label, shown: str, caplog, monkeypatch) -> None:
    monkeypatch.setattr(exact_match._warn_label, "count", 0)
    with caplog.at_level(logging.WARNING, logger="rft.reward.exact_match"):
        grade("\\boxed{5}<|im_end|>", label)
    (msg,) = [r.getMessage() for r in caplog.records]
    assert msg.startswith(f"rft.reward.exact_match: {shown}; the sample is scored as having no correct answer")


def test_the_first_end_of_turn_ends_the_content() -> None:
    assert grade("\\boxed{3}<|im_end|>\\boxed{4}<|im_end|>", "3").correct  # what follows the turn is not read
    assert not grade("<|im_end|>\\boxed{4}", "4").has_answer  # an end of turn at offset 0: empty content


def test_scored_region() -> None:
    assert scored_region("abc<|im_end|>def") == ("abc", 0)
    assert scored_region("abcdef", 2) == ("ab", 0)  # a content length given is used as is
    # Harmony decoded without its tokens: after the last `assistantfinal`
    assert scored_region("analysisthink assistantfinal no assistantfinal ANSWER") == (" ANSWER", 46)
    # without the `analysis` start the word is just text
    assert scored_region("the word assistantfinal \\boxed{3}") == ("the word assistantfinal \\boxed{3}", 0)


def test_boxed_in_final_counts_a_box_ending_at_the_fraction() -> None:
    # the box ends at 16 of 20 content characters: exactly BOXED_IN_FINAL_FRACTION
    assert grade("abcdefg\\boxed{3}wxyz<|im_end|>", "3").boxed_in_final
    assert not grade("abcdefg\\boxed{3}wxyz!<|im_end|>", "3").boxed_in_final


def test_user_message_and_harmony_messages() -> None:
    chat = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert user_message(chat) == "What is 2+2?"
    assert user_message("  plain prompt ") == "plain prompt"
    assert user_message("<|start|>user<|message|>Q1<|end|><|start|>assistant") == "Q1"
    two_turns = CHATML.format("first") + "answer<|im_end|>\n" + CHATML.format("second")
    assert user_message(two_turns) == "second"  # the last user turn
    assert user_message(two_turns + "prefill <|im_start|>assistant\n") == "second"
    assert user_message("<|im_start|>user\nHello") == "Hello"  # no assistant header after it
    text = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>\\boxed{4}<|return|>"
    assert harmony_messages(text) == [("analysis", "think"), ("final", "\\boxed{4}")]
    assert harmony_messages("<|channel|>Final<|message|>open") == [("final", "open")]
    assert harmony_messages("no markup") == []


# ----------------------------------------------------------------- the batch as OpenRLHF sees it


def test_batch_rows_pads_missing_prompts_and_labels() -> None:
    assert batch_rows(["q1", "q2"], ["p1"], None) == [("q1", "p1", None), ("q2", "", None)]
    assert batch_rows(["q1"], ["p1", "p2"], ["1", "2"]) == [("q1", "p1", "1")]


def test_as_tensors_keeps_each_row_in_its_place(monkeypatch) -> None:
    out = as_tensors([1.0, 0.0], [0.5, 0.25], {"a": [2.0, 3.0], "b": [4.0, 5.0]})
    assert out["rewards"].tolist() == [1.0, 0.0] and out["scores"].tolist() == [0.5, 0.25]
    assert {k: v.tolist() for k, v in out["extra_logs"].items()} == {"a": [2.0, 3.0], "b": [4.0, 5.0]}
    monkeypatch.setitem(sys.modules, "torch", None)  # without torch: the same keys, plain lists
    assert as_tensors([1.0], [0.5], {"a": [2.0]}) == {"rewards": [1.0], "scores": [0.5], "extra_logs": {"a": [2.0]}}


def test_a_grading_error_is_logged_and_scored_as_no_answer(caplog, monkeypatch) -> None:
    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("boom")

    monkeypatch.setattr(exact_match._warn_error, "count", 0)
    with caplog.at_level(logging.WARNING, logger="rft.reward.exact_match"):
        assert safe_grade("\\boxed{5}<|im_end|>", "", Hostile()) == exact_match.NO_GRADE
    (msg,) = [r.getMessage() for r in caplog.records]
    assert msg == "rft.reward.exact_match: grading failed (RuntimeError: boom); sample scored as no answer [occurrence 1]"


def test_scheme_names() -> None:
    assert make_reward_func("binary").scheme == "binary"
    with pytest.raises(ValueError, match=r"unknown reward scheme 'nope'; use one of \['binary'"):
        make_reward_func("nope")


def test_rate_limited_log_logs_the_first_then_every_nth(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="rft.reward.exact_match"):
        limited = exact_match._RateLimitedLog(first=2, every=3)
        for _ in range(7):
            limited("m %s", "x")
        assert [r.getMessage() for r in caplog.records] == [f"m x [occurrence {n}]" for n in (1, 2, 3, 6)]
        caplog.clear()
        default = exact_match._RateLimitedLog()
        for _ in range(2000):
            default("d")
    assert [r.getMessage() for r in caplog.records] == [f"d [occurrence {n}]" for n in (*range(1, 21), 1000, 2000)]
