"""Clean integer answers: which dataset answers are plain integers, and their canonical label string.

A label is always a canonical integer string (``"42"``, ``"-3"``), never a JSON number: `datasets` turns
a JSONL file that mixes ``"42"`` and ``7`` into integers, and the reward compares strings.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Whole-answer wrappers that do not change the value: $..$, $$..$$, \(..\), \[..\], \boxed{..}, \text{..}.
_WRAPPERS = (
    re.compile(r"^\$\$(.*)\$\$$", re.S),
    re.compile(r"^\$(.*)\$$", re.S),
    re.compile(r"^\\\((.*)\\\)$", re.S),
    re.compile(r"^\\\[(.*)\\\]$", re.S),
    re.compile(r"^\\boxed\s*\{([^{}]*)\}$", re.S),
    re.compile(r"^\\(?:text|textrm|mathrm|mbox)\s*\{([^{}]*)\}$", re.S),
)
# Trailing unit words in LaTeX text mode: "12 \text{ cm}", "5\mathrm{~kg}".
_UNITS = re.compile(r"^(.*?)\s*(?:\\(?:text|textrm|mathrm|mbox)\s*\{[^{}]*\}\s*)+$", re.S)
# An integer, optionally signed, optionally grouped by thousands ("1,000", "1{,}000", "1\,000").
_INTEGER = re.compile(r"^([+-]?)\s*(\d+|\d{1,3}(?:,\d{3})+)$")
_GROUP_SEPARATORS = (("{,}", ","), ("\\,", ","))
_GSM8K_MARK = "####"


@lru_cache(maxsize=1 << 16)
def parse_integer_answer(text: str | None) -> str | None:
    """The canonical integer string of a clean integer answer ("042" -> "42"), or None if it is not one.

    `5,7` is a pair (not a thousands group), so it is None, like `3.5`, `\\frac{1}{2}`, `proof` and `""`.
    """
    if not isinstance(text, str):
        return None
    s = text.strip().replace("\u2212", "-")
    for _ in range(4):  # peel nested wrappers such as $\boxed{12}$
        before = s
        for wrapper in _WRAPPERS:
            m = wrapper.match(s)
            if m:
                s = m.group(1).strip()
        m = _UNITS.match(s)
        if m and m.group(1).strip():
            s = m.group(1).strip()
        if s == before:
            break
    for old, new in _GROUP_SEPARATORS:
        s = s.replace(old, new)
    m = _INTEGER.match(s)
    if not m:
        return None
    value = int(m.group(2).replace(",", ""))
    return f"-{value}" if m.group(1) == "-" and value else str(value)


def gsm8k_final_answer(answer: str | None) -> str | None:
    """The canonical integer after the last `#### ` of a GSM8K answer, or None if absent or not an integer."""
    if not isinstance(answer, str) or _GSM8K_MARK not in answer:
        return None
    return parse_integer_answer(answer.rsplit(_GSM8K_MARK, 1)[1])
