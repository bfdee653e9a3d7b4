"""The judge reward's pre-launch checks: settings, credentials, cost estimate, the one live call (local server)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from rft.fixtures.judge_server import JudgeServer
from rft.fixtures.reward_files import write_reward_toml
from rft.launch.judge_check import judge_rule, uses_judge
from rft.launch.rules import Report
from rft.provenance import REPO_ROOT as ROOT


def args(reward: str = "reward_func_judge.py", **kw) -> SimpleNamespace:
    base = dict(remote_rm_url=[str(ROOT / reward)], rollout_batch_size=16, n_samples_per_prompt=8,
                generate_max_len=4096, vllm_num_engines=2)  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


@pytest.fixture
def judge_score() -> float:
    return 0.9


def env_for(judge_server: JudgeServer, tmp_path: Path, judge: dict | None = None, **extra: str) -> dict:
    """Credentials in the environment; the judge settings in a reward.toml that RFT_REWARD_CONFIG names."""
    settings = {"base_url": judge_server.url, "models": ["m1", "m2"], "prices": {"m1": [2, 12], "m2": [1, 4]},
                "cache": str(tmp_path / "c.sqlite"), "retries": 0, **(judge or {})}  # fmt: skip
    path = write_reward_toml(tmp_path / "reward.toml", judge=settings)
    return {"GOOGLE_API_KEY": "k", "RFT_REWARD_CONFIG": str(path), "HOME": str(tmp_path), **extra}


def test_only_the_judge_reward_is_checked() -> None:
    assert uses_judge(args()) and not uses_judge(args("reward_func_em.py")) and not uses_judge(args(remote_rm_url=None))
    rep = Report()
    judge_rule(args("reward_func_em.py"), rep, 100, live=True, env={})
    assert rep == Report()


def test_live_call_and_cost_estimate(judge_server, tmp_path) -> None:
    rep = Report()
    judge_rule(args(), rep, 100, live=True, env=env_for(judge_server, tmp_path))
    assert not rep.errors and not rep.blocking, rep.render()
    assert len(judge_server.requests) == 1 and judge_server.requests[0].model == "m1"
    text = rep.render()
    assert "live call answered by m1 (score 0.90)" in text
    # 128 samples x 100 steps x 50% judged x (1000 + 2048 in, 1000 out) at $2/$12 per M
    assert f"${128 * 100 * 0.5 * (3048 * 2 + 1000 * 12) / 1e6:,.2f}" in text
    assert "up to 32 concurrent, 480/min overall" in text


def test_missing_credentials_are_needs_and_no_call_is_made(judge_server, tmp_path) -> None:
    rep = Report()
    env = {k: v for k, v in env_for(judge_server, tmp_path).items() if k != "GOOGLE_API_KEY"}
    judge_rule(args(), rep, 100, live=True, env=env)
    assert any("no Gemini credentials" in b for b in rep.blocking) and not judge_server.requests


def test_failed_live_call_blocks(judge_server, tmp_path) -> None:
    judge_server.scripts["m1"] = [{"status": 403}]
    judge_server.scripts["m2"] = [{"text": "no json"}]
    rep = Report()
    judge_rule(args(), rep, 100, live=True, env=env_for(judge_server, tmp_path))
    assert len(rep.blocking) == 1 and "live call failed" in rep.blocking[0] and "403" in rep.blocking[0]


def test_live_call_can_be_skipped(judge_server, tmp_path) -> None:
    rep = Report()
    judge_rule(args(), rep, 100, live=False, env=env_for(judge_server, tmp_path))
    assert not judge_server.requests and "judge: live call skipped (--no-judge-check)" in rep.warnings


def test_bad_settings_and_blend_mode(judge_server, tmp_path) -> None:
    rep = Report()
    judge_rule(args(), rep, 100, live=False, env=env_for(judge_server, tmp_path, {"weights": "x"}))
    assert rep.errors == [f"judge: {tmp_path / 'reward.toml'}: [judge] weights = 'x': must be two numbers [em, quality], "
                          "the EM weight > 0 and the quality weight >= 0"]  # fmt: skip
    rep = Report()
    judge_rule(args(), rep, 100, live=False, env=env_for(judge_server, tmp_path, {"mode": "blend"}))
    assert any("partial credit" in w for w in rep.warnings) and "x 100% judged (blend)" in rep.render()


def test_cost_estimate_inputs_come_from_the_file(judge_server, tmp_path) -> None:
    rep = Report()
    judge = {"expected_solve_rate": 0.25, "expected_response_tokens": 500, "expected_output_tokens": 200}
    judge_rule(args(), rep, 10, live=False, env=env_for(judge_server, tmp_path, judge))
    # 128 samples x 10 steps x 25% judged x (1000 + 500 in, 200 out) at $2/$12 per M
    assert "x 25% judged (correct_only) x (1,500 in + 200 out tokens" in rep.render()
    assert f"${128 * 10 * 0.25 * (1500 * 2 + 200 * 12) / 1e6:,.2f}" in rep.render()
    assert f"settings from {tmp_path / 'reward.toml'}" in rep.render()
