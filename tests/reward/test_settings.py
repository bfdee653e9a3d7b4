"""reward.toml: defaults without a file, every key read, the file found through RFT_REWARD_CONFIG, clear errors."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from rft.fixtures.reward_files import write_reward_toml
from rft.provenance import REPO_ROOT as ROOT
from rft.reward import settings as settings_mod
from rft.reward.judge import DEFAULT_MODELS, DEFAULT_PRICES
from rft.reward.settings import (
    CONFIG_ENV,
    DEFAULTS,
    JUDGE_KEYS,
    REWARD_KEYS,
    RewardSettingsError,
    config_path,
    load_settings,
)

EXAMPLE = ROOT / "reward.example.toml"


@pytest.fixture
def no_repo_file(monkeypatch, tmp_path):
    """A repo root without reward.toml, so the built-in defaults apply."""
    monkeypatch.setattr(settings_mod, "REPO_ROOT", tmp_path / "repo")


def test_defaults_without_a_file(no_repo_file, tmp_path) -> None:
    s = load_settings(env={"HOME": str(tmp_path)})
    assert (s.scheme, s.source) == ("binary", DEFAULTS)
    assert (s.blend.mode, s.blend.em_weight, s.blend.quality_weight, s.blend.scheme) == ("correct_only", 0.8, 0.2, "binary")
    j = s.judge
    assert j.models == DEFAULT_MODELS and j.prices == DEFAULT_PRICES and j.thinking_level == "low"
    assert (j.timeout_s, j.retries, j.backoff_s, j.max_backoff_s) == (120.0, 2, 2.0, 30.0)
    assert (j.concurrency, j.requests_per_min, j.max_chars, j.fallback) == (16, 240.0, 60_000, "mean")
    assert (j.fallback_window, j.prior_quality, j.base_url) == (256, 0.5, None)
    assert j.cache_path == Path.home() / ".cache" / "rft" / "judge_cache.sqlite"
    assert load_settings(env={"METRICS_LOG_DIR": "/runs/a"}).judge.cache_path == Path("/runs/a/judge_cache.sqlite")
    assert (s.estimate.solve_rate, s.estimate.response_tokens, s.estimate.output_tokens) == (0.5, None, 1000)


def test_every_key_is_read(tmp_path) -> None:
    judge = {
        "mode": "blend", "weights": [0.5, 0.5], "models": ["m1", " m2 "], "thinking_level": "none",
        "base_url": "http://127.0.0.1:9", "timeout": 30, "retries": 0, "backoff": 0.5, "max_backoff": 4,
        "concurrency": 3, "rpm": 0, "max_chars": 5000, "fallback": "em", "fallback_window": 8, "prior": 0.25,
        "cache": "cache/j.sqlite", "expected_solve_rate": 0.2, "expected_response_tokens": 900,
        "expected_output_tokens": 300, "prices": {"m1": [2, 12], "m2": [1, 4.5]}}  # fmt: skip
    assert set(judge) == set(JUDGE_KEYS)
    path = write_reward_toml(tmp_path / "reward.toml", reward={"scheme": "Signed"}, judge=judge)
    s = load_settings(path, env={})
    assert s.scheme == "signed" and s.source == str(path)
    assert (s.blend.mode, s.blend.em_weight, s.blend.quality_weight, s.blend.scheme) == ("blend", 0.5, 0.5, "signed")
    j = s.judge
    assert j.models == ("m1", "m2") and j.thinking_level is None and j.base_url == "http://127.0.0.1:9"
    assert (j.timeout_s, j.retries, j.backoff_s, j.max_backoff_s, j.concurrency) == (30.0, 0, 0.5, 4.0, 3)
    assert (j.requests_per_min, j.max_chars, j.fallback, j.fallback_window, j.prior_quality) == (0.0, 5000, "em", 8, 0.25)
    assert j.cache_path == tmp_path / "cache" / "j.sqlite"  # relative to the file
    assert j.prices["m2"] == (1.0, 4.5) and j.prices["gemini-3-flash-preview"] == DEFAULT_PRICES["gemini-3-flash-preview"]
    assert (s.estimate.solve_rate, s.estimate.response_tokens, s.estimate.output_tokens) == (0.2, 900, 300)


def test_blend_weights_default_by_mode_and_cache_off(tmp_path) -> None:
    path = write_reward_toml(tmp_path / "r.toml", judge={"mode": "blend", "cache": "off"})
    s = load_settings(path, env={})
    assert (s.blend.em_weight, s.blend.quality_weight) == (0.6, 0.4) and s.judge.cache_path is None


def test_the_file_is_found_through_the_variable_else_at_the_repo_root(monkeypatch, tmp_path) -> None:
    signed = write_reward_toml(tmp_path / "signed.toml", reward={"scheme": "signed"})
    assert load_settings(env={CONFIG_ENV: str(signed)}).scheme == "signed"
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.setattr(settings_mod, "REPO_ROOT", repo)
    assert config_path({}) is None and load_settings(env={}).source == DEFAULTS
    write_reward_toml(repo / "reward.toml", reward={"scheme": "signed"})
    assert config_path({}) == repo / "reward.toml" and load_settings(env={}).scheme == "signed"
    with pytest.raises(RewardSettingsError, match=f"{CONFIG_ENV}=reward.toml: must be an absolute path"):
        load_settings(env={CONFIG_ENV: "reward.toml"})
    with pytest.raises(RewardSettingsError, match=f"{CONFIG_ENV}=/no/such.toml: no such file"):
        load_settings(env={CONFIG_ENV: "/no/such.toml"})
    with pytest.raises(RewardSettingsError, match="no such reward settings file"):
        load_settings(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("sections", "message"),
    [({"reward": {"scheme": "bogus"}}, r"\[reward\] scheme = 'bogus': use one of \['binary', 'signed'\]"),
     ({"judge": {"mode": "both"}}, r"\[judge\] mode = 'both': use one of \['correct_only', 'blend'\]"),
     ({"judge": {"weights": [0.6]}}, r"\[judge\] weights = \[0.6\]: must be two numbers \[em, quality\]"),
     ({"judge": {"weights": [0, 1]}}, r"\[judge\] weights = \[0, 1\]: .*EM weight > 0"),
     ({"judge": {"timeout": "soon"}}, r"\[judge\] timeout = 'soon': must be a number in \[0.001, inf\]"),
     ({"judge": {"retries": -1}}, r"\[judge\] retries = -1: must be a whole number in \[0, 20\]"),
     ({"judge": {"retries": 1.5}}, r"\[judge\] retries = 1.5: must be a whole number"),
     ({"judge": {"concurrency": True}}, r"\[judge\] concurrency = True: must be a whole number"),
     ({"judge": {"models": ["gemini-9"]}}, r"\[judge\] models names \['gemini-9'\] without a price; add them to \[judge.prices\]"),
     ({"judge": {"models": [" ", ""]}}, r"\[judge\] models = \[' ', ''\]: must be a non-empty list of model names"),
     ({"judge": {"models": "m1"}}, r"\[judge\] models = 'm1': must be a non-empty list"),
     ({"judge": {"prices": {"m1": [2]}}}, r"\[judge.prices\] 'm1' = \[2\]: must be two numbers \[in, out\] >= 0"),
     ({"judge": {"prices": {"m1": [2, -1]}}}, r"\[judge.prices\] 'm1' = \[2, -1\]"),
     ({"judge": {"thinking_level": "max"}}, r"\[judge\] thinking_level = 'max': use one of \['minimal', 'low'"),
     ({"judge": {"fallback": "zero"}}, r"\[judge\] fallback = 'zero': use one of \['mean', 'em'\]"),
     ({"judge": {"prior": 2}}, r"\[judge\] prior = 2: must be a number in \[0, 1\]"),
     ({"judge": {"cache": 5}}, r"\[judge\] cache = 5: must be a file path or \"off\""),
     ({"judge": {"base_url": 5}}, r"\[judge\] base_url = 5: must be a string"),
     ({"judge": {"expected_solve_rate": 1.5}}, r"\[judge\] expected_solve_rate = 1.5: must be a number in \[0, 1\]"),
     ({"judge": {"rpms": 5}}, r"unknown key \[judge\] rpms \(known: mode, weights,"),
     ({"judges": {"mode": "blend"}}, r"unknown section 'judges' \(sections: \[reward\], \[judge\]\)")],
)  # fmt: skip
def test_bad_settings_name_the_file_the_key_and_the_allowed_values(tmp_path, sections, message) -> None:
    path = write_reward_toml(tmp_path / "reward.toml", **sections)
    with pytest.raises(RewardSettingsError, match=message) as e:
        load_settings(path, env={})
    assert str(e.value).startswith(f"{path}: ")


def test_a_file_that_is_not_toml(tmp_path) -> None:
    path = tmp_path / "reward.toml"
    path.write_text("[judge]\nmode = blend\n")
    with pytest.raises(RewardSettingsError, match=f"{path}: not valid TOML"):
        load_settings(path, env={})


def test_the_example_file_holds_the_defaults_and_every_key(no_repo_file) -> None:
    """reward.example.toml, copied as it is, changes nothing, and it documents every key."""
    assert replace(load_settings(EXAMPLE, env={}), source=DEFAULTS) == load_settings(env={})
    text = EXAMPLE.read_text()
    reward, judge = text.split("\n[reward]\n")[1].split("\n[judge]\n")
    judge, prices = judge.split("\n[judge.prices]\n")
    for body, keys in ((reward, REWARD_KEYS), (judge, [k for k in JUDGE_KEYS if k != "prices"])):
        missing = [k for k in keys if not re.search(rf"^(# )?{k} = ", body, re.M)]
        assert not missing, missing
    assert all(f'"{m}" = ' in prices for m in DEFAULT_PRICES)
