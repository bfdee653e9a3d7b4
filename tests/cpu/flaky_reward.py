"""A reward file that raises for about a quarter of the samples (by a hash of the query), else the EM reward:
loaded by OpenRLHF with --remote_rm_url in the CPU run's fault test."""

import zlib

from rft.reward.exact_match import make_reward_func

_em = make_reward_func()


def reward_func(queries, prompts, labels):
    """The EM reward, except that a sample whose query hashes to 0 mod 4 makes it raise."""
    if any(zlib.crc32(str(q).encode()) % 4 == 0 for q in queries):
        raise RuntimeError("flaky_reward: simulated reward failure")
    return _em(queries, prompts, labels)
