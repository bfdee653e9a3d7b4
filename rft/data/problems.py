"""Problem identity: the normalization and hash that decide duplicates and train/eval disjointness."""

from __future__ import annotations

import hashlib
import re

from rft.prompts import strip_instruction

_WS = re.compile(r"\s+")


def normalize_problem(text: str) -> str:
    """Drop the answer instruction, lower-case, collapse whitespace: rows equal after this are one problem."""
    return _WS.sub(" ", strip_instruction(text)).strip().lower()


def problem_hash(text: str) -> str:
    """MD5 hex digest of the normalized problem text."""
    return hashlib.md5(normalize_problem(text).encode("utf-8")).hexdigest()
