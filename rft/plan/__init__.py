"""Run planning: OpenRLHF's flags parsed without Ray, the LR schedule, the per-GPU memory plan, the step time.

Read by the launch checks and `preflight_lr.sh` (`python -m rft.plan.lr_schedule`) before any GPU is used.
"""
