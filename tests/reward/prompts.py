"""Chat-formatted prompts of the reward tests: a Qwen2.5 chat prompt, a gpt-oss Harmony prompt, Harmony responses."""

from __future__ import annotations

QWEN_PROMPT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "If 3 boxes hold 12 apples each, and 7 are eaten, how many remain? "
    "Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
)
HARMONY_PROMPT = (
    "<|start|>system<|message|>You are ChatGPT.\nCurrent date: 2025-01-01\nReasoning: medium<|end|>"
    "<|start|>user<|message|>What is 6 times 7? Put your final answer in \\boxed{}. Example: \\boxed{99}<|end|>"
    "<|start|>assistant"
)


def harmony(analysis: str, final: str | None, end: str = "<|return|>") -> str:
    """A gpt-oss response: analysis message, then (optionally) the final message."""
    text = f"<|channel|>analysis<|message|>{analysis}<|end|>"
    if final is not None:
        text += f"<|start|>assistant<|channel|>final<|message|>{final}{end}"
    return text
