"""Reward settings from `reward.toml`: the exact-match scheme and the judge's mode, weights, chain, limits, cache, prices.

The file is optional: without one every setting has its built-in default (`reward.example.toml` lists them).
The reward functions run inside Ray workers and find the file through `RFT_REWARD_CONFIG` (an absolute path,
exported by the launcher), else `<repo>/reward.toml` when it exists. Credentials stay in the environment
(`rft.reward.judge.credentials_status`). Every error names the file, the key and the values it allows.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rft.provenance import REPO_ROOT
from rft.reward.blend import DEFAULT_WEIGHTS, MODES, BlendConfig
from rft.reward.exact_match import SCHEMES
from rft.reward.judge import (
    CACHE_FILE,
    DEFAULT_MODELS,
    DEFAULT_PRICES,
    FALLBACKS,
    THINKING_LEVELS,
    JudgeConfig,
)

CONFIG_NAME = "reward.toml"
CONFIG_ENV = "RFT_REWARD_CONFIG"
DEFAULTS = "built-in defaults"
CACHE_OFF = ("off", "none", "")
REWARD_KEYS = ("scheme",)
JUDGE_KEYS = (
    "mode",
    "weights",
    "models",
    "thinking_level",
    "base_url",
    "timeout",
    "retries",
    "backoff",
    "max_backoff",
    "concurrency",
    "rpm",
    "max_chars",
    "fallback",
    "fallback_window",
    "prior",
    "cache",
    "prices",
    "expected_solve_rate",
    "expected_response_tokens",
    "expected_output_tokens",
)
SECTIONS = {"reward": REWARD_KEYS, "judge": JUDGE_KEYS}


class RewardSettingsError(ValueError):
    """A reward setting is invalid; the message names the file, the key and the allowed values."""


@dataclass(frozen=True)
class CostEstimate:
    """What the dry run's judge cost estimate assumes per judged sample."""

    solve_rate: float = 0.5  # judged share in correct_only
    response_tokens: int | None = None  # input tokens of the response; None: half of --generate_max_len
    output_tokens: int = 1000


@dataclass(frozen=True)
class RewardSettings:
    """Every reward setting: the EM scheme, the judged reward's blend, the judge, the cost estimate's inputs."""

    scheme: str = "binary"
    blend: BlendConfig = field(default_factory=BlendConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    estimate: CostEstimate = field(default_factory=CostEstimate)
    source: str = DEFAULTS  # the file read, or DEFAULTS


class _Section:
    """One table of the file; each reader returns the value or the default and names `[section] key` on error."""

    def __init__(self, raw: Mapping[str, object], name: str, source: str):
        self.raw, self.name, self.source = raw, name, source

    def fail(self, key: str, why: str) -> RewardSettingsError:
        return RewardSettingsError(f"{self.source}: [{self.name}] {key} = {self.raw.get(key)!r}: {why}")

    def number(self, key: str, default: float, lo: float, hi: float = math.inf) -> float:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise self.fail(key, f"must be a number in [{lo:g}, {hi:g}]")
        return float(value)

    def integer(self, key: str, default: int, lo: int, hi: int) -> int:
        value = self.raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise self.fail(key, f"must be a whole number in [{lo}, {hi}]")
        return value

    def choice(self, key: str, default: str, allowed: tuple[str, ...]) -> str:
        value = self.raw.get(key, default)
        name = value.strip().lower() if isinstance(value, str) else None
        if name not in allowed:
            raise self.fail(key, f"use one of {list(allowed)}")
        return name

    def text(self, key: str) -> str | None:
        value = self.raw.get(key, "")
        if not isinstance(value, str):
            raise self.fail(key, "must be a string")
        return value.strip() or None


def read_file(path: Path) -> dict[str, dict]:
    """The file's tables, every section and key known; RewardSettingsError names the file and the key at fault."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RewardSettingsError(f"{path}: cannot read ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise RewardSettingsError(f"{path}: not valid TOML ({e})") from None
    for name, table in raw.items():
        if name not in SECTIONS or not isinstance(table, dict):
            raise RewardSettingsError(f"{path}: unknown section {name!r} (sections: [reward], [judge])")
        unknown = sorted(set(table) - set(SECTIONS[name]))
        if unknown:
            raise RewardSettingsError(
                f"{path}: unknown key [{name}] {unknown[0]} (known: {', '.join(SECTIONS[name])})"
            )
    return raw


def config_path(env: Mapping[str, str]) -> Path | None:
    """The settings file: $RFT_REWARD_CONFIG (absolute, must exist), else <repo>/reward.toml if present, else None."""
    raw = env.get(CONFIG_ENV, "").strip()
    if not raw:
        default = REPO_ROOT / CONFIG_NAME
        return default if default.is_file() else None
    path = Path(raw)
    if not path.is_absolute():
        raise RewardSettingsError(
            f"{CONFIG_ENV}={raw}: must be an absolute path (the reward runs in Ray workers with their own working directory)"
        )
    if not path.is_file():
        raise RewardSettingsError(f"{CONFIG_ENV}={raw}: no such file")
    return path


def _models(s: _Section) -> tuple[str, ...]:
    value = s.raw.get("models", list(DEFAULT_MODELS))
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value) or not any(m.strip() for m in value):
        raise s.fail("models", 'must be a non-empty list of model names, e.g. ["gemini-3-flash-preview"]')
    return tuple(m.strip() for m in value if m.strip())


def _prices(s: _Section, models: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """DEFAULT_PRICES updated by [judge.prices] (model = [in, out], USD per million tokens); every model priced."""
    table = s.raw.get("prices", {})
    if not isinstance(table, dict):
        raise s.fail("prices", "must be a table [judge.prices] of model = [in, out] (USD per million tokens)")
    prices = dict(DEFAULT_PRICES)
    for model, pair in table.items():
        ok = isinstance(pair, list) and len(pair) == 2
        ok = ok and all(not isinstance(x, bool) and isinstance(x, (int, float)) and x >= 0 for x in pair)
        if not ok:
            raise RewardSettingsError(
                f"{s.source}: [judge.prices] {model!r} = {pair!r}: must be two numbers [in, out] >= 0 "
                "(USD per million tokens)"
            )
        prices[model] = (float(pair[0]), float(pair[1]))
    unpriced = [m for m in models if m not in prices]
    if unpriced:
        raise RewardSettingsError(
            f"{s.source}: [judge] models names {unpriced} without a price; add them to [judge.prices] as "
            "model = [in, out] (USD per million tokens)"
        )
    return prices


def _weights(s: _Section, mode: str) -> tuple[float, float]:
    value = s.raw.get("weights", list(DEFAULT_WEIGHTS[mode]))
    ok = isinstance(value, list) and len(value) == 2
    ok = ok and all(not isinstance(x, bool) and isinstance(x, (int, float)) for x in value)
    if not ok or not (value[0] > 0 and value[1] >= 0):
        raise s.fail("weights", "must be two numbers [em, quality], the EM weight > 0 and the quality weight >= 0")
    return float(value[0]), float(value[1])


def _cache_path(s: _Section, base: Path | None, env: Mapping[str, str]) -> Path | None:
    """[judge] cache: "off" disables, a path (relative to the file), else $METRICS_LOG_DIR's, else ~/.cache/rft/."""
    if "cache" in s.raw:
        raw = s.raw["cache"]
        if not isinstance(raw, str):
            raise s.fail("cache", 'must be a file path or "off"')
        if raw.strip().lower() in CACHE_OFF:
            return None
        path = Path(raw.strip()).expanduser()
        return path if path.is_absolute() or base is None else base / path
    if env.get("METRICS_LOG_DIR", "").strip():
        return Path(env["METRICS_LOG_DIR"]).expanduser() / CACHE_FILE
    return Path.home() / ".cache" / "rft" / CACHE_FILE


def judge_settings(s: _Section, base: Path | None, env: Mapping[str, str]) -> JudgeConfig:
    """The judge's configuration from [judge]."""
    models = _models(s)
    level = s.choice("thinking_level", "low", THINKING_LEVELS)
    return JudgeConfig(
        models=models,
        timeout_s=s.number("timeout", 120.0, 0.001),
        retries=s.integer("retries", 2, 0, 20),
        backoff_s=s.number("backoff", 2.0, 0),
        max_backoff_s=s.number("max_backoff", 30.0, 0),
        concurrency=s.integer("concurrency", 16, 1, 4096),
        requests_per_min=s.number("rpm", 240.0, 0),
        max_chars=s.integer("max_chars", 60_000, 1000, 10**9),
        thinking_level=None if level == "none" else level,
        cache_path=_cache_path(s, base, env),
        base_url=s.text("base_url"),
        prices=_prices(s, models),
        fallback_window=s.integer("fallback_window", 256, 1, 10**6),
        prior_quality=s.number("prior", 0.5, 0, 1),
        fallback=s.choice("fallback", "mean", FALLBACKS),
    )


def cost_estimate(s: _Section) -> CostEstimate:
    """The dry run's cost-estimate inputs from [judge]."""
    response = s.integer("expected_response_tokens", 0, 0, 10**7)
    return CostEstimate(
        solve_rate=s.number("expected_solve_rate", 0.5, 0, 1),
        response_tokens=response or None,
        output_tokens=s.integer("expected_output_tokens", 1000, 0, 10**7),
    )


def load_settings(path: Path | None = None, env: Mapping[str, str] | None = None) -> RewardSettings:
    """The settings in `path` (else `config_path(env)`; built-in defaults without a file); errors name file and key."""
    env = os.environ if env is None else env
    if path is not None and not Path(path).is_file():
        raise RewardSettingsError(f"{path}: no such reward settings file")
    path = Path(path) if path is not None else config_path(env)
    raw = read_file(path) if path is not None else {}
    source = str(path) if path is not None else DEFAULTS
    base = path.resolve().parent if path is not None else None
    reward = _Section(raw.get("reward", {}), "reward", source)
    judge = _Section(raw.get("judge", {}), "judge", source)
    scheme = reward.choice("scheme", "binary", tuple(sorted(SCHEMES)))
    mode = judge.choice("mode", "correct_only", MODES)
    em_weight, quality_weight = _weights(judge, mode)
    return RewardSettings(
        scheme=scheme,
        blend=BlendConfig(mode, em_weight, quality_weight, scheme),
        judge=judge_settings(judge, base, env),
        estimate=cost_estimate(judge),
        source=source,
    )
