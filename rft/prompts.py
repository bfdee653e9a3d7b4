"""Prompt text: the instruction every problem carries and the chat rendering train and eval share.

OpenRLHF 0.9.3 ignores `--input_template` when `--apply_chat_template` is on, so the instruction is
part of each data row's `input`; the chat template is applied on top of it.
"""

from __future__ import annotations

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def build_input(problem: str) -> str:
    """The `input` field of a data row: the problem followed by the answer-format instruction."""
    return f"{problem.strip()}\n\n{INSTRUCTION}"


def strip_instruction(text: str) -> str:
    """The problem text of an `input` field (inverse of build_input; plain problems pass through)."""
    text = text.rstrip()
    if text.endswith(INSTRUCTION):
        text = text[: -len(INSTRUCTION)]
    return text.strip()


def render_prompt(tokenizer, input_text: str, **template_kwargs) -> str:
    """Render one `input` exactly as OpenRLHF's PromptDataset does with --apply_chat_template."""
    chat = [{"role": "user", "content": input_text}]
    return tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, **template_kwargs)
