"""Reward stage: final-answer extraction, exact LaTeX values, bounded symbolic checks, the reward function.

Driven by OpenRLHF through `reward_func_em.py` (`--remote_rm_url`), and by the post-hoc eval's scoring.
"""
