"""The judge-blended GRPO reward: exact match plus Gemini-judged reasoning quality, in two modes.

- `correct_only` (default: no credit for a wrong answer): a wrong or missing answer gets exactly the EM
  reward and the judge is not asked; a correct one gets `em_weight * correct + quality_weight * quality`, so
  its reward rises with quality and never falls to a wrong answer's.
- `blend` (the 120b README): `em_weight * em + quality_weight * quality` for every sample; partial credit
  for wrong answers pays for pleasing the judge, so loading it logs a warning.

When every model fails for a sample the quality is the running mean of recent successful judgements (the
failure shifts nothing on average; `fallback = "em"`: 0, exact match alone) and `judge_ok` is 0. Configured by
reward.toml (`rft.reward.settings`): [reward] scheme, [judge] mode, weights and the judge's own settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rft.reward.exact_match import (
    EXTRA_LOG_KEYS,
    Grade,
    as_tensors,
    as_text,
    batch_rows,
    isolate_response,
    reward_value,
    safe_grade,
    user_message,
)
from rft.reward.judge import Judge, JudgeConfig, Judgement

log = logging.getLogger(__name__)

MODES = ("correct_only", "blend")
DEFAULT_WEIGHTS = {"correct_only": (0.8, 0.2), "blend": (0.6, 0.4)}
JUDGE_LOG_KEYS = (
    "reasoning_quality",
    "judge_asked",
    "judge_ok",
    "judge_model_index",
    "judge_latency_s",
    "judge_cost_usd",
    "judge_cached",
)
EXTRA_LOG_KEYS_JUDGE = (*EXTRA_LOG_KEYS, *JUDGE_LOG_KEYS)
BLEND_WARNING = (
    "rft.reward.blend: [judge] mode = \"blend\" pays wrong answers up to %.2f for pleasing the judge (partial credit "
    "invites reward hacking: watch reward_high_but_wrong and the OOD probe); correct_only pays nothing for wrong answers"
)
NOT_ASKED = Judgement(None, "", -1, 0.0, 0.0, False)


@dataclass(frozen=True)
class BlendConfig:
    """Mode, weights and the EM scheme of the judged reward (`rft.reward.settings` reads them from reward.toml)."""

    mode: str = "correct_only"
    em_weight: float = 0.8
    quality_weight: float = 0.2
    scheme: str = "binary"

    def asks_judge(self, g: Grade) -> bool:
        """Whether this sample's reward depends on the judge."""
        return self.mode == "blend" or g.correct

    def reward(self, g: Grade, quality: float) -> float:
        """The scalar reward for a grade and a reasoning quality in [0, 1]."""
        em = reward_value(g, self.scheme)
        if not self.asks_judge(g):
            return em
        return self.em_weight * em + self.quality_weight * quality


def judge_logs(asked: bool, j: Judgement, quality: float) -> dict[str, float]:
    """The judge's numeric per-sample logs (every key for every sample)."""
    return {
        "reasoning_quality": quality if asked else 0.0,
        "judge_asked": float(asked),
        "judge_ok": float(asked and j.ok),
        "judge_model_index": float(j.model_index),
        "judge_latency_s": j.latency_s,
        "judge_cost_usd": j.cost_usd,
        "judge_cached": float(j.cached),
    }


def score_sample(cfg: BlendConfig, judge: Judge, query: object, prompt: object, label: object) -> tuple[float, Grade, dict]:
    """(reward, grade, extra_logs) for one OpenRLHF sample; never raises."""
    g = safe_grade(query, prompt, label)
    asked = cfg.asks_judge(g)
    j = NOT_ASKED
    if asked:
        try:
            prompt_text = as_text(prompt)
            response = isolate_response(as_text(query), prompt_text)
            j = judge.judge(user_message(prompt_text), response, None if label is None else as_text(label))
        except Exception as err:  # a reward function must never raise
            log.warning("rft.reward.blend: judge call failed (%s: %s)", type(err).__name__, err)
    quality = j.score if j.ok else judge.fallback_quality()
    return cfg.reward(g, quality), g, {**g.extra_logs(), **judge_logs(asked, j, quality)}


def make_judge_reward_func(cfg: BlendConfig, judge: Judge) -> Callable[[Sequence, Sequence, Sequence], dict]:
    """OpenRLHF's `reward_func(queries, prompts, labels)` for the judged reward."""

    def reward_func(queries: Sequence, prompts: Sequence | None, labels: Sequence | None) -> dict:
        """rewards/scores tensors of shape (n,) and numeric extra_logs, per OpenRLHF 0.9.3."""
        scored = [score_sample(cfg, judge, q, p, lab) for q, p, lab in batch_rows(queries, prompts, labels)]
        logs = {k: [s[2][k] for s in scored] for k in EXTRA_LOG_KEYS_JUDGE}
        return as_tensors([s[0] for s in scored], [float(s[1].correct) for s in scored], logs)

    reward_func.config = cfg  # type: ignore[attr-defined]
    reward_func.judge = judge  # type: ignore[attr-defined]
    return reward_func


def judge_reward_func(cfg: BlendConfig, judge_cfg: JudgeConfig, client=None) -> Callable:
    """The judged reward for these settings (warns at load time in blend mode)."""
    judge = Judge(judge_cfg, client=client)
    if cfg.mode == "blend":
        worst_wrong = cfg.em_weight * reward_value(Grade(False, "x", "boxed", True, True, False, False), cfg.scheme)
        log.warning(BLEND_WARNING, worst_wrong + cfg.quality_weight)
    return make_judge_reward_func(cfg, judge)
