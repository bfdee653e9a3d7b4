"""Judge-blended reward for OpenRLHF 0.9.3: `--remote_rm_url reward_func_judge.py` (REWARD=judge).

OpenRLHF loads this file by path (importlib) and calls `reward_func(queries, prompts, labels)` per sample
from worker threads. The logic lives in `rft.reward.blend` (modes, weights) and `rft.reward.judge` (Gemini
client, limits, cache, cost); settings are read from reward.toml (`rft.reward.settings`) when this file is loaded.
"""

import sys
from pathlib import Path

try:
    import rft.reward.blend  # noqa: F401 - installed package, or already on sys.path
except ImportError:  # loaded by file path from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from rft.reward.blend import judge_reward_func  # noqa: E402
from rft.reward.settings import load_settings  # noqa: E402

_settings = load_settings()
reward_func = judge_reward_func(_settings.blend, _settings.judge)
