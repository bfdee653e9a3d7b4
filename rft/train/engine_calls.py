"""Waiting on vLLM engine calls with a deadline (`--vllm_call_timeout`): a hung engine fails the run within
minutes, named, instead of holding the other ranks in a collective until the 60-minute process-group timeout.

Any answer counts as progress and restarts the clock, so a slow but live engine never trips it; when nothing
answers for `timeout` seconds, `EngineTimeout` names the engines whose calls are still outstanding
(docs/launching.md#smoke-mode). The patches call `gather` where 0.9.3 called `ray.get` on engine refs, and
`next_in_order` in the rollout loop, which takes the groups in dispatch order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_TIMEOUT_S = 600.0  # seconds without any engine answering: longer than one prompt's rollout at 20b/120b
WAIT_SLICE_S = 10.0  # the longest single ray.wait, so the deadline is checked at least this often


class EngineTimeout(RuntimeError):
    """No engine answered for the whole timeout; the message names the silent ones."""


def resolve_timeout(value: float | None) -> float:
    """`--vllm_call_timeout` as given (seconds; <= 0 waits forever) or DEFAULT_TIMEOUT_S when unset."""
    return DEFAULT_TIMEOUT_S if value is None else float(value)


def silent_message(what: str, silent: Sequence[str], waited: float) -> str:
    """The one-line failure: which call, which engines never answered, and for how long."""
    return (f"vLLM engine call {what!r}: no answer from {', '.join(silent)} for {waited:.0f} s "
            f"(--vllm_call_timeout); the engine is hung or dead")


class ProgressWatch:
    """A deadline that restarts whenever any outstanding call answers."""

    def __init__(self, what: str, timeout: float | None, clock: Callable[[], float] = time.monotonic):
        self.what, self.timeout, self.clock = what, resolve_timeout(timeout), clock
        self.last = clock()
        self.answered: set = set()  # ref keys already counted as progress (next_in_order)

    def check(self, answered: int, silent: Sequence[str] | Callable[[], Sequence[str]]) -> None:
        """After one wait: `answered` calls came back; `silent` names the engines still outstanding (or a
        function that does, called only on a timeout)."""
        now = self.clock()
        if answered:
            self.last = now
        elif self.timeout > 0 and now - self.last >= self.timeout:
            names = silent() if callable(silent) else silent
            if names:
                raise EngineTimeout(silent_message(self.what, names, now - self.last))


def gather(refs: Sequence[Any], names: Sequence[str], what: str, timeout: float | None, *,
           wait: Callable | None = None, get: Callable | None = None,
           clock: Callable[[], float] = time.monotonic) -> list[Any]:
    """`ray.get(refs)` in order, raising EngineTimeout naming `names[i]` of each ref that never answered."""
    if wait is None or get is None:
        import ray

        wait, get = wait or ray.wait, get or ray.get
    watch = ProgressWatch(what, timeout, clock)
    index = {ref_key(r): i for i, r in enumerate(refs)}
    pending = list(refs)
    while pending:
        slice_s = WAIT_SLICE_S if watch.timeout <= 0 else min(WAIT_SLICE_S, watch.timeout)
        ready, pending = wait(pending, num_returns=len(pending), timeout=slice_s)
        watch.check(len(ready), [names[index[ref_key(r)]] for r in pending])
    return list(get(list(refs)))


def next_in_order(pending: Sequence[Any], watch: ProgressWatch,
                  silent: Callable[[Sequence[Any]], Sequence[str]], *, wait: Callable | None = None
                  ) -> tuple[list[Any], list[Any]]:
    """([pending[0]], the rest) once the oldest call has answered: results taken in dispatch order. An answer
    behind the head restarts `watch`'s clock too; on its timeout `silent(refs not answered)` names the engines."""
    if wait is None:
        import ray

        wait = ray.wait
    head, rest = pending[0], list(pending[1:])
    while True:
        slice_s = WAIT_SLICE_S if watch.timeout <= 0 else min(WAIT_SLICE_S, watch.timeout)
        ready, _ = wait([head], num_returns=1, timeout=slice_s)
        if ready:
            watch.check(1, ())
            return [head], rest
        behind, waiting = wait(rest, num_returns=len(rest), timeout=0) if rest else ([], [])
        new = {ref_key(r) for r in behind} - watch.answered
        watch.answered |= new
        watch.check(len(new), lambda outstanding=[head, *waiting]: silent(outstanding))


def ref_key(ref: Any) -> Any:
    """A key for an object ref that survives ray.wait handing back equal but new ObjectRef objects."""
    return ref.hex() if callable(getattr(ref, "hex", None)) else id(ref)


def engine_names(engines: Sequence[Any]) -> list[str]:
    """A label per engine for the failure message: its index and, where Ray has it, its actor id."""
    out = []
    for i, engine in enumerate(engines):
        actor_id = getattr(getattr(engine, "_actor_id", None), "hex", None)
        out.append(f"engine {i}" + (f" (actor {actor_id()[:12]})" if callable(actor_id) else ""))
    return out


def silent_engines(pending: Sequence[Any], engine_of: dict, engines: Sequence[Any]) -> list[str]:
    """The names of the engines the `pending` refs wait on (`engine_of`: ref_key -> engine index)."""
    names = engine_names(engines)
    return sorted({names[engine_of[ref_key(r)]] for r in pending})
