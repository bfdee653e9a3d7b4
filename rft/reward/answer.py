"""Final-answer extraction, normalization and equivalence for competition-math responses.

Extraction order: last `\\boxed{}`/`\\fbox{}`, "the answer is"/"Final Answer:" phrasing, GSM8K `#### x`,
last number-like token. Equivalence: normalized string match, then the safe evaluator in
`rft.reward.latex_value` (exact for rationals, relative tolerance otherwise), element-wise for tuples,
intervals and sets, and only when none of that can decide, math-verify in a separate process
(`rft.reward.symbolic`). Model text is never evaluated as code.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from rft.reward.latex_value import identity_equal, latex_value, values_equal

BOX_COMMANDS = ("\\boxed", "\\fbox")
MAX_ANSWER_CHARS = 1000
MAX_BOXES_TRIED = 16
REL_TOL = 1e-6


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


# ---------------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------------


_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)


def _match_brace(text: str, open_pos: int) -> int:
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
        end = _match_brace(text, i)
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


# "answer" first (a fast literal scan), then "final"/"the" checked just before it.
_PHRASE = re.compile(r"(?:[Aa]nswer|ANSWER)[ \t]*(?:\*\*|__)?[ \t]*(?:is\b|IS\b|Is\b|:|=)[ \t]*(?:\*\*|__)?[ \t]*:?\s*")
_PHRASE_LEAD = re.compile(r"(?:final|the)\s+(?:\*\*|__)?$", re.IGNORECASE)
# `#### 72` (optionally `$`, lower-case unit words, a full stop) ending its line; a Markdown heading
# such as `#### Step 2: ...` or `#### 1. Setup` is not a GSM8K answer.
_GSM8K = re.compile(
    r"####[ \t]*(?:\$[ \t]*)?(-?\d+(?:,\d{3})*(?:\.\d+)?)%?(?:[ \t]+[a-z$]+)*[ \t]*(?:\.[ \t]*)?$", re.M
)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_LEADING_NUMBER = re.compile(r"-?\$?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?%?(?=\s|$|[.,;!?)])")
_SENTENCE_END = re.compile(r"\.(?:\s|$)|[;\n]|\s(?:because|since|which|as|so|and|but)\s", re.IGNORECASE)
_TAIL_CHARS = 4000


def _phrase_candidate(rest: str) -> str | None:
    """Turn the text after an answer phrase into an answer string."""
    rest = rest[:MAX_ANSWER_CHARS].lstrip()
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


def extract_answer(text: str, *, fallbacks: bool = True) -> Extraction:
    """Extract the final answer from a response (already isolated from the prompt).

    With `fallbacks=False` only a `\\boxed{}` answer is taken (used for truncated responses)."""
    box = last_box(text)
    if box is not None:
        return Extraction(box.content if box.closed else None, "boxed" if box.closed else "none", box)
    if not fallbacks:
        return Extraction(None, "none")
    m = _last_match(_PHRASE, text, _phrase_lead)
    if m is not None:
        cand = _phrase_candidate(text[m.end() :])
        if cand:
            return Extraction(cand[:MAX_ANSWER_CHARS], "phrase")
    m = _last_match(_GSM8K, text, _at_line_end)
    if m is not None:
        return Extraction(m.group(1), "gsm8k")
    m = _last_match(_NUMBER, text)
    if m is not None:
        return Extraction(m.group(0), "last_number")
    return Extraction(None, "none")


# ---------------------------------------------------------------------------------------------------
# Normalization
# ---------------------------------------------------------------------------------------------------

_UNICODE = {
    "\u2212": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u00d7": "\\times ",
    "\u00b7": "\\cdot ",
    "\u22c5": "\\cdot ",
    "\u221a": "\\sqrt",
    "\u03c0": "\\pi ",
    "\u221e": "\\infty ",
    "\u00b0": "",
    "\u00a0": " ",
    "\u2009": " ",
    "\u202f": " ",
    "\u00bd": "1/2",
    "\uff0c": ",",
    "\u2264": "\\le ",
    "\u2265": "\\ge ",
}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))
_WRAPPERS = re.compile(
    r"\\(?:text|textbf|textit|textrm|texttt|mathrm|mathbf|mathit|mathsf|mathtt|mbox|operatorname|boxed|fbox"
    r")\s*\{"
)
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad\b|\\displaystyle|\\limits|~")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\.?")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ\b|\\degree\b|\^\s*\{\s*\}")
_VAR_PREFIX = re.compile(r"^\\?[A-Za-z]+(?:_\{?\w+\}?)?'?\s*(?:=|\\in\b|:=)\s*(?=\S)")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_LEADING_ZEROS = re.compile(r"^(-?)0+(?=\d)")
_PLAIN_INT = re.compile(r"-?\d{1,900}")
_CMD_SPACE = re.compile(r"(\\[A-Za-z]+)\s+(?=[A-Za-z])")
_WHITESPACE = re.compile(r"\s+")
_UNIT_WORDS = re.compile(r"\s*[A-Za-z][A-Za-z .]*")


def _unwrap(s: str) -> str:
    """Replace `\\text{...}`-style wrappers by their content; drop unit words after a value."""
    for _ in range(20):
        m = _WRAPPERS.search(s)
        if m is None:
            return s
        open_pos = m.end() - 1
        close = _match_brace(s, open_pos)
        if close < 0:
            return s[: m.start()] + s[m.end() :]
        inner = s[open_pos + 1 : close]
        outside = (s[: m.start()] + s[close + 1 :]).strip()
        trailing = not s[close + 1 :].strip()
        if (
            m.group(0).startswith(("\\text", "\\mbox"))
            and outside
            and trailing
            and _UNIT_WORDS.fullmatch(inner)
        ):
            inner = " "
        s = s[: m.start()] + inner + s[close + 1 :]
    return s


def _strip_outer_braces(s: str) -> str:
    """`{5}` -> `5` while one brace pair encloses everything."""
    while len(s) >= 2 and s[0] == "{" and _match_brace(s, 0) == len(s) - 1:
        s = s[1:-1].strip()
    return s


def normalize_answer(answer: str) -> str:
    """Canonical string form of an answer, for comparison (see module docstring for the rules)."""
    return _normalize(str(answer)[:MAX_ANSWER_CHARS])


@functools.lru_cache(maxsize=16384)
def _normalize(answer: str) -> str:
    s = answer.strip()
    if _PLAIN_INT.fullmatch(s):
        return str(int(s))
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], s)
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\dbinom", "\\binom").replace("\\tbinom", "\\binom")
    s = _LEFT_RIGHT.sub("", s)
    s = _SPACING.sub(" ", s)
    s = _unwrap(s)
    s = _DEGREES.sub("", s)
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("{,}", ",")
    s = s.strip().rstrip(".").strip()
    s = _VAR_PREFIX.sub("", s, count=1)
    s = _CMD_SPACE.sub(r"\1 ", s)
    s = _WHITESPACE.sub(lambda m: " " if _keeps_space(s, m) else "", s)
    s = _strip_outer_braces(s).rstrip(".")
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    if s.startswith("+"):
        s = s[1:]
    return _LEADING_ZEROS.sub(r"\1", s)


def _keeps_space(s: str, m: re.Match) -> bool:
    """A space survives only between a LaTeX command and a following letter (`\\pi r`)."""
    before = s[: m.start()]
    return bool(re.search(r"\\[A-Za-z]+$", before[-40:])) and m.end() < len(s) and s[m.end()].isalpha()


# ---------------------------------------------------------------------------------------------------
# Equivalence
# ---------------------------------------------------------------------------------------------------

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = set(_OPEN.values())


def split_sequence(s: str) -> tuple[str, list[str], str] | None:
    """Split `(a,b)`, `[a,b)`, `\\{a,b\\}` or a bare `a,b` into (open, items, close); None if not a list."""
    opener, closer, body = "", "", s
    if s.startswith("\\{") and s.endswith("\\}"):
        opener, closer, body = "\\{", "\\}", s[2:-2]
    elif len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        opener, closer, body = s[0], s[-1], s[1:-1]
    items, depth, start, i = [], 0, 0, 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] in "{}":
            depth += 1 if body[i + 1] == "{" else -1
            i += 2
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif c == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
        i += 1
    if depth != 0:
        return None
    items.append(body[start:].strip())
    if len(items) < 2 and not opener:
        return None
    if len(items) < 2 and opener in "([":
        return None  # a parenthesised single value is just that value
    return opener, items, closer


def _looks_like_words(s: str) -> bool:
    """True for prose-like answers (no digits, no LaTeX commands), e.g. `none`, `yes`."""
    return not re.search(r"[\d\\]", s)


def compare_fast(pred: str, gold: str) -> bool | None:
    """Decide equivalence of two normalized answers without math-verify; None when undecidable."""
    if pred == gold:
        return True
    if not pred or not gold:
        return False
    gseq, pseq = split_sequence(gold), split_sequence(pred)
    if gseq is not None or pseq is not None:
        return _compare_sequences(pseq, gseq, pred, gold)
    gv = latex_value(gold)
    pv = latex_value(pred)
    if gv is not None and pv is not None:
        return values_equal(pv, gv, REL_TOL)
    if gv is None and pv is None:
        same = identity_equal(pred, gold)
        if same is not None:
            return same
    if (gv is not None and _looks_like_words(pred)) or (pv is not None and _looks_like_words(gold)):
        return False
    if _looks_like_words(pred) and _looks_like_words(gold):
        return pred.lower() == gold.lower()
    return None


def _compare_sequences(pseq, gseq, pred: str, gold: str) -> bool | None:
    """Element-wise comparison of tuples/intervals (ordered) and sets/bare lists (unordered)."""
    if pseq is None or gseq is None:
        other = pred if pseq is None else gold
        return False if latex_value(other) is not None else None
    (po, pitems, pc), (go, gitems, gc) = pseq, gseq
    if len(pitems) != len(gitems):
        return False
    unordered = go in ("", "\\{") and po in ("", "\\{")
    if not unordered:
        if (po, pc) != (go, gc):
            return False
        results = [compare_fast(p, g) for p, g in zip(pitems, gitems, strict=True)]
        if False in results:
            return False
        return None if None in results else True
    remaining = list(gitems)
    undecided = False
    for p in pitems:
        for j, g in enumerate(remaining):
            r = compare_fast(p, g)
            if r is True:
                del remaining[j]
                break
            undecided |= r is None
        else:
            return None if undecided else False
    return True


def answers_equal(pred: str | None, gold: str | None, *, symbolic: bool = True) -> bool:
    """True when the predicted answer is equivalent to the gold answer."""
    if pred is None or gold is None:
        return False
    p, g = normalize_answer(pred), normalize_answer(gold)
    decided = compare_fast(p, g)
    if decided is not None:
        return decided
    if not symbolic:
        return False
    from rft.reward.symbolic import symbolic_equal

    return symbolic_equal(p, g) is True
