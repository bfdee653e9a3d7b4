"""The launcher's environment, given back after each test (imported by the launch, plan and provision conftests)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def launcher_environment():
    """The launcher sets its decisions in os.environ before it execs (RUN_NAME, caches, stand-ins); a test that
    calls it in-process gets this process's environment back afterwards, so no test sees another's."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
