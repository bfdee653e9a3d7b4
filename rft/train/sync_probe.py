"""The LoRA sync probe (`--lora_sync_probe`): a fixed math prompt the patched actor scores in every vLLM engine
before the first sync and after each, and the trainer scores too: the engine's change must reproduce the trainer's
(`judge_sync`), so a sync that never lands, or lands with the wrong sign, scale or shard, fails the smoke."""

from __future__ import annotations

import math

PROBE_TEXT = (
    "Problem: Find the remainder when 2^10 is divided by 7. Put the final answer in \\boxed{}.\n"
    "Solution: 2^3 = 8 = 1 (mod 7), so 2^10 = 2^9 * 2 = 1 * 2 = 2 (mod 7). The answer is \\boxed{2}."
)


def probe_token_ids(pretrain: str) -> list[int]:
    """PROBE_TEXT in the model's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(pretrain, trust_remote_code=True)(PROBE_TEXT)["input_ids"]


# ----------------------------------------------------------------------------------------------------------
# Judging a sync: does the engine's change reproduce the trainer's, token by token? (docs/launching.md#smoke-mode)

PROBE_BAND = 0.3  # ||E − X|| <= PROBE_BAND·||X|| + slack (docs/launching.md#the-probes-band)
PROBE_FLOOR_FACTOR = 3.0  # an engine change counts as moved above 3x the probe's measured run-to-run floor
TRAINER_QUANTUM = 2e-3  # per token: the trainer's bf16 log-probs move in steps of ~2e-3 (docs/lora-sync.md)
RECIPE_STEPS = 10  # the recipe-LR statement: does the served policy move within this many steps
PROBE_KEYS = (
    "lora_sync_probe_logprob",
    "lora_sync_probe_delta",
    "lora_sync_probe_engine_delta",
    "lora_sync_probe_trainer_delta",
    "lora_sync_probe_engine_norm",
    "lora_sync_probe_expected_norm",
    "lora_sync_probe_trainer_norm",
    "lora_sync_probe_rel_error",
    "lora_sync_probe_cosine",
    "lora_sync_probe_tokens",
    "lora_sync_probe_floor",
    "lora_sync_kept_share",
    "lora_sync_recipe_kept",
    "lora_sync_recipe_scale",
    "lora_sync_recipe_lr",
)


def prompt_logprobs(output) -> list[float]:
    """The log-prob of each prompt token after the first in a vLLM RequestOutput with prompt_logprobs."""
    ids, lps = output.prompt_token_ids, output.prompt_logprobs
    if any(lps[i] is None or ids[i] not in lps[i] for i in range(1, len(ids))) or len(ids) < 2:
        raise ValueError("the probe came back without prompt log-probs")
    return [lps[i][ids[i]].logprob for i in range(1, len(ids))]


def mean_prompt_logprob(output) -> float:
    """Mean of `prompt_logprobs` (ppo_actor.patch's probe, compared token by token)."""
    values = prompt_logprobs(output)
    return sum(values) / len(values)


def kept_share(reports: list[dict], index: int = 0) -> float:
    """The share of ΔW that survived rounding into the engine's weights, summed over every worker's shard
    (`kept[index]` of the merge reports: (<realized, ΔW>, ||ΔW||²)); 1.0 where no worker reported it."""
    sums = [r["kept"][index] for r in reports if len(r.get("kept") or ()) > index]
    den = sum(d for _, d in sums)
    return sum(n for n, _ in sums) / den if den > 0 else 1.0


def run_to_run_floor(first: list[list[float]], second: list[list[float]]) -> float:
    """The probe's floor: the largest change of any token in any engine between two scorings, nothing changed."""
    return max(abs(b - a) for x, y in zip(first, second, strict=True) for a, b in zip(x, y, strict=True))


def _norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def compare(engine_delta: list[float], trainer_delta: list[float], kept: float) -> dict[str, float]:
    """One engine's per-token change E against the expected X = kept·T: the scalars judge_sync reads."""
    x = [kept * t for t in trainer_delta]
    diff = _norm([e - xi for e, xi in zip(engine_delta, x, strict=True)])
    en, xn = _norm(engine_delta), _norm(x)
    dot = sum(e * xi for e, xi in zip(engine_delta, x, strict=True))
    return {
        "lora_sync_probe_engine_delta": sum(engine_delta) / len(engine_delta),
        "lora_sync_probe_trainer_delta": sum(trainer_delta) / len(trainer_delta),
        "lora_sync_probe_engine_norm": en,
        "lora_sync_probe_expected_norm": xn,
        "lora_sync_probe_trainer_norm": _norm(trainer_delta),
        "lora_sync_probe_rel_error": diff / xn if xn > 0 else math.inf,
        "lora_sync_probe_cosine": dot / (en * xn) if en > 0 and xn > 0 else 0.0,
        "lora_sync_probe_tokens": float(len(engine_delta)),
        "lora_sync_kept_share": kept,
    }


def slack(floor: float, tokens: float) -> float:
    """The absolute allowance on ||E − X||: per token 3x the floor plus the trainer's bf16 step, over n tokens."""
    return (PROBE_FLOOR_FACTOR * floor + TRAINER_QUANTUM) * math.sqrt(tokens)


def decisive_norm(floor: float, tokens: float, band: float = PROBE_BAND) -> float:
    """The smallest ||X|| at which a merge of half or twice the right size (||E − X|| = ||X||/2 or more) falls
    outside the band: (0.5 − band)·||X|| must exceed the slack."""
    return slack(floor, tokens) / (0.5 - band)


def judge_sync(row: dict[str, float], band: float = PROBE_BAND) -> tuple[bool, str]:
    """(passed, reason) for one sync from its `compare` scalars plus `lora_sync_probe_floor`."""
    floor, n = row.get("lora_sync_probe_floor", 0.0), row["lora_sync_probe_tokens"]
    en, xn, rel = row["lora_sync_probe_engine_norm"], row["lora_sync_probe_expected_norm"], row[
        "lora_sync_probe_rel_error"]
    nums = (f"engine {row['lora_sync_probe_engine_delta']:+.2e}/token, trainer "
            f"{row['lora_sync_probe_trainer_delta']:+.2e} x kept {row['lora_sync_kept_share']:.2f}; "
            f"||E-X||/||X|| {rel:.2f}, cos {row['lora_sync_probe_cosine']:+.2f}, {n:.0f} tokens")
    if en == 0.0 or en <= PROBE_FLOOR_FACTOR * floor * math.sqrt(n):
        return False, f"engine did not move ({nums}; floor {floor:.1e})"
    if xn < decisive_norm(floor, n, band):
        return False, (f"the expected change is too small to tell a good merge from a half or double one "
                       f"({nums}; ||X|| {xn:.1e} < {decisive_norm(floor, n, band):.1e}): raise SMOKE_LR")
    if row["lora_sync_probe_cosine"] < 0:
        return False, f"engine moved against the trainer ({nums}): a merge with the wrong sign?"
    if rel * xn > band * xn + slack(floor, n):
        return False, f"engine change off the trainer's ({nums}; band {band:g}): wrong shard or wrong scale?"
    return True, nums


def recipe_change(trainer_norm: float, kept_at_recipe: float, scale: float) -> float:
    """||X|| the recipe's LR would make after RECIPE_STEPS steps: the smoke's trainer change scaled by `scale` =
    (recipe LR x RECIPE_STEPS) / (smoke LR x steps so far), times the share of that smaller update that survives
    bf16 rounding of the real weights (`kept_at_recipe`). Linear in the update (first order)."""
    return kept_at_recipe * scale * trainer_norm


def probe_stats(engine_base: list[list[float]], engine_now: list[list[float]], trainer_base: list[float],
                trainer_now: list[float], floor: float, kept: float) -> dict[str, float]:
    """The metrics row of one sync: the engine farthest from the expected change is the one logged."""
    trainer_delta = [b - a for a, b in zip(trainer_base, trainer_now, strict=True)]
    rows = [compare([b - a for a, b in zip(base, now, strict=True)], trainer_delta, kept)
            for base, now in zip(engine_base, engine_now, strict=True)]
    worst = max(rows, key=lambda r: r["lora_sync_probe_rel_error"])
    means = [sum(now) / len(now) for now in engine_now]
    deltas = [abs(r["lora_sync_probe_engine_delta"]) for r in rows]
    return {**worst, "lora_sync_probe_logprob": sum(means) / len(means), "lora_sync_probe_delta": min(deltas),
            "lora_sync_probe_floor": floor}


def trainer_logprobs(model, ids: list[int], device) -> list[float]:
    """The trainer's log-prob of each probe token after the first, as the engine's prompt_logprobs give them;
    a forward every ZeRO-3 rank must make together."""
    import torch

    with torch.no_grad():
        x = torch.tensor([ids], device=device)
        logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits.float()
        lp = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, x[0, 1:, None])
    return lp[:, 0].tolist()


def kept_scales(recipe_lr: float, smoke_lr: float, steps_so_far: int) -> list[float]:
    """The `kept_scales` a probe sync asks the workers for: 1 (this update) and, given the recipe's LR, the
    update the recipe would have made after RECIPE_STEPS steps (Adam's step size is ~LR, so ΔW ~ LR x steps)."""
    if recipe_lr <= 0 or smoke_lr <= 0:
        return [1.0]
    return [1.0, recipe_lr * RECIPE_STEPS / (smoke_lr * max(steps_so_far, 1))]
