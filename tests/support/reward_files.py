"""Reward files (reward_func_*.py) loaded the way OpenRLHF loads --remote_rm_url."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_reward_module(path: Path | str) -> ModuleType:
    """Load a reward file exactly as openrlhf/utils/agent.py (0.9.3) does: a fresh module named reward_func."""
    spec = importlib.util.spec_from_file_location("reward_func", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
