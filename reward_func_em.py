"""Exact-match reward for OpenRLHF 0.9.3: `--remote_rm_url reward_func_em.py`.

OpenRLHF loads this file by path (importlib) and calls `reward_func(queries, prompts, labels)` per
sample from a worker thread. The logic lives in `rft.reward.exact_match`; the scheme is reward.toml's
[reward] scheme, read when this file is loaded (`binary`: 1/0, `signed`: +1/-1/-0.5 for no answer).
"""

import sys
from pathlib import Path

try:
    import rft.reward.exact_match  # noqa: F401 - installed package, or already on sys.path
except ImportError:  # loaded by file path from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from rft.reward.exact_match import make_reward_func  # noqa: E402
from rft.reward.settings import load_settings  # noqa: E402

reward_func = make_reward_func(load_settings().scheme)
