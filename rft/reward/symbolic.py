"""Symbolic equivalence through math-verify, run in helper processes with a hard time bound.

math-verify's own timeouts use `signal.alarm`, which raises in OpenRLHF's reward worker threads; with
them off it can hang on inputs such as `10^{10^{10}}`. So the comparison runs in a child process
(`python -m rft.reward.symbolic`, JSON lines over pipes) where math-verify runs in its main thread with its
timeouts on, and the caller kills and replaces the child if it does not answer within
`RFT_SYMBOLIC_TIMEOUT` seconds. Only LaTeX parsing is used (never math-verify's `parse_expr` path,
which calls `eval`), and only strings made of a fixed safe character set are sent at all.
Run directly, this module is the child: it reads `{"a": pred, "b": gold}` lines and answers `{"eq": bool}`.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import re
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger(__name__)

TIMEOUT_S = float(os.environ.get("RFT_SYMBOLIC_TIMEOUT", "5"))
WORKERS = max(1, int(os.environ.get("RFT_SYMBOLIC_WORKERS", "2")))
MAX_CHARS = 300
CACHE_SIZE = 4096

# Letters, digits, LaTeX punctuation. No quotes, backticks, `#`, `@`, `;` or `__`: nothing that can
# spell Python beyond plain arithmetic even if some parser downstream were to `eval` it.
_SAFE = re.compile(r"[A-Za-z0-9\\{}\[\]()^_+\-*/=,.|!<>: ]+")
_SAFE_WORDS = re.compile(r"[A-Za-z]{4,}")

stats = {"calls": 0, "cache_hits": 0, "timeouts": 0, "errors": 0, "rejected": 0}


def is_safe_latex(text: str) -> bool:
    """True when text may be handed to the LaTeX parser: short, a fixed charset, no bare words."""
    if not text or len(text) > MAX_CHARS or not _SAFE.fullmatch(text) or "__" in text:
        return False
    # Long letter runs must be LaTeX commands (`\sqrt`), not prose or identifiers (`import`, `system`).
    return all(text[m.start() - 1 : m.start()] == "\\" for m in _SAFE_WORDS.finditer(text))


class _Worker:
    """One child process answering comparison requests over its stdin/stdout pipes."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rft.reward.symbolic"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=root,
        )
        self.ready = False
        self.buf = b""

    def ask(self, pred: str, gold: str, timeout: float) -> bool | None:
        """Send one request; None on timeout or a dead child (the caller then discards this worker)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = (json.dumps({"a": pred, "b": gold}) + "\n").encode()
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except OSError:
            return None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            if b"\n" in self.buf:
                reply, self.buf = self.buf.split(b"\n", 1)
                try:
                    msg = json.loads(reply)
                except ValueError:
                    return None
                if "ready" in msg:
                    self.ready = True
                    continue
                return bool(msg.get("eq"))
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self.buf += chunk

    def kill(self) -> None:
        """Terminate the child and reap it."""
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # best effort on the way out
            pass


class SymbolicPool:
    """A small pool of `_Worker`s shared by all threads; workers start lazily and are replaced on timeout."""

    def __init__(self, size: int = WORKERS, timeout: float = TIMEOUT_S, startup_timeout: float = 60.0):
        self.size = size
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self.slots = threading.Semaphore(size)
        self.lock = threading.Lock()
        self.all: list[_Worker] = []

    def equal(self, pred: str, gold: str) -> bool | None:
        """Ask a worker; None when it timed out or failed."""
        with self.slots:
            try:
                worker = self.idle.get_nowait()
            except queue.Empty:
                worker = _Worker()
                with self.lock:
                    self.all.append(worker)
            # The first request also waits for the child to import math-verify.
            result = worker.ask(pred, gold, self.timeout if worker.ready else self.startup_timeout)
            if result is None:
                stats["timeouts"] += 1
                log.warning(
                    "rft.reward.symbolic: no answer within %.1fs for %r vs %r; worker replaced",
                    self.timeout,
                    pred[:80],
                    gold[:80],
                )
                worker.kill()
                with self.lock:
                    if worker in self.all:
                        self.all.remove(worker)
            else:
                self.idle.put(worker)
            return result

    def close(self) -> None:
        """Kill every worker."""
        with self.lock:
            workers, self.all = self.all, []
        for w in workers:
            w.kill()


_pool: SymbolicPool | None = None
_pool_lock = threading.Lock()
_cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
_cache_lock = threading.Lock()


def get_pool() -> SymbolicPool:
    """The process-wide pool, created on first use."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = SymbolicPool()
            atexit.register(_pool.close)
        return _pool


def symbolic_equal(pred: str, gold: str) -> bool | None:
    """math-verify's verdict on two normalized LaTeX answers; None if unsafe, failed or timed out."""
    if not (is_safe_latex(pred) and is_safe_latex(gold)):
        stats["rejected"] += 1
        return None
    key = (pred, gold)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            stats["cache_hits"] += 1
            return _cache[key]
    stats["calls"] += 1
    try:
        result = get_pool().equal(pred, gold)
    except Exception as err:  # a reward must never raise
        stats["errors"] += 1
        log.warning("rft.reward.symbolic: comparison failed: %s", err)
        return None
    if result is not None:
        with _cache_lock:
            _cache[key] = result
            if len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    return result


def _serve() -> None:
    """Child main loop: compare with math-verify (LaTeX only, its own signal timeouts on)."""
    from math_verify import LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig(boxed_match_priority=0)]
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            gold = parse("$" + req["b"] + "$", extraction_config=config, parsing_timeout=2)
            pred = parse("$" + req["a"] + "$", extraction_config=config, parsing_timeout=2)
            eq = bool(gold and pred and verify(gold, pred, timeout_seconds=2))
        except Exception:  # any failure is "not shown equal"
            eq = False
        out.write(json.dumps({"eq": eq}) + "\n")
        out.flush()


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    _serve()
