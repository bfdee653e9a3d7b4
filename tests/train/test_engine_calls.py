"""rft/train/engine_calls.py: a deadline on engine calls that restarts on any answer and names the silent engines.

A fake ray.wait answers from a script of (seconds spent, refs that answer) and advances a fake clock."""

from __future__ import annotations

import pytest

from rft.train.engine_calls import (
    DEFAULT_TIMEOUT_S,
    EngineTimeout,
    ProgressWatch,
    gather,
    next_in_order,
    ref_key,
    resolve_timeout,
    silent_engines,
)


class FakeRay:
    """ray.wait / ray.get over string refs; `script[i]` = (seconds this wait takes, refs that answer in it)."""

    def __init__(self, script: list[tuple[float, set[str]]]):
        self.script, self.now, self.done, self.calls = list(script), 0.0, set(), 0

    def clock(self) -> float:
        return self.now

    def wait(self, pending, num_returns, timeout):
        spent, answers = self.script.pop(0) if self.script else (timeout, set())
        self.calls += 1
        self.now += min(spent, timeout)
        self.done |= answers
        return [r for r in pending if r in self.done], [r for r in pending if r not in self.done]

    def get(self, refs):
        assert all(r in self.done for r in refs)
        return [f"answer of {r}" for r in refs]


class Ref:
    """An ObjectRef stand-in: ray.wait hands back new objects equal by hex(), as Ray's may."""

    def __init__(self, name: str):
        self.name = name

    def hex(self) -> str:
        return self.name


def _gather(fake: FakeRay, refs, timeout):
    return gather(refs, [f"engine {r}" for r in refs], "apply_lora_update", timeout,
                  wait=fake.wait, get=fake.get, clock=fake.clock)


def test_all_answer_results_come_back_in_order():
    fake = FakeRay([(3.0, {"b"}), (2.0, {"a"})])
    assert _gather(fake, ["a", "b"], 60) == ["answer of a", "answer of b"]


def test_a_silent_engine_fails_at_the_timeout_named():
    fake = FakeRay([(1.0, {"a"})])  # "a" answers at once, "b" never
    with pytest.raises(EngineTimeout, match=r"'apply_lora_update': no answer from engine b for 60 s") as err:
        _gather(fake, ["a", "b"], 60)
    assert "engine a" not in str(err.value)
    assert fake.now == pytest.approx(61.0)  # the last answer at 1 s, then 60 s of silence


def test_answers_behind_the_head_restart_the_clock():
    # "c" answers after 50 s, "b" after 100 s more, "a" after 100 s more: never 120 s without an answer
    fake = FakeRay([(10.0, set())] * 5 + [(10.0, {"c"})] + [(10.0, set())] * 9 + [(10.0, {"b"})]
                   + [(10.0, set())] * 9 + [(10.0, {"a"})])
    assert _gather(fake, ["a", "b", "c"], 120) == ["answer of a", "answer of b", "answer of c"]
    assert fake.now == pytest.approx(260.0)


def test_no_timeout_waits_forever():
    fake = FakeRay([(10.0, set())] * 1000 + [(10.0, {"a"})])
    assert _gather(fake, ["a"], 0) == ["answer of a"] and fake.now == pytest.approx(10010.0)


def test_progress_watch_in_a_rollout_loop():
    t = [0.0]
    watch = ProgressWatch("generate_responses", 30, clock=lambda: t[0])
    for _ in range(5):
        t[0] += 20
        watch.check(1, ["engine 0"])  # an answer each time: fine for ever
    t[0] += 29
    watch.check(0, ["engine 0", "engine 1"])
    t[0] += 1
    with pytest.raises(EngineTimeout, match="engine 0, engine 1 for 30 s"):
        refs = [Ref("r0"), Ref("r1"), Ref("r2")]
        engine_of = {ref_key(r): i for r, i in zip(refs, (1, 0, 1), strict=True)}
        watch.check(0, lambda: silent_engines(refs, engine_of, [None, None]))


def test_unset_timeout_is_the_default():
    assert resolve_timeout(None) == DEFAULT_TIMEOUT_S >= 300 and resolve_timeout(90) == 90.0


def test_refs_are_matched_by_hex_not_identity():
    refs = [Ref("a"), Ref("b")]
    done: set[str] = set()
    t = [0.0]

    def wait(pending, num_returns, timeout):
        t[0] += timeout
        done.add("a")
        return ([Ref(r.name) for r in pending if r.name in done], [Ref(r.name) for r in pending if r.name not in done])

    with pytest.raises(EngineTimeout, match="no answer from engine b for"):
        gather(refs, ["engine a", "engine b"], "sleep", 30, wait=wait, get=lambda r: r, clock=lambda: t[0])


def test_next_in_order_takes_the_oldest_call_first_however_the_others_finish():
    ray = FakeRay([(1.0, {"b", "c"}), (1.0, set()), (2.0, {"a"})])
    watch = ProgressWatch("generate", 600, clock=ray.clock)
    head, rest = next_in_order(["a", "b", "c"], watch, lambda refs: list(refs), wait=ray.wait)
    assert (head, rest) == (["a"], ["b", "c"])
    assert next_in_order(rest, watch, lambda refs: list(refs), wait=ray.wait)[0] == ["b"]


def test_next_in_order_counts_answers_behind_the_head_once_and_names_only_the_silent():
    # b answers at once; a (the head) and c never do: b restarts the clock once, not on every wait
    ray = FakeRay([(10.0, set()), (0.0, {"b"})] + [(10.0, set())] * 40)
    watch = ProgressWatch("generate", 60, clock=ray.clock)

    def bounded_wait(*args, **kwargs):
        assert ray.calls < 100, "b's answer restarted the clock on every wait"
        return ray.wait(*args, **kwargs)

    with pytest.raises(EngineTimeout, match=r"a, c") as err:
        next_in_order(["a", "b", "c"], watch, lambda refs: list(refs), wait=bounded_wait)
    assert "for 60 s" in str(err.value) and ray.now <= 80.0


def test_next_in_order_keeps_waiting_while_answers_come_behind_the_head():
    script = [(10.0, set()), (0.0, {"b"}), (10.0, set()), (0.0, {"c"}), (10.0, set()), (0.0, set()), (1.0, {"a"})]
    ray = FakeRay(script)
    watch = ProgressWatch("generate", 15, clock=ray.clock)
    assert next_in_order(["a", "b", "c"], watch, lambda refs: list(refs), wait=ray.wait)[0] == ["a"]
