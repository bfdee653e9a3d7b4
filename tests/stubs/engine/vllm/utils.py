"""Stub of vllm.utils: random_uuid as vLLM defines it (a hex uuid4)."""

import uuid


def random_uuid() -> str:
    """A random request id."""
    return uuid.uuid4().hex
