"""Files loaded by path: reward files (reward_func_*.py) the way OpenRLHF loads --remote_rm_url, entry points;
reward.toml settings files written for them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType


def load_file(path: Path | str, name: str) -> ModuleType:
    """A Python file loaded by path as a fresh module `name` (a reward file, a top-level entry point)."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_reward_module(path: Path | str) -> ModuleType:
    """Load a reward file exactly as openrlhf/utils/agent.py (0.9.3) does: a fresh module named reward_func."""
    return load_file(path, "reward_func")


def write_reward_toml(path: Path, **sections: dict) -> Path:
    """A reward.toml with these sections (`judge={"prices": {...}}` becomes [judge.prices]); JSON values are TOML."""
    lines = []
    for name, table in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)]
        for sub, inner in ((k, v) for k, v in table.items() if isinstance(v, dict)):
            lines.append(f"[{name}.{sub}]")
            lines += [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in inner.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
