"""Hooks of `openrlhf/trainer/ppo_utils/replay_buffer.py`."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any


def merge_interleaved(chunks: Sequence[Sequence[Any]], make_batch: Callable[[list], Any]) -> list:
    """One batch per rank from the interleaved chunks, the i-th item of every chunk to rank i. The last chunk is
    shorter when the samples do not divide by the ranks (OpenRLHF #1299): its missing places are skipped, where
    0.9.3's zip dropped the other chunks' samples at those positions."""
    return [make_batch([item for item in items if item is not None]) for items in itertools.zip_longest(*chunks)]
