"""Finding the final answer in a competition-math response (the parser half of grading).

Order: last `\\boxed{}`/`\\fbox{}` (unless explicitly corrected in text after it), "the answer is"/"Final
Answer:"/line-initial "Answer:" phrasing, GSM8K `#### x`, last number-like token outside a trailing
verification section. Comparing what is found is `rft.reward.equality`'s job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BOX_COMMANDS = ("\\boxed", "\\fbox")
MAX_ANSWER_CHARS = 1000
MAX_BOXES_TRIED = 16


@dataclass(frozen=True)
class Box:
    """One `\\boxed` occurrence: content (None if empty), start/end offsets in the text, whether it closed."""

    content: str | None
    start: int
    closed: bool
    end: int = -1


@dataclass(frozen=True)
class Extraction:
    """An extracted answer (None if nothing found), the method that found it, and the last box seen."""

    answer: str | None
    method: str
    box: Box | None = None


_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)


def match_brace(text: str, open_pos: int) -> int:
    """Index of the `}` closing the `{` at open_pos (escaped braces skipped), or -1 if unbalanced."""
    depth = 0
    for m in _BRACE_TOKENS.finditer(text, open_pos):
        c = m.group(0)
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


def _parse_box_at(text: str, start: int, command: str) -> Box | None:
    """Parse the box command at `start`; None if it is not really a box (e.g. `\\boxedfoo`)."""
    i = start + len(command)
    n = len(text)
    if i < n and text[i].isalpha():
        return None
    while i < n and text[i] in " \t":
        i += 1
    if i >= n:
        return Box(None, start, closed=False, end=n)
    if text[i] == "{":
        end = match_brace(text, i)
        if end < 0:
            return Box(None, start, closed=False, end=n)
        content = text[i + 1 : end].strip()
        return Box(content[:MAX_ANSWER_CHARS] or None, start, closed=True, end=end + 1)
    if i > start + len(command):  # `\boxed 5`: one TeX argument token up to whitespace or `$`
        m = re.match(r"[^\s$]+", text[i : i + MAX_ANSWER_CHARS])
        return Box(m.group(0) if m else None, start, closed=True, end=i + (m.end() if m else 0))
    return None


def last_box(text: str) -> Box | None:
    """The last non-empty `\\boxed`/`\\fbox` in text (an unclosed last box is returned as such)."""
    ends = {cmd: len(text) for cmd in BOX_COMMANDS}
    for _ in range(MAX_BOXES_TRIED):
        found = [(text.rfind(cmd, 0, ends[cmd]), cmd) for cmd in BOX_COMMANDS]
        pos, cmd = max(found)
        if pos < 0:
            return None
        ends[cmd] = pos
        box = _parse_box_at(text, pos, cmd)
        if box is None or (box.closed and box.content is None):
            continue
        return box
    return None


# What may stand between the boxes of one final statement: space, punctuation, math delimiters, "and"/"or".
_BOX_JOINER = re.compile(
    r"(?:\s|[,;&]|\$|\\[\[\]()]|\\q?quad\b|\\[,;: ]|\\\\|\\text\s*\{\s*(?:and|or|,)?\s*\}|\b(?:and|or)\b)*"
    r"(?:\\?[A-Za-z]+(?:_\{?\w+\}?)?\s*=\s*)?"  # the name of the next part: `x = \\boxed{1}, y = \\boxed{2}`
)


def final_boxes(text: str, last: Box | None = None) -> list[Box]:
    """The boxes of the final statement, in order: the last closed box and the boxes before it that only
    connectives separate from it (`\\boxed{1}, \\boxed{2}`, `\\boxed{x=1} and \\boxed{y=2}`).

    Any other text between two boxes (a sentence, a check, a correction) ends the statement: the boxes after
    it are the answer, so a check box or a corrected box after an earlier one never joins it."""
    box = last if last is not None else last_box(text)
    if box is None or not box.closed:
        return []
    run = [box]
    while len(run) < MAX_BOXES_TRIED:
        prev = last_box(text[: run[0].start])
        if prev is None or not prev.closed or not _BOX_JOINER.fullmatch(text, prev.end, run[0].start):
            break
        run.insert(0, prev)
    return run


def join_boxes(boxes: list[Box]) -> str | None:
    """One answer from the boxes of a final statement: the contents joined by `, ` (a list of its parts)."""
    parts = [b.content for b in boxes if b.content]
    return ", ".join(parts)[:MAX_ANSWER_CHARS] if parts else None


def final_answer(text: str) -> str | None:
    """The answer the boxes of a text state (see `final_boxes`), or None when it has no closed box."""
    return join_boxes(final_boxes(text))


# "answer" first (a fast literal scan), then "final"/"the" checked just before it.
_PHRASE = re.compile(r"(?:[Aa]nswer|ANSWER)[ \t]*(?:\*\*|__)?[ \t]*(?:is\b|IS\b|Is\b|:|=)[ \t]*(?:\*\*|__)?[ \t]*:?\s*")
_ANSWER_SPAN = re.compile(
    r"^[ \t]*(?:\*\*|__)?(?:final[ \t]+)?answer(?:\*\*|__)?[ \t]+(?=\$|\\\()", re.IGNORECASE | re.MULTILINE
)
_PLAIN_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
_FINAL_LEAD = re.compile(r"final\s+(?:\*\*|__)?$", re.IGNORECASE)
_PHRASE_LEAD = re.compile(r"(?:(?:final|the|correct)\s+(?:\*\*|__)?|(?:^|\n)[ \t]*(?:#+[ \t]*)?(?:\*\*|__)?)$", re.IGNORECASE)
# `#### 72` (optionally `$`, lower-case unit words, a full stop) ending its line; a Markdown heading
# such as `#### Step 2: ...` or `#### 1. Setup` is not a GSM8K answer.
_GSM8K = re.compile(
    r"####[ \t]*(?:\\?\$[ \t]*)?(-?\d+(?:,\d{3})*(?:\.\d+)?)%?(?:[ \t]+[a-z$]+)*[ \t]*(?:\.[ \t]*)?$", re.M
)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_LEADING_NUMBER = re.compile(
    r"-?(?:\\?\$[ \t]?)?\d+(?:,\d{3})*(?:\.\d+)?(?:[ \t]+\d+/\d+|/\d+)?%?(?=\s|$|[.,;!?)$])"
)
_SENTENCE_END = re.compile(r"\.(?:\s|$)|[;\n]|\s(?:because|since|which|as|so|and|but)\s", re.IGNORECASE)
_TAIL_CHARS = 4000
# A verification section at a line start, and words that mark a correction rather than a check.
_CHECK_HEADER = re.compile(
    r"^[ \t]*(?:[#>*_-]+[ \t]*)*(?:check(?:ing)?|verif(?:y|ying|ication)|let(?:'|\u2019)?s (?:verify|check|double[- ]check)"
    r"|let me (?:verify|check|double[- ]check)|double[- ]check(?:ing)?|sanity check)\b",
    re.IGNORECASE | re.MULTILINE,
)
_CORRECTION_CUE = re.compile(
    r"\b(?:wait|actually|oops|correction|mistake|wrong|incorrect|error|instead|should be|miscalculated|recalculat\w*)\b",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^[ \t,]*(?:(?:indeed|still|actually|really|just|now|therefore|thus|clearly|simply)\b[ \t,]*)+", re.I
)
PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")


def _is_currency(rest: str) -> bool:
    """`\\$1,250`, or a `$` that opens no math span (unclosed, or closing over prose: `$5 and $6`)."""
    if rest.startswith("\\$"):
        return True
    if not rest.startswith("$") or rest.startswith("$$") or not rest[1:2].isdigit():
        return False
    end = rest.find("$", 1)
    return end < 0 or PROSE_WORD.search(rest, 1, end) is not None


def _phrase_candidate(rest: str) -> str | None:
    """Turn the text after an answer phrase into an answer string."""
    rest = _FILLER.sub("", rest[:MAX_ANSWER_CHARS].lstrip(), count=1)
    if _is_currency(rest):
        m = _LEADING_NUMBER.match(rest)
        if m:
            return m.group(0)
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(opener):
            end = rest.find(closer, len(opener))
            if end > len(opener):
                return rest[len(opener) : end].strip() or None
            return None
    m = _LEADING_NUMBER.match(rest)
    if m:
        return m.group(0)
    cut = _SENTENCE_END.search(rest)
    cand = (rest[: cut.start()] if cut else rest).strip().strip("*_").strip()
    return cand or None


def _last_match(pattern: re.Pattern, text: str, accept=None) -> re.Match | None:
    """Last (accepted) match of pattern, looking at the tail first so long texts stay cheap."""
    tail_start = max(0, len(text) - _TAIL_CHARS)
    last = None
    for m in pattern.finditer(text, tail_start):
        if accept is None or accept(text, m):
            last = m
    if last is None and tail_start:
        for m in pattern.finditer(text, 0, tail_start + 200):
            if accept is None or accept(text, m):
                last = m
    return last


def _phrase_lead(text: str, m: re.Match) -> bool:
    """The word before "answer" is "final" or "the"."""
    return _PHRASE_LEAD.search(text, max(0, m.start() - 24), m.start()) is not None


def _at_line_end(text: str, m: re.Match) -> bool:
    """The match ends its line in the full text (a search bounded by `endpos` may stop mid-line)."""
    return m.end() == len(text) or text[m.end()] == "\n"


def _phrase_answer(text: str) -> str | None:
    """The answer given by the last answer phrase ("the answer is", "Answer:", ...) in text, or None."""
    m = _last_match(_PHRASE, text, _phrase_lead)
    cand = _phrase_candidate(text[m.end() :]) if m is not None else None
    return cand[:MAX_ANSWER_CHARS] if cand else None


def _answer_span(text: str) -> str | None:
    """The math span after a line-initial "Answer" with no colon (`Answer \\( 12 \\)`), or None."""
    m = _last_match(_ANSWER_SPAN, text)
    cand = _phrase_candidate(text[m.end() :]) if m is not None else None
    return cand[:MAX_ANSWER_CHARS] if cand else None


def correction_after_box(text: str, box: Box) -> str | None:
    """An answer phrase after a correction cue ("wait, that is wrong: the answer is 14") following the box,
    or a "final answer is" phrase stating a plain number there (the box held a step: "... = \\boxed{255} ... The
    final answer is 10,455")."""
    tail = text[box.end : box.end + _TAIL_CHARS]
    cue = _CORRECTION_CUE.search(tail)
    if cue is not None:
        return _phrase_answer(tail[cue.end() :])
    m = _last_match(_PHRASE, tail, _final_lead)
    cand = _phrase_candidate(tail[m.end() :]) if m is not None else None
    return cand if cand and _PLAIN_NUMBER.fullmatch(cand) else None


def _final_lead(text: str, m: re.Match) -> bool:
    """The word before "answer" is "final"."""
    return _FINAL_LEAD.search(text, max(0, m.start() - 24), m.start()) is not None


def verification_start(text: str) -> int | None:
    """Offset of a trailing verification section ("Check: ...") that corrects nothing, or None.

    A number there restates or tests the answer stated before it, so the last-number fallback skips it."""
    start = max(0, len(text) - _TAIL_CHARS)
    for m in _CHECK_HEADER.finditer(text, start):
        if _CORRECTION_CUE.search(text, m.end()) is None and _NUMBER.search(text, start, m.start()):
            return m.start()
    return None


_INLINE_MATH = re.compile(rf"\$([^$]{{1,{MAX_ANSWER_CHARS}}})\$|\\\((.{{1,{MAX_ANSWER_CHARS}}}?)\\\)", re.DOTALL)
# What makes a math span one answer rather than a number in it: a relation other than `=`, a matrix, or a
# bracketed tuple (`$(7, 6)$`).
_STRUCTURED = re.compile(
    r"[<>]|!=|\\(?:[lg]eq?|neq?|[lg]t|geqslant|leqslant)(?![A-Za-z])|\\begin\{|^\(\s*[^(),]+(?:,\s*[^(),]+)+\)$"
)


def _structured_span(text: str, pos: int) -> str | None:
    """The inline math span holding offset `pos` when it states a relation or a matrix (`$x \\geq 5$`)."""
    for m in _INLINE_MATH.finditer(text, max(0, pos - MAX_ANSWER_CHARS), pos + MAX_ANSWER_CHARS):
        if m.start() <= pos < m.end():
            body = (m.group(1) or m.group(2) or "").strip()
            return body if _STRUCTURED.search(body) else None
    return None


def extract_answer(text: str, *, fallbacks: bool = True) -> Extraction:
    """Extract the final answer from a response (already isolated from the prompt).

    With `fallbacks=False` only a `\\boxed{}` answer is taken (used for truncated responses)."""
    box = last_box(text)
    if box is not None:
        if box.closed and fallbacks:
            corrected = correction_after_box(text, box)
            if corrected:
                return Extraction(corrected, "phrase", box)
        if not box.closed:
            return Extraction(None, "none", box)
        return Extraction(join_boxes(final_boxes(text, box)), "boxed", box)
    if not fallbacks:
        return Extraction(None, "none")
    cand = _phrase_answer(text) or _answer_span(text)
    if cand:
        return Extraction(cand, "phrase")
    m = _last_match(_GSM8K, text, _at_line_end)
    if m is not None:
        return Extraction(m.group(1), "gsm8k")
    cut = verification_start(text)
    m = _last_match(_NUMBER, text[:cut]) if cut is not None else None
    m = m or _last_match(_NUMBER, text)
    if m is not None:
        return Extraction(_structured_span(text, m.start()) or m.group(0), "last_number")
    return Extraction(None, "none")
