"""Reward/extra_logs robustness and batch reward stats through the real patched OpenRLHF experience maker."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from rft.train.numbers import finite, scalar
from rft.train.prompt_filter import PromptFilter
from rft.train.robust_rewards import (
    batch_reward_stats,
    repair_rollout_log_probs,
    sanitize_extra_logs,
    sanitize_reward,
    unify_info_keys,
)
from rft.train.step_timer import RolloutLog


@pytest.fixture
def em(patched_openrlhf):
    from openrlhf.trainer.ppo_utils import experience_maker

    return experience_maker


def response(reward, extra_logs, n_prompt=3, n_action=2, label="7"):
    """A rollout worker response as SingleTurnAgentExecutor builds it."""
    tokens = list(range(10, 10 + n_prompt + n_action))
    return {
        "prompt": f"prompt {label}",
        "label": label,
        "observation_tokens": tokens,
        "action_ranges": [(n_prompt, n_prompt + n_action)],
        "rollout_log_probs": None,
        "truncated": False,
        "reward": reward,
        "scores": reward,
        "extra_logs": extra_logs,
    }


def generator(em, **args):
    gen = object.__new__(em.SamplesGenerator)
    base = dict(remote_rm_url=["http://rm"], agent_func_path=None, vllm_enable_sleep=False,
                rollout_batch_size=4, dynamic_filtering=False)
    gen.args = SimpleNamespace(**{**base, **args})
    gen.prompts_dataloader = []
    gen.prompt_filter = PromptFilter.from_args(gen.args)  # as SamplesGenerator.__init__ builds it
    gen.rollout_log = RolloutLog()
    return gen


def test_numbers_and_sanitizers():
    assert finite(True) == 1.0 and finite("0.5") == 0.5 and finite([2]) == 2.0 and finite(torch.tensor([3.0])) == 3.0
    for bad in ("yes", None, float("nan"), [], [1, 2], {"a": 1}, torch.tensor([]), torch.tensor([3.0, 9.0]),
                float("inf")):
        assert finite(bad) is None, bad
    assert scalar(True) == 1 and isinstance(scalar(7), int) and math.isnan(scalar("nan"))
    assert sanitize_reward("oops") == (0.0, False)
    assert sanitize_extra_logs({"a": "x", "b": 2, "c": None}) == ({"a": 0.0, "b": 2.0, "c": 0.0}, 2)
    assert sanitize_extra_logs("not a dict") == ({}, 1) and sanitize_extra_logs(None) == ({}, 0)


def test_bad_rewards_and_extra_logs_keep_every_sample(em):
    gen = generator(em)
    responses = [
        response(1.0, {"correctness": 1, "has_boxed": True}),
        response("0.5", {"correctness": "yes", "parse_method": "boxed"}),  # 0.9.3: ValueError
        response(None, {}),  # reward function raised: 0.9.3 crashes later in concat/make_experience
        response([0.25], None),
    ]
    exps = [gen._process_response_into_experience(r, prompt_max_len=8, max_new_tokens=8) for r in responses]
    gen._generate_vllm = lambda **kw: (exps, 4, False)  # the rollout itself needs vLLM engines
    out, _, consumed, exhausted = gen.generate_samples(prompt_max_len=8, max_new_tokens=8)
    assert len(out) == 4 and consumed == 4 and not exhausted

    keys = [set(e.info) for e in out]
    assert all(k == keys[0] for k in keys)
    assert {"correctness", "has_boxed", "parse_method", "reward_defaulted", "extra_logs_defaulted"} <= keys[0]
    assert [e.rewards.item() for e in out] == [1.0, 0.5, 0.0, 0.25]
    assert [e.info["reward_defaulted"].item() for e in out] == [0.0, 0.0, 1.0, 0.0]
    # 0: parse_method missing; 1: "yes", "boxed" replaced + has_boxed missing; 2, 3: all three missing
    assert [e.info["extra_logs_defaulted"].item() for e in out] == [1.0, 3.0, 3.0, 3.0]

    batch = em.Experience.concat_experiences(out, pad_token_id=0)
    from openrlhf.trainer.ppo_utils.replay_buffer import split_experience_batch

    items = split_experience_batch(batch)  # 0.9.3: "Size of info[...] does not match batch_size"
    assert len(items) == 4
    assert batch.info["correctness"].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_reward_model_path_leaves_missing_reward_alone(em):
    gen = generator(em, remote_rm_url=None)
    exp = gen._process_response_into_experience(response(None, {}), prompt_max_len=8, max_new_tokens=8)
    assert exp.rewards is None and "reward" not in exp.info  # the reward model group scores it later


def test_unify_info_keys_counts_only_real_keys():
    infos = [{"a": torch.tensor([1.0]), "extra_logs_defaulted": torch.tensor([0.0])}, {"b": torch.tensor([2.0])}]
    assert unify_info_keys(infos) == 2
    assert infos[0]["extra_logs_defaulted"].item() == 1.0 and infos[1]["extra_logs_defaulted"].item() == 1.0


def test_batch_reward_stats_once_over_the_whole_batch(em):
    maker = object.__new__(em.RemoteExperienceMaker)
    args = SimpleNamespace(
        advantage_estimator="group_norm", n_samples_per_prompt=2, gamma=1.0, reward_clip_range=None,
        no_advantage_std_norm=False, overlong_buffer_len=None, stop_properly_penalty_coef=None,
    )
    maker.strategy = SimpleNamespace(args=args)
    maker.args = args
    maker.advantage_estimator = "group_norm"
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    maker.kl_ctl = FixedKLController(0.0)
    rewards = [[1.0, 0.0], [0.9, 0.2]]  # two micro-batches of 2 samples
    correct = [[1.0, 0.0], [0.0, 0.0]]  # 0.9 reward but wrong: high-reward-but-wrong
    exps = []
    for i, (r, c) in enumerate(zip(rewards, correct, strict=True)):
        exps.append(em.Experience(
            index=[2 * i, 2 * i + 1], sequences=torch.ones(2, 4, dtype=torch.long),
            action_mask=torch.ones(2, 3, dtype=torch.bool), kl=torch.zeros(2, 3),
            rewards=torch.tensor(r), info={"correctness": torch.tensor(c)},
        ))
    maker.compute_advantages_and_returns(exps)
    s = maker.reward_stats
    flat = torch.tensor([1.0, 0.0, 0.9, 0.2])
    assert s["reward_mean"] == pytest.approx(flat.mean().item())
    assert s["reward_std"] == pytest.approx(flat.std(unbiased=False).item())
    assert (s["reward_min"], s["reward_max"]) == (0.0, 1.0)
    assert s["reward_p90"] == pytest.approx(torch.quantile(flat, 0.9).item())
    assert s["reward_high_but_wrong"] == pytest.approx(0.25)
    assert all(math.isfinite(e.advantages.sum().item()) for e in exps)
    assert "reward_high_but_wrong" not in batch_reward_stats(flat)


def test_high_but_wrong_is_a_wrong_answer_above_its_group_mean():
    """Blend rewards (0.6 EM + 0.4 quality): a judge-pleasing wrong answer in an all-wrong group is reinforced."""
    rewards = torch.tensor([0.96, 0.0, 0.2, 0.36, 0.08, 0.12])  # groups of 3: (right, wrong, wrong), (wrong x 3)
    correct = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    s = batch_reward_stats(rewards, correct, group_size=3)
    assert s["reward_high_but_wrong"] == pytest.approx(1 / 6)  # only the 0.36: above (0.36+0.08+0.12)/3
    assert s["reward_mean_wrong"] == pytest.approx((0.2 + 0.36 + 0.08 + 0.12) / 5)
    em = batch_reward_stats(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=2)
    assert em["reward_high_but_wrong"] == 0.0  # exact match never pays a wrong answer
    assert batch_reward_stats(rewards, correct)["reward_high_but_wrong"] == 0.0  # no groups: >= 0.5 only


def test_batch_reward_stats_of_orders_groups_and_adds_judge_stats():
    from rft.train.robust_rewards import batch_reward_stats_of

    def exp(index, rewards, correct, asked, ok, cost):
        info = {"correctness": torch.tensor(correct), "judge_asked": torch.tensor(asked),
                "judge_ok": torch.tensor(ok), "judge_cost_usd": torch.tensor(cost)}  # fmt: skip
        return SimpleNamespace(index=index, rewards=torch.tensor(rewards), info=info)

    # samples 0,1 are prompt A and 2,3 prompt B, delivered out of order (dynamic batching)
    exps = [exp([2, 0], [0.3, 0.9], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.01, 0.02]),
            exp([1, 3], [0.0, 0.1], [0.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.03])]  # fmt: skip
    s = batch_reward_stats_of(exps, group_size=2)
    assert s["reward_high_but_wrong"] == pytest.approx(0.25)  # the 0.3 of prompt B (mean 0.2)
    assert s["judge_cost_step_usd"] == pytest.approx(0.06) and s["judge_asked_step"] == 3.0
    assert s["judge_fail_rate"] == pytest.approx(1 / 3)
    no_judge = [SimpleNamespace(index=[0], rewards=torch.tensor([1.0]), info={"correctness": torch.tensor([1.0])})]
    assert "judge_fail_rate" not in batch_reward_stats_of(no_judge, 1)


def test_non_finite_vllm_log_probs_are_repaired_before_they_poison_the_loss(patched_openrlhf):
    """One -inf (or NaN) vLLM log-prob makes the real patched PolicyLoss NaN; repaired, the loss is finite."""
    from openrlhf.models.loss import PolicyLoss

    torch.manual_seed(0)
    trainer = -torch.rand(2, 5) * 3
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    rollout = trainer + 0.01 * torch.randn(2, 5)
    rollout[0, 2], rollout[1, 4], rollout[0, 4] = -math.inf, math.nan, math.nan  # [0, 4] is padding
    adv = torch.randn(2, 5)
    loss_fn = PolicyLoss(enable_vllm_is_correction=True, vllm_is_truncated_threshold=[0.5, 5.0])
    loss, _, _, vllm_kl = loss_fn(trainer.clone().requires_grad_(), trainer, adv, mask, rollout.clone())
    assert not (torch.isfinite(loss) and torch.isfinite(vllm_kl))  # what 0.9.3 trains on
    counts = repair_rollout_log_probs(rollout, trainer, mask)
    assert counts.tolist() == [1.0, 1.0] and rollout[0, 2] == trainer[0, 2] and rollout[1, 4] == trainer[1, 4]
    assert rollout[0, 4] == trainer[0, 4]  # padding too (NaN * 0 is NaN in a masked mean), but not counted
    loss, _, _, vllm_kl = loss_fn(trainer.clone().requires_grad_(), trainer, adv, mask, rollout)
    assert torch.isfinite(loss) and torch.isfinite(vllm_kl)
