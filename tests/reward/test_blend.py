"""The judged reward: both modes' values, the failure fallback, the key set, and OpenRLHF's call path."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import torch

from rft.fixtures.reward_files import load_reward_module, write_reward_toml
from rft.provenance import REPO_ROOT as ROOT
from rft.reward.blend import EXTRA_LOG_KEYS_JUDGE, make_judge_reward_func
from rft.reward.judge import Judge
from rft.reward.settings import load_settings
from tests.reward.openrlhf_path import run_through_openrlhf
from tests.reward.prompts import HARMONY_PROMPT, QWEN_PROMPT, harmony

REWARD_FILE = ROOT / "reward_func_judge.py"
RIGHT = QWEN_PROMPT + "36 - 7 = 29, so \\boxed{29}.<|im_end|>"
WRONG = QWEN_PROMPT + "36 - 7 = 28, so \\boxed{28}.<|im_end|>"
NONE = QWEN_PROMPT + "I am not sure.<|im_end|>"


@pytest.fixture(autouse=True)
def judge_env(monkeypatch):
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")
    for name in ("GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def judge_score() -> float:
    return 0.5


@pytest.fixture
def settings_file(judge_server, tmp_path, monkeypatch):
    """Writes reward.toml (two scripted models at the shared judge server, no waits) and points
    RFT_REWARD_CONFIG at it, as the launcher does for the reward files in the Ray workers."""
    path = tmp_path / "reward.toml"
    monkeypatch.setenv("RFT_REWARD_CONFIG", str(path))

    def write(scheme: str = "binary", **judge) -> Path:
        base = {"base_url": judge_server.url, "cache": str(tmp_path / "cache.sqlite"), "models": ["m1", "m2"],
                "backoff": 0, "retries": 0, "rpm": 0, "prices": {"m1": [2, 12], "m2": [1, 4]}}  # fmt: skip
        return write_reward_toml(path, reward={"scheme": scheme}, judge={**base, **judge})

    write()
    return write


@pytest.fixture
def reward_fn(settings_file):
    """The judged reward for a mode and settings, as reward_func_judge.py builds it from reward.toml."""

    def build(mode: str = "correct_only", **settings):
        s = load_settings(settings_file(mode=mode, **settings))
        return make_judge_reward_func(s.blend, Judge(s.judge))

    return build


def rewards(fn, queries: list[str], label: str = "29") -> list[float]:
    out = fn(queries, [QWEN_PROMPT] * len(queries), [label] * len(queries))
    return [round(float(x), 6) for x in out["rewards"]]


def test_correct_only_asks_the_judge_only_about_correct_answers(judge_server, reward_fn) -> None:
    fn = reward_fn()
    assert rewards(fn, [RIGHT, WRONG, NONE]) == [0.8 + 0.2 * 0.5, 0.0, 0.0]
    assert len(judge_server.requests) == 1
    judge_server.scripts["m1"] = [{"score": 1.0}]
    assert rewards(fn, [RIGHT.replace("so", "hence")]) == [1.0]  # rises with quality
    judge_server.scripts["m1"] = [{"score": 0.0}]
    assert rewards(fn, [RIGHT.replace("so", "thus")]) == [0.8]  # and never falls to a wrong answer's


def test_correct_only_gives_wrong_answers_exactly_the_em_reward(judge_server, reward_fn) -> None:
    fn = reward_fn(scheme="signed")
    assert rewards(fn, [WRONG, NONE]) == [-1.0, -0.5] and not judge_server.requests
    assert rewards(fn, [RIGHT]) == [0.9]


def test_blend_scores_every_sample(judge_server, reward_fn) -> None:
    judge_server.scripts["m1"] = [{"score": 0.5}, {"score": 0.25}, {"score": 1.0}]
    assert rewards(reward_fn("blend"), [RIGHT, WRONG, NONE]) == [0.6 + 0.4 * 0.5, 0.4 * 0.25, 0.4]
    assert len(judge_server.requests) == 3


def test_weights_are_configurable(judge_server, reward_fn) -> None:
    assert rewards(reward_fn("blend", weights=[0.5, 0.5]), [RIGHT, WRONG]) == [0.75, 0.25]


def test_all_models_failing_gives_the_running_mean_not_zero(judge_server, reward_fn) -> None:
    fn = reward_fn()
    for i, score in enumerate((0.2, 0.6)):
        judge_server.scripts["m1"] = [{"score": score}]
        fn([RIGHT.replace("29", f"29 ({i})", 1)], [QWEN_PROMPT], ["29"])
    for m in ("m1", "m2"):
        judge_server.scripts[m] = [{"status": 503}]
    out = fn([RIGHT.replace("so", "therefore")], [QWEN_PROMPT], ["29"])
    logs = {k: float(v[0]) for k, v in out["extra_logs"].items()}
    assert float(out["rewards"][0]) == pytest.approx(0.8 + 0.2 * 0.4)  # mean of 0.2 and 0.6
    assert (logs["judge_ok"], logs["judge_asked"], logs["judge_model_index"]) == (0.0, 1.0, -1.0)
    assert logs["reasoning_quality"] == pytest.approx(0.4)


def test_em_fallback_scores_a_failed_judgement_with_quality_0(judge_server, reward_fn) -> None:
    """fallback = "em" (the gpt-oss-120b README's rule): every model failed -> exact match, quality 0."""
    judge_server.scripts["m1"] = [{"score": 0.6}]
    fn = reward_fn("blend", fallback="em")
    assert rewards(fn, [RIGHT]) == [0.6 + 0.4 * 0.6]  # a success is scored as always
    for m in ("m1", "m2"):
        judge_server.scripts[m] = [{"status": 503}] * 3
    out = fn([RIGHT.replace("so", "hence"), WRONG, NONE], [QWEN_PROMPT] * 3, ["29"] * 3)
    assert [round(float(x), 6) for x in out["rewards"]] == [0.6, 0.0, 0.0]  # 0.6 x EM + 0.4 x 0
    assert [float(x) for x in out["extra_logs"]["reasoning_quality"]] == [0.0, 0.0, 0.0]
    assert [float(x) for x in out["extra_logs"]["judge_ok"]] == [0.0, 0.0, 0.0]


def test_extra_logs_one_key_set_all_numeric(judge_server, reward_fn) -> None:
    judge_server.scripts["m1"] = [{"status": 429}]
    out = reward_fn()([RIGHT, WRONG, NONE], [QWEN_PROMPT] * 3, ["29"] * 3)
    assert list(out["extra_logs"]) == list(EXTRA_LOG_KEYS_JUDGE)
    logs = {k: v.tolist() for k, v in out["extra_logs"].items()}
    assert logs["judge_asked"] == [1.0, 0.0, 0.0] and logs["judge_ok"] == [1.0, 0.0, 0.0]
    assert logs["judge_model_index"] == [1.0, -1.0, -1.0] and logs["correctness"] == [1.0, 0.0, 0.0]
    assert logs["judge_cost_usd"][0] == pytest.approx((1000 * 1 + 200 * 4) / 1e6) and logs["judge_cost_usd"][1:] == [0, 0]
    again = reward_fn()([RIGHT], [QWEN_PROMPT], ["29"])["extra_logs"]
    assert (float(again["judge_cached"][0]), float(again["judge_cost_usd"][0])) == (1.0, 0.0)


def test_the_judge_sees_the_problem_and_the_whole_harmony_response(judge_server, reward_fn) -> None:
    fn = reward_fn()
    response = harmony("6*7 is 42, checking: 7*6 = 42.", "\\boxed{42}")
    fn([HARMONY_PROMPT + response], [HARMONY_PROMPT], ["42"])
    prompt = judge_server.requests[0].body["contents"][0]["parts"][0]["text"]
    assert "Problem:\nWhat is 6 times 7?" in prompt and "<|start|>" not in prompt
    assert "[analysis channel]\n6*7 is 42, checking: 7*6 = 42." in prompt and "[final channel]\n\\boxed{42}" in prompt


def test_loading_in_blend_mode_warns(settings_file, caplog) -> None:
    settings_file(mode="blend")
    with caplog.at_level(logging.WARNING, logger="rft.reward.blend"):
        load_reward_module(REWARD_FILE)
    assert any("pleasing the judge" in r.getMessage() and "0.40" in r.getMessage() for r in caplog.records)
    caplog.clear()
    settings_file(mode="correct_only")
    with caplog.at_level(logging.WARNING, logger="rft.reward.blend"):
        load_reward_module(REWARD_FILE)
    assert not caplog.records


def test_threaded_calls_as_agent_py_makes_them(settings_file) -> None:
    module = load_reward_module(REWARD_FILE)

    async def main():
        calls = [asyncio.to_thread(module.reward_func, [q], [QWEN_PROMPT], ["29"]) for q in [RIGHT, WRONG] * 16]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    assert [float(r["rewards"][0]) for r in results] == pytest.approx([0.9, 0.0] * 16)
    for r in results:
        assert set(r["extra_logs"]) == set(EXTRA_LOG_KEYS_JUDGE)
        assert all(isinstance(v, torch.Tensor) and v.shape == (1,) for v in r["extra_logs"].values())


@pytest.mark.slow
def test_real_openrlhf_executor_and_experience_maker(judge_server, settings_file) -> None:
    """The real SingleTurnAgentExecutor loads reward_func_judge.py; the real experience maker keeps every key."""
    cases = [(QWEN_PROMPT, RIGHT[len(QWEN_PROMPT):], "29", "stop"), (QWEN_PROMPT, WRONG[len(QWEN_PROMPT):], "29", "stop")]
    results = run_through_openrlhf(REWARD_FILE, cases)
    assert [r["reward"] for r in results] == [[pytest.approx(0.9)], [0.0]]
    assert [r["info"]["judge_asked"] for r in results] == [[1.0], [0.0]]
    for r in results:
        assert set(EXTRA_LOG_KEYS_JUDGE) <= set(r["info"])
    assert len(judge_server.requests) == 1
