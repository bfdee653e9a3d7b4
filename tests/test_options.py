"""rft.options: a settings dataclass from parsed flags, field by field."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from rft.options import from_args


@dataclass(frozen=True)
class Settings:
    seed: int = 1
    lr: float = 0.1
    mode: str = "a"


def test_fields_come_from_flags_of_their_name_renamed_flags_and_given_values():
    args = argparse.Namespace(seed=7, actor_learning_rate=0.5, mode="b", unrelated=3)
    assert from_args(Settings, args, {"lr": "actor_learning_rate"}) == Settings(7, 0.5, "b")
    assert from_args(Settings, args, {"lr": "actor_learning_rate"}, mode="c") == Settings(7, 0.5, "c")


def test_a_field_no_flag_sets_keeps_its_default():
    assert from_args(Settings, argparse.Namespace(seed=3)) == Settings(seed=3)


def test_a_renamed_flag_must_exist():
    with pytest.raises(AttributeError, match="actor_learning_rate"):
        from_args(Settings, argparse.Namespace(seed=3), {"lr": "actor_learning_rate"})
