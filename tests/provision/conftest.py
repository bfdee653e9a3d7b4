"""Fixtures of these tests: the process environment restored after each (the shared ones are in tests/conftest.py)."""

from tests.support.environment import launcher_environment  # noqa: F401 - an autouse fixture
