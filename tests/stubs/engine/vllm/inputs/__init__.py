"""Stub of vllm.inputs: TokensPrompt is a TypedDict-like dict in vLLM too."""


class TokensPrompt(dict):
    """dict(prompt_token_ids=[...]) like the real TypedDict."""
