"""Waits on Ray actors with a deadline and a liveness check: a dead or silent role fails the run named, within
minutes, instead of holding the other ranks until DeepSpeed's 60-minute NCCL timeout.

The patched files wait through `get(refs, role=...)`, or their `ray` is a hook's `DeadlineRay`, wherever 0.9.3
called `ray.get` without a timeout.
Any answer restarts the clock (like `rft.train.engine_calls`); a dead actor fails at once, naming role and rank.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from rft.train.engine_calls import ref_key

DEFAULT_TIMEOUT_S = 1800.0  # an actor-group call: 2x the 120b train phase at the slowest gathers (858 s)
PLACEMENT_TIMEOUT_S = 600.0  # a placement group that Ray cannot place (GPUs missing or taken)
NO_DEADLINE = 0.0  # the whole run's waits (fit) and the async trainer's vLLM lock: liveness only
TIMEOUT_ENV = "RFT_WAIT_TIMEOUT_S"
SLICE_S = 5.0  # the longest single ray.wait: how often the deadline is checked


class WaitTimeout(RuntimeError):
    """Nothing answered for the whole deadline; the message names the role and its silent ranks."""


class RoleDied(RuntimeError):
    """An actor the wait was on died; the message names the role and the rank."""


def resolve_timeout(timeout: float | None) -> float:
    """`timeout` seconds as given (<= 0: no deadline), or $RFT_WAIT_TIMEOUT_S, or DEFAULT_TIMEOUT_S."""
    if timeout is not None:
        return float(timeout)
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError as e:
        raise ValueError(f"${TIMEOUT_ENV}={raw!r}: seconds expected (<= 0 waits forever)") from e


def engine_timeout(args: Any) -> float:
    """The engines' deadline: `--vllm_call_timeout` (rft.train.engine_calls' default when unset)."""
    from rft.train.engine_calls import resolve_timeout as engine_resolve

    return engine_resolve(getattr(args, "vllm_call_timeout", None))


def rank_names(n: int, names: Sequence[str] | None) -> list[str]:
    return list(names) if names is not None else [f"rank {i}" for i in range(n)]


def get(refs: Any, role: str, timeout: float | None = None, *, names: Sequence[str] | None = None,
        setting: str = f"${TIMEOUT_ENV}", clock: Callable[[], float] = time.monotonic) -> Any:
    """`ray.get(refs)` (one ref or a list): raises RoleDied naming `role` and the rank as soon as one of its actors
    dies, WaitTimeout naming the silent ranks when none answers for `timeout` seconds; a task's own exception
    propagates with a note naming role and rank. `setting` names what sets the deadline."""
    import ray
    from ray.exceptions import RayActorError

    single = not isinstance(refs, list | tuple)
    items = [refs] if single else list(refs)
    labels = rank_names(len(items), names)
    deadline = resolve_timeout(timeout)
    index = {ref_key(r): i for i, r in enumerate(items)}
    values: dict[int, Any] = {}
    pending, last = list(items), clock()
    while pending:
        slice_s = SLICE_S if deadline <= 0 else max(0.0, min(SLICE_S, deadline - (clock() - last)))
        ready, pending = ray.wait(pending, num_returns=1, timeout=slice_s)
        for ref in ready:
            i = index[ref_key(ref)]
            try:
                values[i] = ray.get(ref)
            except RayActorError as e:
                raise RoleDied(f"{role}: {labels[i]} died while rank 0 waited on it ({type(e).__name__}); "
                               f"the other ranks may be stuck in a collective") from e
            except Exception as e:
                e.add_note(f"rft: raised by {role} {labels[i]}")
                raise
        if ready:
            last = clock()
        elif deadline > 0 and clock() - last >= deadline:
            silent = ", ".join(labels[index[ref_key(r)]] for r in pending)
            raise WaitTimeout(f"{role}: no answer from {silent} for {clock() - last:.0f} s (deadline {deadline:.0f} s, "
                              f"{setting}); the role is hung or dead")
    out = [values[i] for i in range(len(items))]
    return out[0] if single else out


class DeadlineRay:
    """The `ray` a patched OpenRLHF module sees: every attribute is Ray's, except `get`, which waits through `get`
    above, naming the waiting call site (file:line function, and what it waits on where `roles` says) as the role."""

    def __init__(self, timeouts: dict[str, float] | None = None, roles: dict[str, str] | None = None):
        self._timeouts = dict(timeouts or {})  # function qualname -> deadline (default: resolve_timeout(None))
        self._roles = dict(roles or {})  # function qualname -> what its waits are on, e.g. "actor group (fit)"

    def __getattr__(self, name: str) -> Any:
        import ray

        return getattr(ray, name)

    def get(self, refs: Any, timeout: float | None = None, *, names: Sequence[str] | None = None) -> Any:
        """`get(refs, role=<call site>, timeout)`: `timeout` (<= 0: liveness only) or the caller's table entry."""
        import sys

        frame = sys._getframe(1)
        qualname = frame.f_code.co_qualname
        role = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {qualname}"
        if qualname in self._roles:
            role += f" ({self._roles[qualname]})"
        return get(refs, role, timeout if timeout is not None else self._timeouts.get(qualname), names=names)
