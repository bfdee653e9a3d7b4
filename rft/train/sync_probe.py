"""The LoRA sync probe (`--lora_sync_probe`): a fixed math prompt the patched actor scores in every vLLM engine
before the first sync and after each, so a sync that never lands shows as a log-prob that never moves."""

from __future__ import annotations

PROBE_TEXT = (
    "Problem: Find the remainder when 2^10 is divided by 7. Put the final answer in \\boxed{}.\n"
    "Solution: 2^3 = 8 = 1 (mod 7), so 2^10 = 2^9 * 2 = 1 * 2 = 2 (mod 7). The answer is \\boxed{2}."
)


def probe_token_ids(pretrain: str) -> list[int]:
    """PROBE_TEXT in the model's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(pretrain, trust_remote_code=True)(PROBE_TEXT)["input_ids"]


def mean_prompt_logprob(output) -> float:
    """Mean log-prob of the prompt's own tokens (after the first) in a vLLM RequestOutput with prompt_logprobs."""
    ids, lps = output.prompt_token_ids, output.prompt_logprobs
    values = [lps[i][ids[i]].logprob for i in range(1, len(ids)) if lps[i] is not None and ids[i] in lps[i]]
    if not values:
        raise ValueError("the probe came back without prompt log-probs")
    return sum(values) / len(values)
