"""Table-driven tests of final-answer extraction: boxes, answer phrases, fallbacks, corrections, long texts."""

from __future__ import annotations

import time

import pytest

from rft.reward import extraction
from rft.reward.extraction import extract_answer, last_box

# (response text, expected answer, expected method)
EXTRACTION = [
    ("so the result is \\boxed{42}.", "42", "boxed"),
    ("first \\boxed{1}, then corrected: \\boxed{2}", "2", "boxed"),
    ("nested \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", "boxed"),
    ("deep \\boxed{\\frac{\\sqrt{3}}{2}} done", "\\frac{\\sqrt{3}}{2}", "boxed"),
    ("set \\boxed{\\{1, 2\\}}", "\\{1, 2\\}", "boxed"),
    ("space form $\\boxed 5$", "5", "boxed"),
    ("space form \\boxed 17.", "17.", "boxed"),
    ("fbox \\fbox{7}", "7", "boxed"),
    ("fbox after boxed \\boxed{3} then \\fbox{9}", "9", "boxed"),
    ("boxed after fbox \\fbox{9} then \\boxed{3}", "3", "boxed"),
    ("empty box last \\boxed{12} as asked: \\boxed{}", "12", "boxed"),
    ("not a box \\boxedx{4} but the answer is 8", "8", "phrase"),
    ("box inside box \\boxed{\\boxed{6}}", "6", "boxed"),
    ("\\boxed{ 2\\pi }", "2\\pi", "boxed"),
    ("The answer is 42.", "42", "phrase"),
    ("the answer is $\\frac{3}{4}$.", "\\frac{3}{4}", "phrase"),
    ("Thus the final answer is: 1,000 apples", "1,000", "phrase"),
    ("**Final Answer:** 17", "17", "phrase"),
    ("**Final Answer**: $x = 3$", "x = 3", "phrase"),
    ("Final Answer: \\(2\\sqrt{2}\\)", "2\\sqrt{2}", "phrase"),
    ("Final answer:\n\n-7", "-7", "phrase"),
    ("The answer is 12 because 3*4=12, wait 5", "12", "phrase"),
    ("The answer is 3. Then again the answer is 4.", "4", "phrase"),
    ("The answer is (1, 2)", "(1, 2)", "phrase"),
    ("to find the answer, we compute 6*7 = 42", "42", "last_number"),
    ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72", "gsm8k"),
    ("#### $1,234", "1,234", "gsm8k"),
    ("We get 3, then 4, then 5.", "5", "last_number"),
    ("x2 and y3 are names; value -12", "-12", "last_number"),
    ("pi is about 3.14159", "3.14159", "last_number"),
    ("half is 1/2", "1/2", "last_number"),
    ("no digits at all", None, "none"),
    ("", None, "none"),
    # must-not: what only looks like a box, a phrase or a GSM8K line
    ("\\boxed", None, "none"),
    ("\\boxed\n5 and then 7", "7", "last_number"),
    ("see \\fboxsep 4 then 8", "8", "last_number"),
    ("use \\boxed{} for the result: 9", "9", "last_number"),
    ("What is the answer? 3 + 4 = 7", "7", "last_number"),
    ("My answer is 5, no wait, 6", "6", "last_number"),
    ("#### Step 2: add the pens\nThe total is 15 pens.", "15", "last_number"),
    ("#### 1. Setting up\n2 + 2 = 4", "4", "last_number"),
    ("#### 72 apples", "72", "gsm8k"),
    ("#### 72.\nDone.", "72", "gsm8k"),
    ("####-5", "-5", "gsm8k"),
    ("#### 5" + " " * 50_000 + "x", "5", "last_number"),
    # issue 14, the extraction families the reward misread
    # money outside a box: `$` as currency is not a math delimiter, `\$` is not a stop
    ("The answer is \\$1,250 total.", "\\$1,250", "phrase"),
    ("The answer is $1,250 for the sofa and $300 for the chair.", "$1,250", "phrase"),
    ("The answer is $1,250$.", "1,250", "phrase"),
    ("The answer is $5 + 3 = 8$.", "5 + 3 = 8", "phrase"),  # a closed math span stays math
    ("#### \\$1,250", "1,250", "gsm8k"),
    ("She pays \\$1,250 in total.", "1,250", "last_number"),
    # an answer stated, then a check that ends on another number
    ("Answer: 42\n\nCheck: 6*7 = 42, and 42/6 = 7.", "42", "phrase"),
    ("**Answer:** 42\nVerification: 42 - 40 = 2", "42", "phrase"),
    ("There are 42 apples.\n\nCheck: 42 - 12 = 30.", "42", "last_number"),
    ("So 42 apples.\nLet's verify: 6 * 7 = 42 and 42 - 6 = 36.", "42", "last_number"),
    ("So 42 apples.\nCheck: 42 - 12 = 30, but it should be 31, so 43.", "43", "last_number"),  # a correcting check
    ("We get 3, then 4, then 5.", "5", "last_number"),
    # a boxed answer explicitly corrected after the box
    ("\\boxed{12}. Wait, that is wrong: the correct answer is 14.", "14", "phrase"),
    ("So \\boxed{12}.\n\nActually, I made an error above; the final answer is $\\frac{7}{2}$.", "\\frac{7}{2}", "phrase"),
    ("\\boxed{12}. Wait, let me double-check: the answer is indeed 12.", "12", "phrase"),
    ("\\boxed{12}. A common mistake is to answer 14.", "12", "boxed"),  # a cue, but no answer stated after it
    ("\\boxed{12}. The answer is 14.", "12", "boxed"),  # no correction cue: the box stands
    ("The answer is 14. Wait, no: \\boxed{12}", "12", "boxed"),
    # a mixed number after an answer phrase is one answer
    ("The answer is 2 1/2 cups.", "2 1/2", "phrase"),
    # extraction fallbacks, heuristic by heuristic
    # display math after an answer phrase is the answer, delimiters and line breaks included
    ("The final answer is:\n$$\\frac{3}{4}$$", "\\frac{3}{4}", "phrase"),
    ("The final answer is:\n\\[\n\\frac{1}{2}\n\\]", "\\frac{1}{2}", "phrase"),
    # a stated answer ends at a connective, also when the response ends right after it
    ("The answer is x+1 and ", "x+1", "phrase"),
    ("The answer is x+1 because ", "x+1", "phrase"),
    # the first closing `$` ends the math span, not the last one in the response
    ("The answer is $12$, since $3 \\times 4 = 12$.", "12", "phrase"),
    # money: `$12` is money only when prose sits between it and the next `$`; `$ 4` (spaced) opens math
    ("The answer is $12 \\pi$, which is about $37.7$.", "12 \\pi", "phrase"),
    ("The answer is $12 \\pi$ square units.", "12 \\pi", "phrase"),
    ("The answer is $ 4 \\sqrt{2} $.", "4 \\sqrt{2}", "phrase"),
    ("The answer is $ 4 \\sqrt{2} \\text{ units}$.", "4 \\sqrt{2} \\text{ units}", "phrase"),
    # a stated answer ends at its sentence; Markdown emphasis around it is not part of it
    ("The answer is \\frac{3}{4}. To check, 3/4 of 8 is 6.", "\\frac{3}{4}", "phrase"),
    ("The answer is **\\frac{1}{2}**.", "\\frac{1}{2}", "phrase"),
    ("Who ran farther? The answer is Xavier.", "Xavier", "phrase"),
    # filler words ("indeed", "thus", "now") before the answer are dropped; the same letters inside it are kept
    ("The answer is, indeed, 12.", "12", "phrase"),
    ("The answer is thus, clearly, $\\frac{7}{2}$.", "\\frac{7}{2}", "phrase"),
    ("Who is taller? The answer is Snow White.", "Snow White", "phrase"),
    ("The answer is just Snow White.", "Snow White", "phrase"),
    # a bare number response, its sign included
    ("-12", "-12", "last_number"),
    # a check after an answer stated first, at the very start of the response
    ("18\n\nCheck: 18 / 3 = 6.", "18", "last_number"),
    # a correction before the check does not make the check a correction
    ("Wait, I made an error earlier. Recomputing: 6 * 7 = 42.\n\nCheck: 42 - 12 = 30.", "42", "last_number"),
    # a "Checking ..." heading with no number before it opens no verification section; a later one does
    ("Checking each case:\n- case a: 3 ways\n- case b: 9 ways\nTotal: 12.\n\nVerification: 12 - 3 = 9.", "12",
     "last_number"),
    # the last-number fallback takes the whole math span around that number when the span states a relation, a
    # matrix or a tuple, and only then (`$6 \times 7 = 42$` still gives 42).
    ("Solving, we need $y \\leq -3$ here.", "y \\leq -3", "last_number"),
    ("We find \\(t \\neq 4\\).", "t \\neq 4", "last_number"),
    ("The inverse is $\\begin{bmatrix} 2 & 0 \\\\ 0 & 5 \\end{bmatrix}$.", "\\begin{bmatrix} 2 & 0 \\\\ 0 & 5 \\end{bmatrix}", "last_number"),
    ("so the point is $(4, -9)$. Done", "(4, -9)", "last_number"),
    ("so $6 \\times 7 = 42$", "42", "last_number"),
    # a final-answer phrase after a step's box
    ("$3 \\cdot 85 = \\boxed{255}$ for the interest, in all 10,255. The final answer is $10,255$.", "10,255", "phrase"),
    ("\\boxed{12 and 13}. The final answer is \"12 and 13\".", "12 and 13", "boxed"),  # not a plain number
    ("\\boxed{7}. The answer is 7, so the total is 9.", "7", "boxed"),  # "the answer", not "the final answer"
    # a line-initial answer word before a math span
    ("Answer \\( 2^{5} \\)", "2^{5}", "phrase"),
    ("so we are done.\n**Final Answer** $\\frac{7}{3}$", "\\frac{7}{3}", "phrase"),
    ("The answer \\(x\\) must be odd, and x = 9", "9", "last_number"),  # not at a line start: no phrase
]  # fmt: skip


@pytest.mark.parametrize(("text", "answer", "method"), EXTRACTION)
def test_extraction(text: str, answer: str | None, method: str) -> None:
    got = extract_answer(text)
    assert (got.answer, got.method) == (answer, method)


def test_unclosed_last_box_is_not_an_answer() -> None:
    got = extract_answer("first \\boxed{3}, finally \\boxed{\\frac{1}{")
    assert got.answer is None and got.method == "none" and got.box is not None and not got.box.closed


def test_box_offsets_cover_the_box() -> None:
    text = "ab \\boxed{1{2}3} cd"
    box = last_box(text)
    assert box is not None and text[box.start : box.end] == "\\boxed{1{2}3}"


@pytest.mark.parametrize(
    "text",
    ["\\boxed{" * 10_000, "{" * 10_000 + "\\boxed{" + "{" * 10_000 + "}" * 9_999, "}" * 5000 + "\\boxed{1}}}}"],
)
def test_extraction_survives_deep_and_unbalanced_braces(text: str) -> None:
    start = time.perf_counter()
    extract_answer(text)
    assert time.perf_counter() - start < 1.0


def test_extraction_is_fast_on_a_megabyte() -> None:
    text = ("lorem ipsum 12 dolor " * 50_000)[:1_000_000] + " the answer is 7"
    start = time.perf_counter()
    assert extract_answer(text).answer == "7"
    assert time.perf_counter() - start < 1.0

def test_truncated_box_is_not_overridden_by_a_correction() -> None:
    """Without fallbacks (a truncated response) the box stands: the correction may itself be cut off."""
    got = extract_answer("\\boxed{12}. Wait, that is wrong: the answer is 1", fallbacks=False)
    assert (got.answer, got.method) == ("12", "boxed")

@pytest.mark.parametrize(
    ("text", "box"),
    [
        # (text, Box(content, start, closed, end)): offsets are those of the box in the text
        ("ab \\boxed{7} cd", extraction.Box("7", 3, True, 12)),
        ("ab \\boxed 5 cd", extraction.Box("5", 3, True, 11)),
        ("ab \\boxed  17$ cd", extraction.Box("17", 3, True, 13)),
        ("ab \\boxed XY cd", extraction.Box("XY", 3, True, 12)),
        ("ab \\boxed{\\frac{1}{", extraction.Box(None, 3, False, 19)),  # unclosed: runs to the end
        ("ab \\boxed  ", extraction.Box(None, 3, False, 11)),
        ("\\boxed{4} then \\boxed{", extraction.Box(None, 15, False, 22)),  # an unclosed last box is the last box
        ("\\boxed{4} and finally \\boxed", extraction.Box(None, 22, False, 28)),
        # a `\boxed` whose argument is no TeX token (a newline, a `$`) is skipped
        ("\\boxed{4} then \\boxed \n", extraction.Box("4", 0, True, 9)),
        ("\\boxed{4} then \\boxed $x$", extraction.Box("4", 0, True, 9)),
        ("\\boxed5 and \\boxed{6}", extraction.Box("6", 12, True, 21)),
        ("\\boxed{6} and \\boxed5", extraction.Box("6", 0, True, 9)),  # `\boxed5` (no space) is not a box here
    ],
)
def test_last_box_fields(text: str, box) -> None:
    got = last_box(text)
    assert got == box
    assert got.closed is box.closed

def _long_steps(chars: int) -> str:
    """A step-by-step explanation of about `chars` characters, with a number on every line."""
    lines, n = [], 0
    while sum(map(len, lines)) + len(lines) < chars:
        n += 1
        lines.append(f"Step {n}: add {n % 7 + 2} apples to the basket, which now holds more.")
    return "\n".join(lines)


@pytest.mark.parametrize("explanation_chars", [4_050, 4_150, 6_000, 20_000])
def test_answer_first_in_a_long_response(explanation_chars: int) -> None:
    """An answer stated first is found however long the explanation after it (no answer phrase there)."""
    text = "Answer: 17\n\n" + _long_steps(explanation_chars)
    assert len(text) > extraction._TAIL_CHARS
    got = extract_answer(text)
    assert (got.answer, got.method) == ("17", "phrase")


@pytest.mark.parametrize("steps_chars", [4_500, 20_000])
def test_last_number_of_a_long_response(steps_chars: int) -> None:
    """The last number of a long response is its final one, not one near the start of the scanned tail."""
    got = extract_answer(_long_steps(steps_chars) + "\nSo the basket holds 93 apples.")
    assert (got.answer, got.method) == ("93", "last_number")


def test_a_correction_keeps_the_box_it_overrides() -> None:
    text = "So \\boxed{12}. Wait, that is wrong: the correct answer is 14."
    got = extract_answer(text)
    assert (got.answer, got.method, got.box) == ("14", "phrase", last_box(text))


@pytest.mark.parametrize("text", ["The answer is 5.", "#### 72", "so 6 * 7 = 42", ""])
def test_without_fallbacks_only_a_box_counts(text: str) -> None:
    got = extract_answer(text, fallbacks=False)
    assert (got.answer, got.method, got.box) == (None, "none", None)


# Several boxes (issue 31): the boxes of the final statement, joined only by connectives, are one answer; any
# other text between two boxes (a check, a correction, a sentence) ends the statement and the last box stands.
SEVERAL_BOXES = [
    ("The solutions are \\boxed{(4, 1)}, \\boxed{(1, 4)}.", "(4, 1), (1, 4)"),
    ("So $\\boxed{a = 12}$ and $\\boxed{b = 5}$.", "a = 12, b = 5"),
    ("\\[\\boxed{3}\\quad\\text{or}\\quad\\boxed{-7}\\]", "3, -7"),
    ("roots \\boxed{2}\\boxed{9}", "2, 9"),
    ("\\(x = \\boxed{6}\\), \\(y = \\boxed{8}\\)", "6, 8"),
    ("So \\boxed{15}. Check: 15 + 5 = 20, as required, so \\boxed{15}.", "15"),
    ("I get \\boxed{10}. Hmm, I dropped a factor of two; redoing it gives \\boxed{20}.", "20"),
    ("Part (a): \\boxed{4}. Part (b) asks for the area: \\boxed{9}", "9"),
]


@pytest.mark.parametrize(("text", "answer"), SEVERAL_BOXES)
def test_the_boxes_of_the_final_statement_form_one_answer(text: str, answer: str) -> None:
    got = extract_answer(text)
    assert (got.answer, got.method) == (answer, "boxed")
    assert got.box == last_box(text)  # extra_logs read the last box, as before


def test_several_boxes_without_fallbacks() -> None:
    """A truncated response keeps the joined boxes: each one closed."""
    assert extract_answer("\\boxed{1}, \\boxed{2}", fallbacks=False).answer == "1, 2"


def test_final_boxes_are_bounded() -> None:
    text = ", ".join(f"\\boxed{{{i}}}" for i in range(200))
    assert len(extraction.final_boxes(text)) == extraction.MAX_BOXES_TRIED
