"""Eval stage: the labelled modes, generation backends (HF, vLLM), adapter merge, pass@k, the report.

Driven by `eval_posthoc.py`.
"""
