"""Inside OpenRLHF: what the patches import and what runs in its Ray workers on the GPU node.

LoRA sync, loss diagnostics, reward sanitising, metrics writers, checkpoints, MXFP4; driven by `train_ppo_ray`.
"""
