"""StepTimer on an injected clock: exclusive nested phases, laps that tile the wall time, tokens/s, lengths; the
reward-only time of a rollout from its samples' intervals."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
import torch

from rft.train.step_timer import (
    KEYS,
    PHASES,
    ROLLOUT_KEY,
    RolloutLog,
    StepTimer,
    account_rollout,
    batch_counts,
    percentile,
    phase_key,
    phase_of,
    reward_only_seconds,
    union_length,
)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_nested_phases_are_exclusive_and_unentered_phases_are_zero(clock):
    timer = StepTimer(clock)
    clock.advance(1)  # before any phase: in the step, in no phase
    with timer.phase("logprob"):
        clock.advance(2)
        with timer.phase("reward"):
            clock.advance(3)
        clock.advance(4)
    with timer.phase("train"):
        clock.advance(5)
    out = timer.lap()
    assert out["time_logprob_s"] == 6 and out["time_reward_s"] == 3 and out["time_train_s"] == 5
    assert out["time_step_s"] == 15
    assert all(out[phase_key(p)] == 0.0 for p in ("generate", "sync", "eval", "save"))
    assert set(out) == set(KEYS)


def test_laps_tile_the_wall_time_and_a_phase_open_across_a_lap_is_split(clock):
    timer = StepTimer(clock)
    with timer.phase("generate"):
        clock.advance(2)
    first = timer.lap()
    with timer.phase("eval"):
        clock.advance(3)
        second = timer.lap()  # still inside eval: the 3 s so far belong to this lap
        clock.advance(4)
    clock.advance(1)
    third = timer.lap()
    assert (first["time_step_s"], second["time_step_s"], third["time_step_s"]) == (2, 3, 5)
    assert (second["time_eval_s"], third["time_eval_s"], third["time_generate_s"]) == (3, 4, 0)


def test_a_phase_that_raises_is_still_charged(clock):
    timer = StepTimer(clock)
    with pytest.raises(RuntimeError), timer.phase("save"):
        clock.advance(7)
        raise RuntimeError("disk full")
    assert timer.lap()["time_save_s"] == 7


def test_unknown_phase_is_refused(clock):
    with pytest.raises(ValueError, match="unknown phase 'rollout'"), StepTimer(clock).phase("rollout"):
        pass


def test_restart_forgets_the_time_before_it(clock):
    timer = StepTimer(clock)
    with timer.phase("train"):
        clock.advance(9)
    timer.restart()
    clock.advance(1)
    out = timer.lap()
    assert out["time_train_s"] == 0 and out["time_step_s"] == 1


def test_tokens_per_second_and_response_length_tail(clock):
    timer = StepTimer(clock)
    with timer.phase("generate"):
        clock.advance(4)
    timer.generated(400, 4.0)
    with timer.phase("train"):
        clock.advance(2)
    timer.trained(1000, [10, 20, 30, 40, 100])
    out = timer.lap()
    assert out["tokens_generated_per_s"] == 100 and out["tokens_trained_per_s"] == 500
    assert out["response_len_p50"] == 30 and out["response_len_p90"] == pytest.approx(76)
    assert out["response_len_max"] == 100
    empty = timer.lap()  # a step with no batch: rates 0, lengths NaN (null in the metrics file)
    assert empty["tokens_generated_per_s"] == 0 == empty["tokens_trained_per_s"]
    assert math.isnan(empty["response_len_p50"])


def test_percentile_matches_torch_quantile():
    xs = [3.0, 1.0, 7.0, 2.0, 9.0, 4.0]
    for q in (0.0, 0.5, 0.9, 1.0):
        assert percentile(xs, q) == pytest.approx(torch.quantile(torch.tensor(xs), q).item())


def test_key_names_round_trip():
    assert [phase_of(phase_key(p)) for p in PHASES] == list(PHASES)


def test_union_and_reward_only_time():
    assert union_length([(0, 2), (1, 3), (5, 6)]) == 4
    generate = [(0, 4), (1, 6)]
    reward = [(4, 5), (6, 8), (7, 9)]  # (4, 5) overlaps generation; 6..9 nothing generates
    assert reward_only_seconds(generate, reward) == 3
    assert reward_only_seconds(generate, []) == 0


def test_rollout_log_summarises_the_batch_and_account_moves_reward_out_of_generate(clock):
    log = RolloutLog()
    log.add({ROLLOUT_KEY: {"generate": (0.0, 4.0), "reward": (4.0, 6.0)}}, 30)
    log.add({ROLLOUT_KEY: {"generate": (0.0, 5.0), "reward": (5.0, 5.5)}}, 50)
    log.add({}, 20)  # an executor that stamps nothing (multi-turn agent): tokens only
    summary = log.summary(wall_s=7.0)
    assert summary == {"tokens": 100, "wall_s": 7.0, "reward_only_s": 1.0}
    assert log.summary(wall_s=0.5)["reward_only_s"] == 0.5  # never more than the rollout's wall time
    timer = StepTimer(clock)
    with timer.phase("generate"):
        clock.advance(7)
    account_rollout(timer, summary)
    out = timer.lap()
    assert (out["time_generate_s"], out["time_reward_s"]) == (6, 1)
    assert out["tokens_generated_per_s"] == pytest.approx(100 / 7)
    log.clear()
    assert log.summary(1.0) == {"tokens": 0, "wall_s": 1.0, "reward_only_s": 0.0}


def test_batch_counts_reads_masks_and_lengths():
    exps = [
        SimpleNamespace(attention_mask=torch.tensor([[0, 1, 1], [1, 1, 1]]),
                        info={"response_length": torch.tensor([1.0, 2.0])}),
        SimpleNamespace(attention_mask=torch.tensor([[1, 1, 2, 2, 0]]),  # packed: segment ids, 0 = padding
                        info={"response_length": torch.tensor([3.0])}),
    ]
    assert batch_counts(exps) == (9, [1.0, 2.0, 3.0])


def test_the_patched_executor_stamps_generation_then_reward_and_the_generator_logs_them(patched_openrlhf,
                                                                                          monkeypatch, tmp_path):
    """agent.patch, experience_maker.patch: the real single-turn executor returns its sample's intervals, the real patched
    SamplesGenerator gathers them with the sample's token count (the pristine release returns neither)."""
    from openrlhf.trainer.ppo_utils import experience_maker as em
    from openrlhf.utils import agent

    from rft.fixtures.patched_openrlhf import ROOT
    from rft.fixtures.reward_files import write_reward_toml
    from tests.patches.test_upstream_fixes import CharTokenizer, OneAnswerEngine

    monkeypatch.setenv("RFT_REWARD_CONFIG", str(write_reward_toml(tmp_path / "reward.toml")))
    executor = agent.SingleTurnAgentExecutor(str(ROOT / "reward_func_em.py"))
    params = SimpleNamespace(max_tokens=16, logprobs=None)
    answer = "The answer is \\boxed{7}"
    out = asyncio.run(executor.execute("What is 3+4? ", "7", params, 256, CharTokenizer(), OneAnswerEngine(answer)))
    (g0, g1), (r0, r1) = out[ROLLOUT_KEY]["generate"], out[ROLLOUT_KEY]["reward"]
    assert g0 <= g1 <= r0 <= r1 and float(out["reward"]) == 1.0
    gen = object.__new__(em.SamplesGenerator)
    gen.args = SimpleNamespace(remote_rm_url=[str(ROOT / "reward_func_em.py")], agent_func_path=None)
    gen.rollout_log = RolloutLog()
    gen._process_response_into_experience(out, prompt_max_len=32, max_new_tokens=32)
    assert gen.rollout_log.tokens == len(answer)
    assert gen.rollout_log.generate == [(g0, g1)] and gen.rollout_log.reward == [(r0, r1)]
