"""Launch stage: pre-launch checks, OpenRLHF's own CLI parser, the LR schedule preflight, the run record.

Driven by the launch scripts (`python -m rft.launch`) and `preflight_lr.sh` (`python -m rft.launch.lr_schedule`).
"""
