"""The judged reward: both modes' values, the failure fallback, the key set, and OpenRLHF's call path."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from patched_openrlhf import stub_env

from rft.reward.blend import EXTRA_LOG_KEYS_JUDGE, BlendConfig, JudgeConfigError, make_judge_reward_func
from rft.reward.judge import Judge, JudgeConfig
from tests.judge_server import JudgeServer
from tests.reward.test_exact_match import _OPENRLHF_PATH_SCRIPT, HARMONY_PROMPT, QWEN_PROMPT, harmony

ROOT = Path(__file__).resolve().parents[2]
REWARD_FILE = ROOT / "reward_func_judge.py"
RIGHT = QWEN_PROMPT + "36 - 7 = 29, so \\boxed{29}.<|im_end|>"
WRONG = QWEN_PROMPT + "36 - 7 = 28, so \\boxed{28}.<|im_end|>"
NONE = QWEN_PROMPT + "I am not sure.<|im_end|>"


@pytest.fixture(autouse=True)
def judge_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")
    for name in ("GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "RFT_JUDGE_WEIGHTS", "RFT_JUDGE_MODE", "RFT_REWARD_SCHEME",
                 "RFT_JUDGE_FALLBACK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RFT_JUDGE_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.setenv("RFT_JUDGE_MODELS", "m1,m2")
    monkeypatch.setenv("RFT_JUDGE_PRICES", "m1=2/12,m2=1/4")
    monkeypatch.setenv("RFT_JUDGE_BACKOFF", "0")
    monkeypatch.setenv("RFT_JUDGE_RETRIES", "0")
    monkeypatch.setenv("RFT_JUDGE_RPM", "0")


@pytest.fixture
def server(monkeypatch):
    with JudgeServer(default_score=0.5) as s:
        monkeypatch.setenv("RFT_JUDGE_BASE_URL", s.url)
        yield s


def reward_fn(mode: str = "correct_only", **env):
    cfg = BlendConfig.from_env({**os.environ, "RFT_JUDGE_MODE": mode, **env})
    return make_judge_reward_func(cfg, Judge(JudgeConfig.from_env()))


def rewards(fn, queries: list[str], label: str = "29") -> list[float]:
    out = fn(queries, [QWEN_PROMPT] * len(queries), [label] * len(queries))
    return [round(float(x), 6) for x in out["rewards"]]


def test_correct_only_asks_the_judge_only_about_correct_answers(server) -> None:
    fn = reward_fn()
    assert rewards(fn, [RIGHT, WRONG, NONE]) == [0.8 + 0.2 * 0.5, 0.0, 0.0]
    assert len(server.requests) == 1
    server.scripts["m1"] = [{"score": 1.0}]
    assert rewards(fn, [RIGHT.replace("so", "hence")]) == [1.0]  # rises with quality
    server.scripts["m1"] = [{"score": 0.0}]
    assert rewards(fn, [RIGHT.replace("so", "thus")]) == [0.8]  # and never falls to a wrong answer's


def test_correct_only_gives_wrong_answers_exactly_the_em_reward(server) -> None:
    fn = reward_fn(RFT_REWARD_SCHEME="signed")
    assert rewards(fn, [WRONG, NONE]) == [-1.0, -0.5] and not server.requests
    assert rewards(fn, [RIGHT]) == [0.9]


def test_blend_scores_every_sample(server) -> None:
    server.scripts["m1"] = [{"score": 0.5}, {"score": 0.25}, {"score": 1.0}]
    assert rewards(reward_fn("blend"), [RIGHT, WRONG, NONE]) == [0.6 + 0.4 * 0.5, 0.4 * 0.25, 0.4]
    assert len(server.requests) == 3


def test_weights_are_configurable(server) -> None:
    assert rewards(reward_fn("blend", RFT_JUDGE_WEIGHTS="0.5,0.5"), [RIGHT, WRONG]) == [0.75, 0.25]


def test_all_models_failing_gives_the_running_mean_not_zero(server) -> None:
    fn = reward_fn()
    for i, score in enumerate((0.2, 0.6)):
        server.scripts["m1"] = [{"score": score}]
        fn([RIGHT.replace("29", f"29 ({i})", 1)], [QWEN_PROMPT], ["29"])
    for m in ("m1", "m2"):
        server.scripts[m] = [{"status": 503}]
    out = fn([RIGHT.replace("so", "therefore")], [QWEN_PROMPT], ["29"])
    logs = {k: float(v[0]) for k, v in out["extra_logs"].items()}
    assert float(out["rewards"][0]) == pytest.approx(0.8 + 0.2 * 0.4)  # mean of 0.2 and 0.6
    assert (logs["judge_ok"], logs["judge_asked"], logs["judge_model_index"]) == (0.0, 1.0, -1.0)
    assert logs["reasoning_quality"] == pytest.approx(0.4)


def test_em_fallback_scores_a_failed_judgement_with_quality_0(server, monkeypatch) -> None:
    """RFT_JUDGE_FALLBACK=em (the gpt-oss-120b README's rule): every model failed -> exact match, quality 0."""
    monkeypatch.setenv("RFT_JUDGE_FALLBACK", "em")
    server.scripts["m1"] = [{"score": 0.6}]
    fn = reward_fn("blend")
    assert rewards(fn, [RIGHT]) == [0.6 + 0.4 * 0.6]  # a success is scored as always
    for m in ("m1", "m2"):
        server.scripts[m] = [{"status": 503}] * 3
    out = fn([RIGHT.replace("so", "hence"), WRONG, NONE], [QWEN_PROMPT] * 3, ["29"] * 3)
    assert [round(float(x), 6) for x in out["rewards"]] == [0.6, 0.0, 0.0]  # 0.6 x EM + 0.4 x 0
    assert [float(x) for x in out["extra_logs"]["reasoning_quality"]] == [0.0, 0.0, 0.0]
    assert [float(x) for x in out["extra_logs"]["judge_ok"]] == [0.0, 0.0, 0.0]
    monkeypatch.setenv("RFT_JUDGE_FALLBACK", "zero")
    with pytest.raises(JudgeConfigError, match="RFT_JUDGE_FALLBACK='zero'"):
        JudgeConfig.from_env()


def test_extra_logs_one_key_set_all_numeric(server) -> None:
    server.scripts["m1"] = [{"status": 429}]
    out = reward_fn()([RIGHT, WRONG, NONE], [QWEN_PROMPT] * 3, ["29"] * 3)
    assert list(out["extra_logs"]) == list(EXTRA_LOG_KEYS_JUDGE)
    logs = {k: v.tolist() for k, v in out["extra_logs"].items()}
    assert logs["judge_asked"] == [1.0, 0.0, 0.0] and logs["judge_ok"] == [1.0, 0.0, 0.0]
    assert logs["judge_model_index"] == [1.0, -1.0, -1.0] and logs["correctness"] == [1.0, 0.0, 0.0]
    assert logs["judge_cost_usd"][0] == pytest.approx((1000 * 1 + 200 * 4) / 1e6) and logs["judge_cost_usd"][1:] == [0, 0]
    again = reward_fn()([RIGHT], [QWEN_PROMPT], ["29"])["extra_logs"]
    assert (float(again["judge_cached"][0]), float(again["judge_cost_usd"][0])) == (1.0, 0.0)


def test_the_judge_sees_the_problem_and_the_whole_harmony_response(server) -> None:
    fn = reward_fn()
    response = harmony("6*7 is 42, checking: 7*6 = 42.", "\\boxed{42}")
    fn([HARMONY_PROMPT + response], [HARMONY_PROMPT], ["42"])
    prompt = server.requests[0].body["contents"][0]["parts"][0]["text"]
    assert "Problem:\nWhat is 6 times 7?" in prompt and "<|start|>" not in prompt
    assert "[analysis channel]\n6*7 is 42, checking: 7*6 = 42." in prompt and "[final channel]\n\\boxed{42}" in prompt


@pytest.mark.parametrize(
    ("env", "name"),
    [({"RFT_JUDGE_MODE": "both"}, "RFT_JUDGE_MODE"), ({"RFT_JUDGE_WEIGHTS": "0.6"}, "RFT_JUDGE_WEIGHTS"),
     ({"RFT_JUDGE_WEIGHTS": "0,1"}, "RFT_JUDGE_WEIGHTS"), ({"RFT_REWARD_SCHEME": "x"}, "RFT_REWARD_SCHEME")],
)  # fmt: skip
def test_bad_settings_name_the_variable(env, name) -> None:
    with pytest.raises(JudgeConfigError, match=name):
        BlendConfig.from_env(env)


def load_reward_module():
    """Load reward_func_judge.py exactly as openrlhf/utils/agent.py (0.9.3) does."""
    spec = importlib.util.spec_from_file_location("reward_func", str(REWARD_FILE))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_loading_in_blend_mode_warns(server, monkeypatch, caplog) -> None:
    monkeypatch.setenv("RFT_JUDGE_MODE", "blend")
    with caplog.at_level(logging.WARNING, logger="rft.reward.blend"):
        load_reward_module()
    assert any("pleasing the judge" in r.getMessage() and "0.40" in r.getMessage() for r in caplog.records)
    caplog.clear()
    monkeypatch.setenv("RFT_JUDGE_MODE", "correct_only")
    with caplog.at_level(logging.WARNING, logger="rft.reward.blend"):
        load_reward_module()
    assert not caplog.records


def test_threaded_calls_as_agent_py_makes_them(server) -> None:
    module = load_reward_module()

    async def main():
        calls = [asyncio.to_thread(module.reward_func, [q], [QWEN_PROMPT], ["29"]) for q in [RIGHT, WRONG] * 16]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    assert [float(r["rewards"][0]) for r in results] == pytest.approx([0.9, 0.0] * 16)
    for r in results:
        assert set(r["extra_logs"]) == set(EXTRA_LOG_KEYS_JUDGE)
        assert all(isinstance(v, torch.Tensor) and v.shape == (1,) for v in r["extra_logs"].values())


@pytest.mark.slow
def test_real_openrlhf_executor_and_experience_maker(server) -> None:
    """The real SingleTurnAgentExecutor loads reward_func_judge.py; the real experience maker keeps every key."""
    cases = [(QWEN_PROMPT, RIGHT[len(QWEN_PROMPT):], "29", "stop"), (QWEN_PROMPT, WRONG[len(QWEN_PROMPT):], "29", "stop")]
    env = stub_env()
    proc = subprocess.run(
        [sys.executable, "-c", _OPENRLHF_PATH_SCRIPT, str(ROOT / "tests"), str(REWARD_FILE), json.dumps(cases)],
        capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=300,
    )  # fmt: skip
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
    results = json.loads(line[0][len("RESULTS ") :])
    assert [r["reward"] for r in results] == [[pytest.approx(0.9)], [0.0]]
    assert [r["info"]["judge_asked"] for r in results] == [[1.0], [0.0]]
    for r in results:
        assert set(EXTRA_LOG_KEYS_JUDGE) <= set(r["info"])
    assert len(server.requests) == 1
