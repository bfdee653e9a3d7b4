"""The CPU profile: the whole GRPO loop without GPUs (train_grpo_cpu.sh, make demo).

The demo model and task, a private Ray head on 127.0.0.1, the torch.cuda stand-ins, and `site/` (put on
PYTHONPATH by the CPU profile only). Nothing on the GPU path imports this package.
"""
