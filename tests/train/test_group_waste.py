"""The per-step waste measure: uniform-reward groups, samples with a non-zero advantage, tokens they cost."""

from types import SimpleNamespace

import pytest
import torch

from rft.train.group_waste import WASTE_KEYS, group_waste, group_waste_of


def test_uniform_groups_their_tokens_and_moving_samples():
    # 3 prompts x 4 samples: all right, mixed, all wrong
    rewards = torch.tensor([1.0, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0, 0])
    lengths = torch.tensor([10.0, 10, 10, 10, 50, 50, 50, 50, 100, 100, 100, 100])
    s = group_waste(rewards, lengths, 4, correctness=rewards)
    assert s["uniform_group_share"] == pytest.approx(2 / 3)
    assert s["nonzero_adv_samples"] == 4 and s["nonzero_adv_share"] == pytest.approx(4 / 12)
    assert s["uniform_group_tokens"] == 440 and s["uniform_group_token_share"] == pytest.approx(440 / 640)
    assert s["groups_all_correct"] == pytest.approx(1 / 3) and s["groups_all_wrong"] == pytest.approx(1 / 3)
    assert set(s) <= set(WASTE_KEYS)


def test_blended_rewards_of_correct_answers_are_not_uniform_but_correctness_is():
    """A judge's correct_only reward pays 0.8-1.0 for right answers: rewards differ, correctness does not."""
    rewards = torch.tensor([0.85, 0.92, 1.0, 0.8])
    s = group_waste(rewards, None, 4, correctness=torch.ones(4))
    assert s["uniform_group_share"] == 0 and s["nonzero_adv_samples"] == 4
    assert s["groups_all_correct"] == 1 and "uniform_group_tokens" not in s


def test_no_groups_no_figures():
    assert group_waste(torch.tensor([1.0, 0.0, 1.0]), None, 2) == {}
    assert group_waste(torch.tensor([1.0, 0.0]), None, 1) == {}


def test_experiences_are_put_back_in_group_order():
    def exp(index, rewards, lengths):
        return SimpleNamespace(index=index, rewards=torch.tensor(rewards),
                               info={"response_length": torch.tensor(lengths)})  # fmt: skip

    # prompt A = samples 0,1 (rewards 1, 1: uniform), prompt B = samples 2,3 (0, 1), delivered interleaved
    exps = [exp([0, 2], [1.0, 0.0], [5.0, 7.0]), exp([3, 1], [1.0, 1.0], [9.0, 3.0])]
    s = group_waste_of(exps, 2)
    assert s["uniform_group_share"] == 0.5 and s["uniform_group_tokens"] == 8.0
    assert "groups_all_correct" not in s
    assert group_waste_of([SimpleNamespace(index=None, rewards=torch.ones(2), info={})], 2) == {}


def test_the_patched_experience_maker_logs_the_waste(patched_openrlhf):  # noqa: F811
    """The real patched compute_advantages_and_returns puts the waste keys into the step's reward_stats."""
    from openrlhf.trainer.ppo_utils import experience_maker as em
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    maker = object.__new__(em.RemoteExperienceMaker)
    args = SimpleNamespace(
        advantage_estimator="group_norm", n_samples_per_prompt=2, gamma=1.0, reward_clip_range=None,
        no_advantage_std_norm=False, overlong_buffer_len=None, stop_properly_penalty_coef=None,
    )
    maker.strategy, maker.args, maker.advantage_estimator = SimpleNamespace(args=args), args, "group_norm"
    maker.kl_ctl = FixedKLController(0.0)
    exps = [em.Experience(
        index=[2 * i, 2 * i + 1], sequences=torch.ones(2, 4, dtype=torch.long),
        action_mask=torch.ones(2, 3, dtype=torch.bool), kl=torch.zeros(2, 3), rewards=torch.tensor(r),
        info={"correctness": torch.tensor(r), "response_length": torch.tensor([3.0, 3.0])},
    ) for i, r in enumerate([[1.0, 1.0], [1.0, 0.0]])]  # fmt: skip
    maker.compute_advantages_and_returns(exps)
    s = maker.reward_stats
    assert s["uniform_group_share"] == 0.5 and s["nonzero_adv_samples"] == 2 and s["groups_all_correct"] == 0.5
    assert s["uniform_group_tokens"] == 6 and s["reward_mean"] == 0.75
    assert exps[0].advantages.abs().sum() == 0 and exps[1].advantages.abs().sum() > 0  # what "uniform" means
