"""Reference solutions: locate `\\boxed{}` spans and build SFT outputs that end in exactly one `\\boxed{label}`."""

from __future__ import annotations

import re
from typing import NamedTuple

from rft.data.integer_answer import parse_integer_answer

_BOXED = re.compile(r"\\boxed\s*\{")
# What may follow the final box: closing math delimiters and a full stop ("$\boxed{5}$.", "\(\boxed{5}\)").
_CLOSING_TAIL = re.compile(r"^\s*(?:\$\$|\$|\\\)|\\\])?\s*\.?\s*$")

SFT_OK = "ok"
SFT_REASONS = {
    SFT_OK: "ends in exactly one \\boxed{label}",
    "no_boxed": "no \\boxed{} in the solution",
    "several_boxed": "more than one \\boxed{}",
    "boxed_not_final": "text follows the \\boxed{}",
    "boxed_mismatch": "boxed value differs from the label",
}


class BoxedSpan(NamedTuple):
    """Character offsets of one `\\boxed{...}`: where it starts, its content, and just past its `}`."""

    start: int
    content_start: int
    content_end: int
    end: int


def boxed_spans(text: str) -> list[BoxedSpan]:
    """Every `\\boxed{...}` in `text` with balanced braces, in order (unbalanced ones are skipped)."""
    spans: list[BoxedSpan] = []
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            spans.append(BoxedSpan(m.start(), m.end(), i - 1, i))
    return spans


def last_boxed_content(text: str) -> str | None:
    """The content of the last balanced `\\boxed{...}` in `text`, or None."""
    spans = boxed_spans(text) if isinstance(text, str) else []
    return text[spans[-1].content_start : spans[-1].content_end] if spans else None


def sft_output(solution: str, label: str) -> tuple[str | None, str]:
    """(output, "ok") when `solution` ends in exactly one box whose value is `label`, else (None, reason).

    Recognised endings: `\\boxed{5}`, `$\\boxed{5}$.`, `\\(\\boxed{5}\\)`, `\\[\\boxed{5}\\]`; the box content is
    rewritten to the canonical label ("1,000" -> "1000") and trailing whitespace dropped.
    """
    spans = boxed_spans(solution)
    if not spans:
        return None, "no_boxed"
    if len(spans) > 1:
        return None, "several_boxed"
    span = spans[0]
    if not _CLOSING_TAIL.match(solution[span.end :]):
        return None, "boxed_not_final"
    if parse_integer_answer(solution[span.content_start : span.content_end]) != label:
        return None, "boxed_mismatch"
    return (solution[: span.content_start] + label + solution[span.content_end :]).rstrip(), SFT_OK
