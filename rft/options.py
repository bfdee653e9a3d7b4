"""A settings dataclass filled from parsed command-line flags, as every entry point builds its config."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")


def from_args(cls: type[T], args: argparse.Namespace, renamed: dict[str, str] | None = None, **given: object) -> T:
    """`cls` with each field from `given`, else from the flag `renamed` names for it (which must be there), else
    from the flag of its own name; a field no flag sets keeps its default."""
    renamed = renamed or {}
    values = dict(given)
    for f in fields(cls):
        if f.name in values:
            continue
        if f.name in renamed:
            values[f.name] = getattr(args, renamed[f.name])
        elif hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
    return cls(**values)
