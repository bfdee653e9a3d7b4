"""The LoRA sync probe (`--lora_sync_probe`): a fixed math prompt the patched actor scores in every vLLM engine
before the first sync and after each, so a sync that never lands shows as a log-prob that never moves."""

from __future__ import annotations

PROBE_TEXT = (
    "Problem: Find the remainder when 2^10 is divided by 7. Put the final answer in \\boxed{}.\n"
    "Solution: 2^3 = 8 = 1 (mod 7), so 2^10 = 2^9 * 2 = 1 * 2 = 2 (mod 7). The answer is \\boxed{2}."
)


def probe_token_ids(pretrain: str) -> list[int]:
    """PROBE_TEXT in the model's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(pretrain, trust_remote_code=True)(PROBE_TEXT)["input_ids"]


def mean_prompt_logprob(output) -> float:
    """Mean log-prob of the prompt's own tokens (after the first) in a vLLM RequestOutput with prompt_logprobs."""
    ids, lps = output.prompt_token_ids, output.prompt_logprobs
    values = [lps[i][ids[i]].logprob for i in range(1, len(ids)) if lps[i] is not None and ids[i] in lps[i]]
    if not values:
        raise ValueError("the probe came back without prompt log-probs")
    return sum(values) / len(values)


# ----------------------------------------------------------------------------------------------------------
# Judging a sync: does the engine's change reproduce the trainer's? (docs/launching.md#smoke-mode)

PROBE_BAND = 0.3  # |engine − expected| <= PROBE_BAND·|expected| + slack (docs/launching.md#the-probes-band)
PROBE_FLOOR_FACTOR = 3.0  # an engine change counts as moved above 3x the probe's measured run-to-run floor
TRAINER_QUANTUM = 2e-3  # the trainer's bf16 log-probs move in steps of ~2e-3 (docs/lora-sync.md, bf16 table)
RECIPE_STEPS = 10  # the recipe-LR statement: does the served policy move within this many steps


def kept_share(reports: list[dict], index: int = 0) -> float:
    """The share of ΔW that survived rounding into the engine's weights, summed over every worker's shard
    (`kept[index]` of the merge reports: (<realized, ΔW>, ||ΔW||²)); 1.0 where no worker reported it."""
    sums = [r["kept"][index] for r in reports if len(r.get("kept") or ()) > index]
    den = sum(d for _, d in sums)
    return sum(n for n, _ in sums) / den if den > 0 else 1.0


def decisive_change(floor: float, band: float = PROBE_BAND) -> float:
    """The smallest |expected| change at which a merge at half or twice the right size falls outside the band:
    (0.5 - band)·|expected| must exceed the slack."""
    return (PROBE_FLOOR_FACTOR * floor + TRAINER_QUANTUM) / (0.5 - band)


def judge_sync(engine_delta: float, trainer_delta: float, kept: float, floor: float,
               band: float = PROBE_BAND) -> tuple[bool, str]:
    """(passed, reason): the engine's probe change since before the first sync against the trainer's.

    Expected engine change = kept·trainer_delta (what survives bf16 rounding of the merged weights). The change
    must clear PROBE_FLOOR_FACTOR·floor, have the trainer's sign and lie within band·|expected| + slack of it,
    slack = PROBE_FLOOR_FACTOR·floor + TRAINER_QUANTUM."""
    expected = kept * trainer_delta
    slack = PROBE_FLOOR_FACTOR * floor + TRAINER_QUANTUM
    moved = PROBE_FLOOR_FACTOR * floor
    nums = f"engine {engine_delta:+.3e}, expected {expected:+.3e} (trainer {trainer_delta:+.3e} x kept {kept:.2f})"
    if abs(engine_delta) <= moved or engine_delta == 0.0:
        return False, f"engine did not move ({nums}; floor {floor:.1e})"
    if abs(expected) < decisive_change(floor, band):
        return False, (f"the expected change is too small to tell a good merge from a half or double one ({nums}; "
                       f"needs {decisive_change(floor, band):.1e}): raise SMOKE_LR")
    if abs(expected) > slack and (engine_delta > 0) != (expected > 0):
        return False, f"engine moved against the trainer ({nums}): a merge with the wrong sign?"
    if abs(engine_delta - expected) > band * abs(expected) + slack:
        return False, (f"engine change {engine_delta / expected if expected else float('inf'):.2f}x the expected "
                       f"({nums}; band ±{band:g}): a merge on the wrong shard or with the wrong scale?")
    return True, nums


def recipe_change(trainer_delta: float, kept_at_recipe: float, scale: float) -> float:
    """The engine change the recipe's LR would make after RECIPE_STEPS steps: the smoke's trainer change scaled
    by `scale` = (recipe LR x RECIPE_STEPS) / (smoke LR x steps so far), times the share of that smaller update
    that survives bf16 rounding of the real weights (`kept_at_recipe`). Linear in the update (first order)."""
    return kept_at_recipe * scale * trainer_delta


def probe_stats(engine_base: list[float], engine_now: list[float], trainer_base: float, trainer_now: float,
                floor: float, kept: float) -> dict[str, float]:
    """The metrics row of one sync: the engine farthest from the expected change is the one logged."""
    trainer_delta = trainer_now - trainer_base
    deltas = [b - a for a, b in zip(engine_base, engine_now, strict=True)]
    worst = max(deltas, key=lambda d: abs(d - kept * trainer_delta))
    return {
        "lora_sync_probe_logprob": sum(engine_now) / len(engine_now),
        "lora_sync_probe_delta": min(abs(d) for d in deltas),
        "lora_sync_probe_engine_delta": worst,
        "lora_sync_probe_trainer_delta": trainer_delta,
        "lora_sync_probe_floor": floor,
        "lora_sync_kept_share": kept,
    }


def trainer_logprob(model, ids: list[int], device) -> float:
    """The trainer's mean log-prob of the probe's tokens (after the first), as the engine's prompt_logprobs
    give them; a forward every ZeRO-3 rank must make together."""
    import torch

    with torch.no_grad():
        x = torch.tensor([ids], device=device)
        logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits.float()
        lp = torch.log_softmax(logits[0, :-1], dim=-1).gather(-1, x[0, 1:, None])
    return float(lp.mean())


def run_to_run_floor(first: list[float], second: list[float]) -> float:
    """The probe's floor: the largest change of any engine between two scorings with nothing changed."""
    return max(abs(b - a) for a, b in zip(first, second, strict=True))


def kept_scales(recipe_lr: float, smoke_lr: float, steps_so_far: int) -> list[float]:
    """The `kept_scales` a probe sync asks the workers for: 1 (this update) and, given the recipe's LR, the
    update the recipe would have made after RECIPE_STEPS steps (Adam's step size is ~LR, so ΔW ~ LR x steps)."""
    if recipe_lr <= 0 or smoke_lr <= 0:
        return [1.0]
    return [1.0, recipe_lr * RECIPE_STEPS / (smoke_lr * max(steps_so_far, 1))]
