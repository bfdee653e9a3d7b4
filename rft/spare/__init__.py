"""Spare-node stage: config, ssh transport and sync, detached tmux jobs, the job wrapper and its tmux conf.

Driven by `spare.py`.
"""
