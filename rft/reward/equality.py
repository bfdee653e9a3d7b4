"""Normalization and equivalence of final answers (the grader half; `rft.reward.extraction` finds them).

Normalization reads mixed numbers, repeating decimals, units with exponents, money, and answers stated in
words (one number in a sentence, sets named in words). Equivalence: normalized string match, then the safe
evaluator in `rft.reward.latex_value` (exact for rationals, relative tolerance otherwise), element-wise for
tuples, intervals and sets, and only when none of that can decide, math-verify in a separate process
(`rft.reward.symbolic`). Model text is never evaluated as code.
"""

from __future__ import annotations

import functools
import re
import string

from rft.reward.extraction import MAX_ANSWER_CHARS, PROSE_WORD, match_brace
from rft.reward.latex_value import identity_equal, latex_value, values_equal

REL_TOL = 1e-6
MAX_SYMBOLIC_ITEMS = 16  # math-verify calls for one comparison of sequences, item by item (each bounded)
# A decimal of 15 or more significant digits is a float printed in full (`0.0833333333333333` for 1/12), not a
# rounding: it equals the value it prints within float precision. A shorter decimal is exact (0.333 is not 1/3).
MACHINE_DIGITS = 15
MACHINE_REL_TOL = 1e-13
_DECIMAL = re.compile(r"-?(\d*)\.(\d+)")


def _machine_decimal(s: str) -> bool:
    """`s` is a decimal with at least MACHINE_DIGITS significant digits."""
    m = _DECIMAL.fullmatch(s)
    return m is not None and len((m.group(1) + m.group(2)).lstrip("0")) >= MACHINE_DIGITS


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
    "\u00bd": " \\frac{1}{2}",
    "\u2153": " \\frac{1}{3}",
    "\u2154": " \\frac{2}{3}",
    "\u00bc": " \\frac{1}{4}",
    "\u00be": " \\frac{3}{4}",
    "\u215b": " \\frac{1}{8}",
    "\uff0c": ",",
    "\u2264": "\\le ",
    "\u2265": "\\ge ",
    "\u2260": "\\ne ",
}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))
_WRAPPERS = re.compile(
    r"\\(?:text|textbf|textit|textrm|texttt|mathrm|mathbf|mathit|mathsf|mathtt|mbox|operatorname|boxed|fbox"
    r")\s*\{"
)
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad|\\displaystyle|\\limits|~")
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
    while (m := _WRAPPERS.search(s)) is not None:  # each pass removes a wrapper: s shrinks
        open_pos = m.end() - 1
        close = match_brace(s, open_pos)
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


# A unit after a value: words in a text wrapper or a common unit abbreviation, with an exponent or `/unit`.
_UNIT_AT_END = re.compile(
    r"(?:/|\\cdot|\\,|\s)*(?:\\(?:text|textrm|textnormal|mathrm|mbox|rm)\s*\{[ A-Za-z./]*[A-Za-z][ A-Za-z./]*"
    r"(?:\^\{?-?\d\}?)?\}|(?<=[\d}\s])(?:sq\.?\s*|square\s+|cubic\s+)?(?:cm|mm|km|ft|in|yd|mi|kg|mg|hrs?|min|sec|"
    r"meters?|metres?|feet|foot|inches|miles|units?|cents|dollars|hours|minutes|seconds|degrees)\b)"
    r"(?:\s*\^\s*(?:\{\s*-?\d+\s*\}|-?\d))?\s*\.?\s*$"
)
_VALUE_END = re.compile(r"[\d})\]]\s*$")


def _strip_units(s: str) -> str:
    """`12 \\text{ cm}^2` -> `12`, `5\\,\\mathrm{m}/\\text{s}^{2}` -> `5`: units after a value, exponent included."""
    while (m := _UNIT_AT_END.search(s)) is not None and _VALUE_END.search(s, 0, m.start()):
        s = s[: m.start()]  # a unit is never empty: s shrinks
    return s


_SET_PHRASES = {
    "\\emptyset": "\\emptyset",
    "\\varnothing": "\\emptyset",
    "\\{\\}": "\\emptyset",
    "the empty set": "\\emptyset",
    "empty set": "\\emptyset",
    "no solution": "\\emptyset",
    "no solutions": "\\emptyset",
    "no real solution": "\\emptyset",
    "no real solutions": "\\emptyset",
    "\\mathbb{r}": "(-\\infty,\\infty)",
    "\\mathbb r": "(-\\infty,\\infty)",
    "all real numbers": "(-\\infty,\\infty)",
    "all reals": "(-\\infty,\\infty)",
    "all real values": "(-\\infty,\\infty)",
    "every real number": "(-\\infty,\\infty)",
    "the set of all real numbers": "(-\\infty,\\infty)",
    "all real numbers x": "(-\\infty,\\infty)",
    "all real x": "(-\\infty,\\infty)",
}


def _set_phrase(s: str) -> str:
    """A set named in words or by its symbol (`all real numbers`, `\\mathbb{R}`, `no solution`) -> one form."""
    key = _WHITESPACE.sub(" ", s.strip().rstrip(".")).lower()
    return _SET_PHRASES.get(key, s)


_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
} | {w: str(10 * i) for i, w in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), start=3)}
_PROSE_NUMBER = re.compile(r"(?<![A-Za-z\d])-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s+\d+/\d+|/\d+)?(?![A-Za-z\d])")
_QUALIFIERS = re.compile(
    r"\b(?:not|no|except|or|between|than|least|most|about|approximately|nearly|around|either)\b", re.I
)


def _prose_value(s: str) -> str:
    """A sentence stating one number (`There are 5 ways`, `five`) -> that number; other text is left alone."""
    if not PROSE_WORD.search(s) or re.search(r"[\\=+*^_<>{}]", s) or _QUALIFIERS.search(s):
        return s
    numbers = _PROSE_NUMBER.findall(s)
    words = [_NUMBER_WORDS[w.lower()] for w in re.findall(r"[A-Za-z]+", s) if w.lower() in _NUMBER_WORDS]
    found = numbers or words
    return found[0] if len(found) == 1 and len(numbers + words) == 1 else s


# `0.\\overline{3}`, `0.1\\dot{6}`, `0.(142857)`: a decimal with a marked repeating block.
_REPEATING = re.compile(
    r"(\d*)\.(\d*)(?:\\(?:overline|bar|dot|widehat)\s*(?:\{\s*(\d+)\s*\}|(\d))|\((\d+)\))"
    r"(?:\s*(?:\\[lc]?dots|\.\.\.|\u2026))?"
)
# `0.333...`, `0.1666\\ldots`: repeating when the last block repeats (a digit 3 times, a longer block twice).
_ELLIPSIS_DECIMAL = re.compile(r"(\d*)\.(\d+)\s*(?:\\[lc]?dots|\.\.\.|\u2026)")


def _fraction_text(whole: str, fixed: str, block: str) -> str:
    """`whole.fixed(block)(block)...` as an exact `\\frac{p}{q}`."""
    q = (10 ** len(block) - 1) * 10 ** len(fixed)
    p = int(whole or "0") * q + int(fixed + block) - int(fixed or "0")
    return f"\\frac{{{p}}}{{{q}}}"


def _repeating_fraction(m: re.Match) -> str:
    return _fraction_text(m.group(1), m.group(2), m.group(3) or m.group(4) or m.group(5))


def _ellipsis_fraction(m: re.Match) -> str:
    digits = m.group(2)
    for period in range(1, min(6, len(digits) // 2) + 1):
        block, reps = digits[-period:], 1
        while digits[: len(digits) - reps * period].endswith(block):
            reps += 1
        if reps >= (3 if period == 1 else 2):
            return _fraction_text(m.group(1), digits[: len(digits) - reps * period], block)
    return m.group(0)


# `2\\frac{1}{2}` / `2 1/2` with a proper fraction and nothing math-like after it: a mixed number (5/2).
_MIXED_LATEX = re.compile(
    r"(?<![\w.}^_)\]])(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))(?!\s*[\^\d({\\A-Za-z_.!])"
)
_MIXED_PLAIN = re.compile(r"(?<![\w./^])(\d+)[ \t]+(\d+)/(\d+)(?![\w./^])")


def _mixed_number(m: re.Match) -> str:
    whole, num, den = (g for g in m.groups() if g is not None)
    if not 0 < int(num) < int(den):
        return m.group(0)
    return f"({whole}+\\frac{{{num}}}{{{den}}})"


def _strip_outer_braces(s: str) -> str:
    """`{5}` -> `5` while one brace pair encloses everything."""
    while len(s) >= 2 and s[0] == "{" and match_brace(s, 0) == len(s) - 1:
        s = s[1:-1].strip()
    return s


# Relations in one spelling: `\geq`/`\ge`/`≥` -> `>=`, `\neq`/`\ne` -> `!=`, `\lt` -> `<`.
_RELATIONS = {"geq": ">=", "ge": ">=", "geqslant": ">=", "leq": "<=", "le": "<=", "leqslant": "<=",
              "neq": "!=", "ne": "!=", "lt": "<", "gt": ">"}
_RELATION_CMD = re.compile(r"\\(" + "|".join(sorted(_RELATIONS, key=len, reverse=True)) + r")(?![A-Za-z])")
# "and"/"or" joining the parts of one answer (`x=1 or x=-1`, `(1,2)or(2,1)`): a list separator.
_JOIN = re.compile(r"(?<=[\d)}\]])\s*\b(?:and|or)\b\s*(?=[\w(\\{-])|(?<=[\d)}\]])\s+(?:and|or)\s+")
# A matrix in any environment: `\begin{pmatrix}..\end{pmatrix}`, bmatrix, `[\begin{array}{cc}..\end{array}]`.
_MATRIX = re.compile(
    r"^[(\[]?\s*\\begin\{([pbvBV]?matrix|array)\}(?:\{[lcr| ]*\})?(.*?)\\end\{\1\}\s*[)\]]?$", re.DOTALL
)
# `a <= x <= b` (or with `<`): the interval it means, `[a,b]` / `(a,b)`.
_CHAIN = re.compile(r"^([^<>=!]+)(<=?)([A-Za-z](?:_\{?\w+\}?)?)(<=?)([^<>=!]+)$")
_CHAIN_DOWN = re.compile(r"^([^<>=!]+)(>=?)([A-Za-z](?:_\{?\w+\}?)?)(>=?)([^<>=!]+)$")
# The name side of `names = value` (`(p,q)=`, `S_{MBCN}:S=`, `V_{1}:V_{2}=`): letters, subscripts, `(,:)`.
_NAME_SIDE = re.compile(r"(?:\\[A-Za-z]+|[A-Za-z](?:_\{\w+\}|_\w)?'?|[(),:])+")  # one way to match each text
_SPACED_COMMA = re.compile(r"\d,\s+\d")
# `\\le` (a backslash escaped once more, as in a string literal) is the command `\le`.
_ESCAPED_COMMAND = re.compile(r"\\\\(?=[A-Za-z])")
# `\frac12`, `\frac1{x}`: one-token arguments, braced.
_BARE_FRAC = re.compile(r"\\frac\s*(\d|\{[^{}]*\})\s*(\d|\{[^{}]*\})")


def _braced_frac(m: re.Match) -> str:
    num, den = (g if g.startswith("{") else "{" + g + "}" for g in m.groups())
    return f"\\frac{num}{den}"


def _matrix(s: str) -> str:
    """A whole-answer matrix as nested rows, `[[a,b],[c,d]]`, whichever environment wrote it."""
    m = _MATRIX.match(s)
    if m is None:
        return s
    rows = [r.strip() for r in re.split(r"\\\\", m.group(2))]
    while rows and not rows[-1]:
        rows.pop()
    if not rows:
        return s
    return "[" + ",".join("[" + ",".join(c.strip() for c in r.split("&")) + "]" for r in rows) + "]"


def _chain_interval(s: str) -> str:
    """`a<=x<b` -> `[a,b)`; `b>x>=a` -> `[a,b)`; anything else unchanged."""
    m = _CHAIN.match(s)
    if m is not None:
        lo, lo_rel, _, hi_rel, hi = m.groups()
        return ("[" if lo_rel == "<=" else "(") + f"{lo},{hi}" + ("]" if hi_rel == "<=" else ")")
    m = _CHAIN_DOWN.match(s)
    if m is not None:
        hi, hi_rel, _, lo_rel, lo = m.groups()
        return ("[" if lo_rel == ">=" else "(") + f"{lo},{hi}" + ("]" if hi_rel == ">=" else ")")
    return s


def _top_level(s: str, sep: str) -> list[str] | None:
    """`s` split at `sep` outside brackets; None when its brackets do not balance."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif c == sep and depth == 0:
            items.append(s[start:i])
            start = i + 1
    if depth != 0:
        return None
    items.append(s[start:])
    return items


def _drop_name(s: str) -> str:
    """`name = value` -> `value` when the left side only names (`(p,q)=(3,2)`, `S_{ABC}:S=7:32`, `x=5`)."""
    parts = _top_level(s, "=")
    if parts is None or len(parts) != 2 or not parts[1] or _NAME_SIDE.fullmatch(parts[0]) is None:
        return s
    return parts[1]


def _structure(s: str) -> str:
    """Lists written with `;` groups, names or joins in one form: `p=5,q=2;p=7,q=2` -> `(5,2),(7,2)`."""
    groups = _top_level(s, ";")
    if groups is None:
        return s
    if len(groups) > 1:
        out = []
        for g in groups:
            items = [_drop_name(i) for i in split_items(g) or [g]]
            out.append(items[0] if len(items) == 1 else "(" + ",".join(items) + ")")
        s = ",".join(out)
    s = re.sub(r";", ",", s)  # inside brackets, `(0;-2;6)`, a `;` separates coordinates
    items = split_items(s)
    if items is not None and len(items) >= 2:
        return ",".join(_drop_name(i) for i in items)
    return _drop_name(s)


def normalize_answer(answer: str) -> str:
    """Canonical string form of an answer, for comparison (see module docstring for the rules)."""
    return _normalize(str(answer)[:MAX_ANSWER_CHARS])


@functools.lru_cache(maxsize=16384)
def _normalize(answer: str) -> str:
    s = answer.strip()
    if _PLAIN_INT.fullmatch(s):
        return str(int(s))
    spaced_list = _SPACED_COMMA.search(s) is not None  # `32, 349` is a list, `32,349` and `32,\\!349` numbers
    s = _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], s)
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\dbinom", "\\binom").replace("\\tbinom", "\\binom")
    s = _matrix(_LEFT_RIGHT.sub("", s).strip())
    s = _ESCAPED_COMMAND.sub(r"\\", s)
    s = _BARE_FRAC.sub(_braced_frac, s)
    s = _SPACING.sub(" ", s)
    s = _RELATION_CMD.sub(lambda m: _RELATIONS[m.group(1)], s)
    s = _unwrap(_strip_units(s))
    s = _DEGREES.sub("", s)
    s = _set_phrase(s)
    s = _prose_value(s)
    s = _REPEATING.sub(_repeating_fraction, s)
    s = _ELLIPSIS_DECIMAL.sub(_ellipsis_fraction, s)
    s = _MIXED_LATEX.sub(_mixed_number, s)
    s = _MIXED_PLAIN.sub(_mixed_number, s)
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("{,}", ",")
    s = s.strip().rstrip(".").strip()
    s = _JOIN.sub(",", s)
    s = _VAR_PREFIX.sub("", s, count=1)
    s = _CMD_SPACE.sub(r"\1 ", s)
    s = _WHITESPACE.sub(lambda m: " " if _keeps_space(s, m) else "", s)
    s = _strip_outer_braces(s).rstrip(".")
    s = _chain_interval(_structure(s))
    if _THOUSANDS.fullmatch(s) and not spaced_list:
        s = s.replace(",", "")
    if s.startswith("+"):
        s = s[1:]
    return _LEADING_ZEROS.sub(r"\1", s)


def _keeps_space(s: str, m: re.Match) -> bool:
    """A space survives only between a LaTeX command (or a lone backslash) and a following letter (`\\pi r`)."""
    head = s[: m.start()].rstrip(string.ascii_letters)
    return head.endswith("\\") and m.end() < len(s) and s[m.end()].isalpha()


# ---------------------------------------------------------------------------------------------------
# Equivalence
# ---------------------------------------------------------------------------------------------------

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = set(_OPEN.values())


def split_items(body: str) -> list[str] | None:
    """The top-level comma-separated items of `body`, stripped; None when its brackets do not balance."""
    items = _top_level(body, ",")  # an escaped brace `\{` counts as its brace: sets nest like groups
    return None if items is None else [item.strip() for item in items]


def split_sequence(s: str) -> tuple[str, list[str], str] | None:
    """Split `(a,b)`, `[a,b)`, `\\{a,b\\}` or a bare `a,b` into (open, items, close); None if not a list.

    Outer brackets that do not enclose the whole text (`(1,2),(3,4)`) are read as items of a bare list.
    """
    if s.startswith("\\{") and s.endswith("\\}"):
        opener, closer, body = "\\{", "\\}", s[2:-2]
    elif len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        opener, closer, body = s[0], s[-1], s[1:-1]
    else:
        opener = closer = body = ""
    items = split_items(body) if opener else None
    if items is not None:
        # a parenthesised single value is just that value; a one-element set is a set
        return (opener, items, closer) if len(items) >= 2 or opener == "\\{" else None
    items = split_items(s)
    return ("", items, "") if items is not None and len(items) >= 2 else None


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
        if _machine_decimal(pred) or _machine_decimal(gold):
            return values_equal(float(pv), float(gv), MACHINE_REL_TOL)
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
    unordered = go in ("", "\\{") and po in ("", "\\{")
    if unordered:  # a set: an item written twice is one item
        pitems, gitems = list(dict.fromkeys(pitems)), list(dict.fromkeys(gitems))
    if len(pitems) != len(gitems):
        return False
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
    by_item = _items_symbolically(p, g)
    if by_item is not None:
        return by_item
    from rft.reward.symbolic import symbolic_equal

    return symbolic_equal(p, g) is True


def _items_symbolically(p: str, g: str, budget: list[int] | None = None) -> bool | None:
    """Two sequences of one shape (a matrix, a tuple, a short list) compared item by item, math-verify deciding
    the items the fast path cannot, at most MAX_SYMBOLIC_ITEMS calls in all; None when they are not such
    sequences."""
    budget = [MAX_SYMBOLIC_ITEMS] if budget is None else budget
    pseq, gseq = split_sequence(p), split_sequence(g)
    if pseq is None or gseq is None:
        return None
    (po, pitems, pc), (go, gitems, gc) = pseq, gseq
    unordered = po in ("", "\\{") and go in ("", "\\{")
    if unordered:
        pitems, gitems = list(dict.fromkeys(pitems)), list(dict.fromkeys(gitems))
    if len(pitems) != len(gitems) or len(gitems) > MAX_SYMBOLIC_ITEMS:
        return None
    if unordered:
        remaining = list(gitems)
        for item in pitems:
            j = next((j for j, other in enumerate(remaining) if _item_equal(item, other, budget)), None)
            if j is None:
                return False
            del remaining[j]
        return True
    if (po, pc) != (go, gc):
        return False
    return all(_item_equal(a, b, budget) for a, b in zip(pitems, gitems, strict=True))


def _item_equal(p: str, g: str, budget: list[int]) -> bool:
    """One item of a sequence: the fast path, then items of nested sequences, then math-verify while the budget
    of calls lasts (past it an item is not shown equal)."""
    decided = compare_fast(p, g)
    if decided is not None:
        return decided
    by_item = _items_symbolically(p, g, budget)
    if by_item is not None:
        return by_item
    if budget[0] <= 0:
        return False
    budget[0] -= 1
    from rft.reward.symbolic import symbolic_equal

    return symbolic_equal(p, g) is True
