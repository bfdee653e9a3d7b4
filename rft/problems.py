"""Problem identity: the normalization and hash that decide duplicates and train/eval disjointness."""

from __future__ import annotations

import hashlib
import re

_WS = re.compile(r"\s+")


def normalize_problem(text: str) -> str:
    """Lower-case and collapse whitespace: two problems that differ only in these are the same."""
    return _WS.sub(" ", text).strip().lower()


def problem_hash(text: str) -> str:
    """MD5 hex digest of the normalized problem text."""
    return hashlib.md5(normalize_problem(text).encode("utf-8")).hexdigest()
