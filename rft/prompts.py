"""Prompt text: the instruction every problem carries and the chat rendering train and eval share.

OpenRLHF 0.9.3 ignores `--input_template` when `--apply_chat_template` is on, so the instruction is
part of each data row's `input`; the chat template is applied on top of it.
"""

from __future__ import annotations

from datetime import datetime

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


# gpt-oss's chat template writes "Current date: <today>" into every prompt and defaults reasoning effort
# to "medium". OpenRLHF renders training prompts once at startup with no template kwargs, so training
# sees medium effort and its launch date; eval pins both so its prompts never change from day to day.
DEFAULT_REASONING_EFFORT = "medium"
DEFAULT_CHAT_DATE = "2025-08-05"


def fixed_strftime_now(date: str):
    """A stand-in for the templates' `strftime_now` global that formats the fixed day `date` (YYYY-MM-DD)."""
    day = datetime.strptime(date, "%Y-%m-%d")

    def strftime_now(fmt: str) -> str:
        return day.strftime(fmt)

    return strftime_now


def chat_template_kwargs(reasoning_effort: str | None = None, date: str | None = None) -> dict:
    """Template kwargs pinning gpt-oss's reasoning effort and date; templates ignore what they don't use."""
    kwargs: dict = {}
    if reasoning_effort is not None:
        kwargs["reasoning_effort"] = reasoning_effort
    if date is not None:
        kwargs["strftime_now"] = fixed_strftime_now(date)
    return kwargs


def encode_prompt(tokenizer, input_text: str, **template_kwargs) -> list[int]:
    """Prompt token ids as OpenRLHF feeds vLLM: the rendered text tokenized with add_special_tokens=False."""
    return tokenizer(render_prompt(tokenizer, input_text, **template_kwargs), add_special_tokens=False)[
        "input_ids"
    ]
