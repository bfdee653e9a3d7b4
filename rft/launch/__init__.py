"""Launch stage: the launch checks as a table of rules, rft's choices as flags, the run record, supervision.

Driven by the launch scripts (`python -m rft.launch`).
"""
