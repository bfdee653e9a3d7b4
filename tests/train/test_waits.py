"""rft.train.waits on a real local Ray, and every wait of the patched OpenRLHF routed through it or timed."""

from __future__ import annotations

import ast
import os
import re
import signal
import time
from pathlib import Path

import pytest

from rft.train import waits

PATCHES = Path(__file__).resolve().parents[2] / "patches"


def patched_files() -> list[str]:
    """The OpenRLHF files the series changes."""
    names = [ln.strip() for ln in (PATCHES / "series").read_text().splitlines() if ln.strip() and ln[0] != "#"]
    files = {m for n in names for m in re.findall(r"^\+\+\+ b/(\S+)", (PATCHES / n).read_text(), re.M)}
    return sorted(files)


def deadline_bound_ray(tree: ast.Module) -> bool:
    """True when the module's `ray` is imported from rft.train.hooks (whose `get` waits with a deadline)."""
    return any(isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rft.train.hooks")
               and any((alias.asname or alias.name) == "ray" for alias in node.names) for node in tree.body)


def untimed_ray_gets(source: str) -> list[int]:
    """Lines of `ray.get(...)` calls without a `timeout=` keyword, in a module whose `ray` is Ray's own."""
    tree = ast.parse(source)
    if deadline_bound_ray(tree):
        return []
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "ray"
            and not any(k.arg == "timeout" for k in node.keywords)]


def test_the_scan_finds_an_untimed_wait():
    assert untimed_ray_gets("import ray\nray.get(x)\nray.get(x, timeout=3)\nwaits.get(x, role='a')\n") == [2]
    assert untimed_ray_gets("import ray\nfrom rft.train.hooks.ppo_actor import ray\nray.get(x)\n") == []
    assert untimed_ray_gets("import ray\nfrom rft.train.hooks import ppo_actor\nray.get(x)\n") == [3]


def test_the_deadline_bound_ray_waits_with_the_engines_deadline(monkeypatch):
    """ppo_actor.patch's `ray` (rft.train.hooks.ppo_actor.ray): get() is rft.train.waits.get with the engines'
    deadline and `--vllm_call_timeout` named; every other attribute is Ray's own."""
    import ray as real_ray

    from rft.train.hooks import ppo_actor

    seen = []
    monkeypatch.setattr(waits, "get", lambda refs, role, timeout, setting: seen.append((refs, timeout, setting)))
    monkeypatch.setattr(ppo_actor.ray, "timeout", 42.0)
    ppo_actor.ray.get(["r"])
    assert seen == [(["r"], 42.0, "--vllm_call_timeout")]
    assert ppo_actor.ray.remote is real_ray.remote and ppo_actor.ray.put is real_ray.put


def hooked_ray(source: str) -> str | None:
    """The rft.train.hooks module a file takes its `ray` from (`from rft.train.hooks.X import ray`), if any."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rft.train.hooks."):
            if any((a.asname or a.name) == "ray" for a in node.names):
                return node.module
    return None


def test_the_scan_sees_a_hooked_ray():
    assert hooked_ray("from rft.train.hooks.launcher import ray\nray.get(x)\n") == "rft.train.hooks.launcher"
    assert hooked_ray("import ray\nray.get(x)\n") is None


def untimed(source: str) -> list[int]:
    """`untimed_ray_gets`, except in a file whose `ray` is a hook's DeadlineRay (every get there has a deadline)."""
    module = hooked_ray(source)
    if module is None:
        return untimed_ray_gets(source)
    import importlib

    assert isinstance(importlib.import_module(module).ray, waits.DeadlineRay), module
    return []


def test_every_ray_get_in_the_patched_files_has_a_deadline(patched_openrlhf):
    """Rank 0 never waits on engines or actor groups without a deadline: each `ray.get` in a file the series
    patches carries a timeout, goes through rft.train.waits.get / rft.train.engine_calls.gather, or is the `get` of
    a hook's DeadlineRay (the file's `ray`)."""
    files = patched_files()
    assert "openrlhf/trainer/ppo_trainer.py" in files and len(files) > 10
    found = {f: untimed((patched_openrlhf / f).read_text()) for f in files}
    assert not {f: lines for f, lines in found.items() if lines}, "ray.get without a deadline (file: lines)"


# --- on a real local Ray --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_local():
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def rank_class(ray_local):
    class Rank:
        def pid(self) -> int:
            return os.getpid()

        def work(self, seconds: float) -> int:
            time.sleep(seconds)
            return os.getpid()

        def fail(self) -> None:
            raise ValueError("bad batch")

    return ray_local.remote(num_cpus=0)(Rank)


def test_answers_come_back_in_order(ray_local, rank_class):
    ranks = [rank_class.remote() for _ in range(2)]
    pids = ray_local.get([r.pid.remote() for r in ranks], timeout=60)
    assert waits.get([ranks[0].work.remote(0.5), ranks[1].work.remote(0)], "actor group", 30) == pids
    assert waits.get(ranks[1].work.remote(0), "actor group", 30) == pids[1]


def test_a_sigkilled_rank_fails_the_wait_naming_role_and_rank_at_once(ray_local, rank_class):
    """Rank 1 is SIGKILLed mid-call while rank 0 stays busy (as in a collective): the wait raises within seconds,
    well inside its deadline, naming the role and rank 1."""
    ranks = [rank_class.remote() for _ in range(2)]
    victim = ray_local.get(ranks[1].pid.remote(), timeout=60)
    refs = [r.work.remote(60) for r in ranks]
    time.sleep(1)
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(waits.RoleDied, match=r"actor group: rank 1 died"):
        waits.get(refs, "actor group", 120)
    assert time.monotonic() - start < 30
    for r in ranks:
        ray_local.kill(r)


def test_a_silent_rank_fails_at_the_deadline_named(ray_local, rank_class):
    ranks = [rank_class.remote() for _ in range(2)]
    refs = [ranks[0].work.remote(0), ranks[1].work.remote(60)]
    start = time.monotonic()
    with pytest.raises(waits.WaitTimeout, match=r"reference group: no answer from ref 1 for [23] s \(deadline 2 s"):
        waits.get(refs, "reference group", 2, names=["ref 0", "ref 1"])
    assert 2 <= time.monotonic() - start < 10
    for r in ranks:
        ray_local.kill(r)


def test_a_task_error_keeps_its_type_and_names_the_rank(ray_local, rank_class):
    ranks = [rank_class.remote() for _ in range(2)]
    with pytest.raises(ValueError, match="bad batch") as info:
        waits.get([ranks[0].work.remote(0), ranks[1].fail.remote()], "critic group", 30)
    assert "rft: raised by critic group rank 1" in info.value.__notes__


def test_the_deadline_setting(monkeypatch):
    monkeypatch.delenv(waits.TIMEOUT_ENV, raising=False)
    assert waits.resolve_timeout(None) == waits.DEFAULT_TIMEOUT_S and waits.resolve_timeout(0) == 0
    monkeypatch.setenv(waits.TIMEOUT_ENV, "90")
    assert waits.resolve_timeout(None) == 90 and waits.resolve_timeout(5) == 5
    monkeypatch.setenv(waits.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="RFT_WAIT_TIMEOUT_S='soon'"):
        waits.resolve_timeout(None)


def test_a_deadline_ray_names_the_call_site_and_takes_its_deadline_from_the_table(ray_local, rank_class):
    """The `ray` a hooked OpenRLHF file sees: Ray's attributes, and a `get` whose role is the calling file:line and
    function and whose deadline is the table's entry for that function (else the explicit timeout)."""
    rank = rank_class.remote()

    class Waiter:
        def short(self):
            return deadline_ray.get(rank.work.remote(60))

    deadline_ray = waits.DeadlineRay({Waiter.short.__qualname__: 2})
    assert deadline_ray.ObjectRef is ray_local.ObjectRef

    start = time.monotonic()
    with pytest.raises(waits.WaitTimeout, match=r"^test_waits\.py:\d+ .*Waiter\.short: no answer from rank 0 .*deadline 2 s"):
        Waiter().short()
    assert time.monotonic() - start < 10
    ray_local.kill(rank)
    idle = rank_class.remote()
    assert deadline_ray.get(idle.pid.remote(), timeout=30) == ray_local.get(idle.pid.remote(), timeout=60)
    ray_local.kill(idle)


def test_a_deadline_ray_role_says_what_the_function_waits_on(ray_local, rank_class):
    rank = rank_class.remote()
    ray_local.get(rank.pid.remote(), timeout=60)

    def fit():
        return deadline_ray.get(rank.work.remote(60))

    deadline_ray = waits.DeadlineRay({fit.__qualname__: 2}, roles={fit.__qualname__: "actor group: fit"})
    with pytest.raises(waits.WaitTimeout, match=r"^test_waits\.py:\d+ .*fit \(actor group: fit\): no answer from rank 0"):
        fit()
    ray_local.kill(rank)
