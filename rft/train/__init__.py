"""Inside OpenRLHF: what the patches import and what runs in its Ray workers.

LoRA sync, loss diagnostics, reward sanitising, metrics writers, checkpoints; driven by `train_ppo_ray`.
"""
