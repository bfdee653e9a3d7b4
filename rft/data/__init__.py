"""Data stage: NuminaMath-1.5 -> RL pool, SFT sets, eval and probe sets, report, manifest.

Driven by `prepare_sft_data.py` (`--verify` re-checks what it wrote).
"""
