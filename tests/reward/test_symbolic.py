"""math-verify behind a process boundary: bounded in time, usable from threads, never runs model text."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from rft.reward import symbolic
from rft.reward.equality import answers_equal
from rft.reward.exact_match import grade, make_reward_func
from rft.reward.symbolic import SymbolicPool, is_safe_latex, symbolic_equal


@pytest.fixture(scope="module")
def pool():
    p = SymbolicPool(size=1, timeout=30.0)
    assert p.equal("x", "x") is True  # starts the child (imports math-verify)
    yield p
    p.close()


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        ("x^2+2x+1", True),
        ("\\frac{\\sqrt{3}}{2}", True),
        ("[0,\\infty)", True),
        ("\\sin x", True),
        ("__import__('os').system('touch f')", False),
        ("__import__(\"os\")", False),
        ("import os", False),
        ("lambda: 1", False),
        ("exec(1)", False),
        ("system(1)", False),
        ("x" * 400, False),
        ("", False),
        ("a;b", False),
        ("x#y", False),
    ],
)
def test_safe_charset(text: str, safe: bool) -> None:
    assert is_safe_latex(text) is safe


def test_pool_compares(pool: SymbolicPool) -> None:
    assert pool.equal("(x+1)^2", "x^2+2x+1") is True
    assert pool.equal("(x+1)^2", "x^2+1") is False


def test_math_verify_default_timeouts_fail_in_threads() -> None:
    """The reason for the process: math-verify's default (signal) timeouts do not work in a thread."""
    from math_verify import parse

    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = parse("$\\frac{1}{2}$")
        except Exception as err:
            out["error"] = err

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert "error" in out or out["result"] == []


def test_answers_equal_from_threads() -> None:
    results: list[bool] = []

    def run() -> None:
        results.append(answers_equal("x^2-1", "(x-1)(x+1)"))
        results.append(answers_equal("x^2+1", "(x-1)(x+1)"))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 4 and results.count(False) == 4


def test_timeout_kills_and_replaces_worker() -> None:
    """A comparison slower than the bound returns None in time; the next call gets a fresh worker."""
    p = SymbolicPool(size=1, timeout=30.0)
    try:
        assert p.equal("x", "x") is True
        p.timeout = 0.3
        before = symbolic.stats["timeouts"]
        start = time.perf_counter()
        assert p.equal("(x+1)^{3000}", "x^{3000}+1") is None
        assert time.perf_counter() - start < 1.5
        assert symbolic.stats["timeouts"] == before + 1
        p.timeout = 30.0
        assert p.equal("2x", "x+x") is True
        assert len(p.all) == 1
    finally:
        p.close()


def test_reward_is_bounded_when_math_verify_hangs_in_a_worker_thread(monkeypatch) -> None:
    """OpenRLHF's path: reward_func in asyncio.to_thread reaches math-verify, which would run for minutes;
    the sample is scored (as not shown equal) within the bound, from the worker thread, and the next is fine."""
    p = SymbolicPool(size=1, timeout=30.0)
    callers: list[bool] = []
    equal = p.equal

    def recording_equal(pred: str, gold: str) -> bool | None:
        callers.append(threading.current_thread() is threading.main_thread())
        return equal(pred, gold)

    try:
        assert p.equal("x", "x") is True  # child started, math-verify imported
        p.timeout = 0.3
        monkeypatch.setattr(p, "equal", recording_equal)
        monkeypatch.setattr(symbolic, "_pool", p)
        monkeypatch.setattr(symbolic, "_cache", type(symbolic._cache)())
        fn = make_reward_func()

        async def score(response: str, label: str) -> dict:
            return await asyncio.wait_for(asyncio.to_thread(fn, [response], [""], [label]), timeout=20)

        start = time.perf_counter()
        slow = asyncio.run(score("\\boxed{(x+1)^{3000}}<|im_end|>", "x^{3000}+1"))
        assert time.perf_counter() - start < 2.0
        assert float(slow["rewards"][0]) == 0.0 and float(slow["extra_logs"]["has_boxed"][0]) == 1.0
        p.timeout = 30.0
        ok = asyncio.run(score("\\boxed{\\sin x + 1}<|im_end|>", "1+\\sin x"))
        assert float(ok["rewards"][0]) == 1.0
        assert callers == [False, False]  # both comparisons ran off the main thread
    finally:
        p.close()


def test_model_text_is_never_executed(tmp_path: Path, pool: SymbolicPool) -> None:
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"
    # Through the reward, against a numeric and a symbolic label.
    for label in ("1", "x+1", "\\frac{\\sqrt{3}}{2}"):
        g = grade(f"I think \\boxed{{{payload}}}<|im_end|>", label)
        assert not g.correct
    # The guard refuses it before any parser sees it.
    assert symbolic_equal(payload, "x+1") is None
    # Even sent straight to the math-verify child (LaTeX parsing only), nothing runs.
    assert pool.equal(payload, "0") is False
    assert pool.equal("__import__('os').system('touch " + str(marker) + "')", "x") is False
    time.sleep(0.2)
    assert not marker.exists()


def test_cache_serves_repeats(monkeypatch) -> None:
    calls: list[tuple[str, str]] = []

    class CountingPool:
        def equal(self, p: str, g: str) -> bool:
            calls.append((p, g))
            return True

    monkeypatch.setattr(symbolic, "get_pool", lambda: CountingPool())
    monkeypatch.setattr(symbolic, "_cache", type(symbolic._cache)())
    assert symbolic_equal("y^3", "y\\cdot y^2") is True
    assert symbolic_equal("y^3", "y\\cdot y^2") is True
    assert calls == [("y^3", "y\\cdot y^2")]
