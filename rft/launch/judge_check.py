"""Pre-launch checks of the judge reward (REWARD=judge): settings, credentials, a run cost estimate, one live call.

Used by `rft.launch.rules.run_checks` when `--remote_rm_url` is `reward_func_judge.py`. Missing credentials
or a failed live call block a launch (NEEDS); invalid settings in reward.toml are errors naming the file and the key.
The live call (one tiny judgement, never cached) runs before any GPU work unless `--no-judge-check`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from rft.reward.judge import Judge, JudgeConfig, credentials_status, estimate_run_cost, make_client
from rft.reward.settings import RewardSettings, RewardSettingsError, load_settings

JUDGE_REWARD_FILE = "reward_func_judge.py"
LIVE_PROBLEM = "What is 2 + 2?"
LIVE_RESPONSE = "2 + 2 = 4, so the answer is \\boxed{4}."
PROMPT_OVERHEAD_TOKENS = 1000  # rubric + problem + reference, roughly


class ReportLike(Protocol):
    errors: list[str]
    blocking: list[str]
    warnings: list[str]
    notes: list[str]


def uses_judge(a: argparse.Namespace) -> bool:
    """True when the command's reward is the judge reward file."""
    urls = getattr(a, "remote_rm_url", None) or []
    return bool(urls) and Path(urls[0]).name == JUDGE_REWARD_FILE


def cost_note(a: argparse.Namespace, settings: RewardSettings, steps: int | None) -> str:
    """The run's judge cost estimate: samples per step x steps x judged share x expected tokens."""
    cfg, blend, expected = settings.judge, settings.blend, settings.estimate
    per_step = a.rollout_batch_size * a.n_samples_per_prompt
    response = expected.response_tokens or a.generate_max_len // 2
    output = expected.output_tokens
    share = 1.0 if blend.mode == "blend" else expected.solve_rate
    inp = PROMPT_OVERHEAD_TOKENS + min(response, cfg.max_chars // 3)
    if steps is None:
        return f"judge cost: {per_step} samples/step; run length unknown (no LR schedule), no estimate"
    usd = estimate_run_cost(cfg, per_step, steps, share, inp, output)
    return (
        f"judge cost estimate: {per_step} samples/step x {steps} steps x {share:.0%} judged ({blend.mode}) x "
        f"({inp:,} in + {output:,} out tokens at {cfg.models[0]}'s ${cfg.prices[cfg.models[0]][0]:g}/"
        f"${cfg.prices[cfg.models[0]][1]:g} per M) = ${usd:,.2f} (eval samples extra; cache hits free)"
    )


def live_call(cfg: JudgeConfig, env: Mapping[str, str]) -> tuple[bool, str]:
    """One real judgement through the configured chain (uncached); (ok, what happened)."""
    j = Judge(cfg, client=make_client(cfg, env)).judge(LIVE_PROBLEM, LIVE_RESPONSE, "4", use_cache=False)
    if j.ok:
        return True, (
            f"judge: live call answered by {cfg.models[j.model_index]} (score {j.score:.2f}) in {j.latency_s:.1f} s, "
            f"${j.cost_usd:.4f}"
        )
    return False, "judge: live call failed on every model: " + "; ".join(j.errors[-len(cfg.models) :])


def judge_rule(
    a: argparse.Namespace, rep: ReportLike, steps: int | None, *, live: bool, env: Mapping[str, str] | None = None
) -> None:
    """Add the judge reward's checks to the report (nothing when the reward is not the judge)."""
    if not uses_judge(a):
        return
    env = os.environ if env is None else env
    try:
        settings = load_settings(env=env)
    except RewardSettingsError as e:
        rep.errors.append(f"judge: {e}")
        return
    blend, cfg = settings.blend, settings.judge
    rep.notes.append(
        f"judge: {blend.mode} (weights em {blend.em_weight:g}, quality {blend.quality_weight:g}), chain "
        f"{' -> '.join(cfg.models)}, cache {cfg.cache_path or 'off'}; settings from {settings.source}"
    )
    engines = max(1, getattr(a, "vllm_num_engines", 1) or 1)
    rep.notes.append(
        f"judge: limits per process {cfg.concurrency} concurrent, {cfg.requests_per_min:g}/min; the reward runs in "
        f"each of {engines} vLLM engine(s): up to {cfg.concurrency * engines} concurrent, "
        f"{cfg.requests_per_min * engines:g}/min overall"
    )
    rep.notes.append(cost_note(a, settings, steps))
    if blend.mode == "blend":
        rep.warnings.append(
            "judge: [judge] mode = \"blend\" gives wrong answers partial credit (reward for pleasing the judge); "
            "correct_only pays nothing for wrong answers"
        )
    ok, why = credentials_status(env)
    if not ok:
        rep.blocking.append(f"judge: {why}")
        return
    rep.notes.append(f"judge: credentials: {why}" + (f", endpoint {cfg.base_url}" if cfg.base_url else ""))
    if not live:
        rep.warnings.append("judge: live call skipped (--no-judge-check)")
        return
    ok, what = live_call(cfg, env)
    (rep.notes if ok else rep.blocking).append(what)
