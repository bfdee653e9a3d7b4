"""The trainer's tokenizer sent to the vLLM engines once: one object-store copy, one load per engine process.

0.9.3 passes `hf_tokenizer=self.tokenizer` to every `generate_responses.remote(...)`, so Ray pickles it per call
and the engine unpickles it on its event loop (gpt-oss's 201k vocab: 12.9 MB, 0.56 s a load). The patches send
`shared(self, self.tokenizer)` instead (a `TokenizerRef`: a few bytes), and the engine takes `await local(...)`.
"""

from __future__ import annotations

import asyncio
from typing import Any

OWNER_ATTR = "_rft_tokenizer_ref"


class TokenizerRef:
    """A tokenizer in Ray's object store; pickles as its ObjectRef (nested, so Ray does not resolve it per call)."""

    __slots__ = ("ref",)

    def __init__(self, ref: Any):
        self.ref = ref

    def __reduce__(self):
        return (TokenizerRef, (self.ref,))


def shared(owner: Any, tokenizer: Any) -> TokenizerRef | None:
    """`tokenizer` put into the object store once per owner (cached on it); None stays None."""
    if tokenizer is None:
        return None
    cached = getattr(owner, OWNER_ATTR, None)
    if cached is None or cached[0] is not tokenizer:
        import ray

        cached = (tokenizer, TokenizerRef(ray.put(tokenizer)))
        setattr(owner, OWNER_ATTR, cached)
    return cached[1]


_LOCAL: dict[str, asyncio.Future] = {}  # ref hex -> the engine process's one copy (a task, so callers share it)


async def _fetch(ref: Any) -> Any:
    return await ref


async def local(tokenizer: Any) -> Any:
    """The engine's own copy of a TokenizerRef, fetched once per process; any other value as given."""
    if not isinstance(tokenizer, TokenizerRef):
        return tokenizer
    key = tokenizer.ref.hex()
    task = _LOCAL.get(key)
    if task is None or (task.done() and task.exception() is not None):
        task = _LOCAL[key] = asyncio.ensure_future(_fetch(tokenizer.ref))
    return await task
