"""Generated metrics/spike logs for monitor tests: one seeded scenario per run pattern the monitor must name.

Key names are the ones the patched OpenRLHF 0.9.3 trainer writes (`reward`, `kl`, `logprobs_diff`,
`vllm_kl`, `entropy_loss`, `truncated`, `group_reward_std`, plus our reward extra_logs and loss diagnostics).
Held-out evals are written as a separate record with the same `global_step`, as the trainer logs them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

STEPS = 40
EVAL_EVERY = 5
PROBE = "eval_ood_pass1"


def _clip(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return min(max(x, lo), hi)


def step_times(step: int) -> dict:
    """A synchronous step's time_* keys (own seeded draw, the scenarios' values stay as they were): generation
    dominates, a checkpoint saved every 4 steps lands in the next line, 3 s in no phase."""
    rng = random.Random(28_000 + step)
    phases = {"generate": 300 + rng.uniform(-20, 20), "reward": rng.uniform(0, 5), "logprob": 80.0,
              "train": 200 + rng.uniform(-10, 10), "sync": 18.0, "eval": 0.0,
              "save": 40.0 if step % 4 == 1 and step > 1 else 0.0}
    row = {f"time_{p}_s": s for p, s in phases.items()}
    row["time_step_s"] = sum(phases.values()) + 3.0
    row.update(tokens_generated_per_s=1500.0, tokens_trained_per_s=4000.0, response_len_p50=1800.0,
               response_len_p90=4096.0, response_len_max=4096.0)
    return row


def base_row(step: int, rng: random.Random, *, learn: float = 0.004, kl_scale: float = 1e-3) -> dict:
    """A healthy step: correctness rising `learn`/step, KL to reference growing, everything else steady."""
    correct = _clip(0.35 + learn * step + rng.gauss(0, 0.02))
    kl = kl_scale * step / 10 * (1 + rng.gauss(0, 0.05))
    return {
        "global_step": step,
        "timestamp": 1_700_000_000 + 660 * step,
        "reward": correct,
        "reward_mean": correct,
        "reward_std": 0.45,
        "reward_min": 0.0,
        "reward_max": 1.0,
        "correctness": correct,
        "has_boxed": _clip(0.93 + rng.gauss(0, 0.01)),
        "has_answer": _clip(0.97 + rng.gauss(0, 0.005)),
        "boxed_in_final": 0.9,
        "parse_method": 1.9,
        "truncated_response": 0.1,
        "truncated": _clip(0.12 + rng.gauss(0, 0.02)),
        "response_length": 2400 + rng.gauss(0, 80),
        "total_length": 2600 + rng.gauss(0, 80),
        "policy_loss": 0.05 + rng.gauss(0, 0.005),
        "grad_norm": abs(0.8 + rng.gauss(0, 0.15)),
        "actor_lr": 5e-7,
        "kl": kl,
        "logprobs_diff": kl * (1 + rng.gauss(0, 0.05)),
        "vllm_kl": abs(2e-4 + rng.gauss(0, 5e-5)),
        "ppo_kl": rng.gauss(0, 1e-5),
        "ppo_clip_ratio": 0.0,
        "entropy_loss": 1.4 + rng.gauss(0, 0.03),
        "group_reward_std": 0.0 if step == 1 else 0.3 + rng.gauss(0, 0.02),
        "logratio_raw_max": 1.5 + rng.gauss(0, 0.1),
        "logratio_max": 1.5,
        "logratio_min": -1.4,
        "ratio_max": 4.5,
        "logratio_abs_p99": 0.2,
        "uniform_group_share": 0.3,
        "uniform_group_token_share": 0.25,
        "nonzero_adv_share": 0.6,
        "groups_all_correct": 0.1,
        "groups_all_wrong": 0.2,
        **step_times(step),
    }


def _eval_rows(scores: dict[int, float]) -> dict[int, dict]:
    return {s: {"global_step": s, "event": "eval", PROBE: v, "eval_aime_pass1": round(v * 18 * 0.7) / 18} for s, v in scores.items()}


def _binomial_scores(rng: random.Random, p_at: Callable[[int], float], n: int = 202) -> dict[int, float]:
    return {s: sum(rng.random() < p_at(s) for _ in range(n)) / n for s in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)}


def scenario(name: str) -> tuple[list[dict], list[dict]]:
    """(metrics records, spike-log records) of a named scenario; see SCENARIOS."""
    rng = random.Random(sum(map(ord, name)))
    spikes: list[dict] = []
    if name == "healthy":
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "flat":
        rows = [base_row(s, rng, learn=0.0, kl_scale=1e-4 * 10 / max(s, 1)) for s in range(1, STEPS + 1)]
        evals = _binomial_scores(rng, lambda s: 0.41)
    elif name == "spiking":
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        for step, g, raw in ((17, 180.0, 9.5), (29, 250.0, 12.0), (35, 390.0, 14.2)):
            rows[step - 1].update(grad_norm=g, policy_loss=0.45, logratio_raw_max=raw, ratio_max=2.4e4)
            spikes.append({
                "global_step": step, "grad_norm": g, "logratio_raw_max": raw, "logratio_max": raw,
                "ratio_max": 2.4e4, "logratio_abs_p99": 3.1, "prompt_hashes": [f"{step:032x}", f"{step + 1:032x}"],
            })
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "hacking":
        rows = [base_row(s, rng, learn=0.007) for s in range(1, STEPS + 1)]
        evals = dict(zip(range(5, 41, 5), [0.42, 0.43, 0.41, 0.42, 0.40, 0.41, 0.39, 0.40], strict=True))
    elif name == "collapsing":
        rows = []
        for s in range(1, STEPS + 1):
            row = base_row(s, rng)
            fade = max(0.0, (s - 20) / 20)
            row["response_length"] = 2400 * (1 - 0.75 * fade) + rng.gauss(0, 40)
            row["entropy_loss"] = 1.4 * (1 - 0.8 * fade) + rng.gauss(0, 0.02)
            rows.append(row)
        evals = _binomial_scores(rng, lambda s: 0.42)
    elif name == "unstable":
        # Correctness falling while the KL to the reference spikes (grad norms normal: not a loss/grad spike).
        rows = [base_row(s, rng, learn=-0.004) for s in range(1, STEPS + 1)]
        for step in (25, 31, 36):
            rows[step - 1].update(kl=0.05, logprobs_diff=0.05)
        evals = dict(zip(range(5, 41, 5), [0.42, 0.41, 0.42, 0.40, 0.41, 0.40, 0.41, 0.40], strict=True))
    elif name == "truncating":
        # Responses grow into the generate_max_len wall after step 20: most of them cut off.
        rows = []
        for s in range(1, STEPS + 1):
            row = base_row(s, rng)
            grow = max(0, s - 20)
            row["response_length"] = 2400 + 80 * grow + rng.gauss(0, 40)
            row["truncated"] = _clip(0.12 + 0.04 * grow + rng.gauss(0, 0.02))
            rows.append(row)
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "early_stop":
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        evals = dict(zip(range(5, 41, 5), [0.40, 0.43, 0.45, 0.47, 0.46, 0.38, 0.30, 0.29], strict=True))
    elif name == "broken_sync":
        rows = [base_row(s, rng) for s in range(1, 13)]
        for row in rows:
            s = row["global_step"]
            row.update(vllm_kl=0.12 + rng.gauss(0, 0.01), kl=-2e-4 * s, logprobs_diff=-2e-4 * s)
        evals = {}
    elif name == "sync_drift":  # syncs stop landing after step 3: the gap grows as the trainer moves on
        rows = [base_row(s, rng) for s in range(1, 13)]
        for row in rows:
            s = row["global_step"]
            row["vllm_kl"] = 3e-4 if s <= 3 else 0.03 * (s - 3)
        evals = {}
    elif name == "nan_loss":  # the trainer's log-probs went NaN at step 1 (written as null)
        rows = [base_row(s, rng) for s in range(1, 13)]
        for row in rows:
            row.update(policy_loss=None, kl=None, vllm_kl=None)
        evals = {}
    elif name == "early_fail":
        rows = [base_row(s, rng) for s in range(1, 7)]
        for row in rows:
            row.update(reward=0.0, reward_mean=0.0, correctness=0.0, has_boxed=0.25, truncated=0.65)
        evals = {}
    elif name == "judge_failing":
        # Judge reward: quota trouble from step 25 (failed / asked), the step cost logged.
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        for row in rows:
            s = row["global_step"]
            row.update(judge_fail_rate=0.02 if s < 25 else 0.3, judge_cost_step_usd=1.5, reward_high_but_wrong=0.0)
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "judge_pleasing":
        # Blend reward: wrong answers paid above their group more and more often.
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        for row in rows:
            s = row["global_step"]
            row.update(judge_fail_rate=0.0, reward_high_but_wrong=_clip(0.01 + 0.004 * s + rng.gauss(0, 0.005)),
                       reward_mean_wrong=0.1 + 0.003 * s)  # fmt: skip
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "format_drift":
        # has_boxed slides from 93% to ~80% after step 15: above the early check's 50%, below the guide's 90%.
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        for row in rows:
            row["has_boxed"] = _clip(0.93 - 0.006 * max(0, row["global_step"] - 15) + rng.gauss(0, 0.005))
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "ratio_tail":
        # Importance ratios past the guide's limits at a few steps (log-ratio 2.7 -> ratio 15; raw 6.1 -> 445),
        # gradient norms normal: not a loss/grad spike.
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        rows[24].update(logratio_raw_max=2.7, logratio_max=2.7, ratio_max=14.9)
        rows[31].update(logratio_raw_max=6.1, logratio_max=6.1, ratio_max=445.9)
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "negative_ppo_kl":
        # ppo_kl below zero step after step from step 25 (old log-probs not from the sampling policy).
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        for row in rows[24:]:
            row["ppo_kl"] = -3e-3 + rng.gauss(0, 5e-4)
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "reward_dropout":
        # A learning run whose reward falls to 0 at step 37 and stays there (a judge or reward file broke).
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        for row in rows[36:]:
            row.update(reward=0.0, reward_mean=0.0, correctness=0.0, reward_std=0.0, reward_max=0.0)
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name in ("showcase", "showcase_no_baseline"):
        # The CPU demonstration's shape: reward 0.08 -> 0.44 by step 16, then a plateau to step 32; the probe
        # (eval every 8 steps) from the base model's 0.10 at step 0 to ~0.80, as in the run. Without the
        # step-0 eval the probe starts at 0.81 at step 8, after most of the learning.
        rows = []
        for s in range(1, 33):
            row = base_row(s, rng)
            r = _clip(0.08 + 0.36 * min(s, 16) / 16 + rng.gauss(0, 0.03))
            row.update(reward=r, reward_mean=r, correctness=r, kl=2e-3 * min(s, 16) / 16 + 1e-3)
            rows.append(row)
        evals = {8: 0.81, 16: 0.83, 24: 0.79, 32: 0.80}
        if name == "showcase":
            evals = {0: 0.10, **evals}
    elif name == "uniform_groups":
        # From step 26 the policy has mastered most prompts: 70-80% of the groups all right, zero advantage.
        rows = [base_row(s, rng) for s in range(1, STEPS + 1)]
        for row in rows:
            s = row["global_step"]
            if s >= 26:
                share = 0.7 + 0.01 * (s - 26)
                row.update(uniform_group_share=share, uniform_group_token_share=share - 0.1,
                           nonzero_adv_share=0.9 - share, groups_all_correct=share - 0.05, groups_all_wrong=0.05)
        evals = _binomial_scores(rng, lambda s: 0.38 + 0.004 * s)
    elif name == "upstream_only":
        keep = {"global_step", "timestamp", "reward", "kl", "logprobs_diff", "policy_loss", "actor_lr",
                "ppo_kl", "ppo_clip_ratio", "response_length", "total_length", "truncated", "group_reward_std"}
        rows = [{k: v for k, v in base_row(s, rng).items() if k in keep} for s in range(1, 16)]
        evals = {}
    else:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    by_step = _eval_rows(evals)
    out = [by_step[0]] if 0 in by_step else []  # the base model's eval, before step 1
    for row in rows:
        out.append(row)
        if row["global_step"] in by_step:
            out.append(by_step[row["global_step"]])
    return out, spikes


SCENARIOS = ("healthy", "flat", "spiking", "hacking", "collapsing", "unstable", "truncating", "early_stop",
             "broken_sync", "sync_drift", "nan_loss", "early_fail", "upstream_only", "judge_failing", "judge_pleasing",
             "format_drift", "ratio_tail", "negative_ppo_kl", "reward_dropout", "showcase", "showcase_no_baseline",
             "uniform_groups")


def write_scenario(name: str, directory: Path) -> Path:
    """Write a scenario's training_metrics.jsonl (+ spike_log.jsonl) into `directory`; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    if name == "corrupted":
        (directory / "training_metrics.jsonl").write_text(corrupted_text())
        return directory
    rows, spikes = scenario(name)
    (directory / "training_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if spikes:
        (directory / "spike_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in spikes))
    return directory


def corrupted_text() -> str:
    """What real logs contain: garbage, NaN/inf, missing keys, a restart repeating steps, a partial last line."""
    rng = random.Random(7)
    lines = [json.dumps(base_row(s, rng)) for s in range(1, 11)]
    lines[3] = lines[3][:40] + "}{garbage"  # step 4 written over by a crashed writer
    lines.insert(5, "[1, 2, 3]")  # not an object
    lines.insert(6, json.dumps({"reward": 0.5}))  # no global_step
    lines.append(json.dumps({"global_step": 11}))  # a record with no metrics at all
    # restart from the step-8 checkpoint: steps 8.. repeat with new values (marked with correctness 0.99)
    for s in range(8, 13):
        row = base_row(s, rng)
        row["correctness"] = 0.99
        lines.append(json.dumps(row))
    lines.append(json.dumps({"global_step": 12, "grad_norm": float("nan"), "policy_loss": float("inf")}))
    lines.append(json.dumps({"global_step": 12, "event": "eval", "eval_ood_pass1": None}))  # writer's null
    text = "\n".join(lines) + "\n"
    return text + json.dumps(base_row(13, rng))[:57]  # partially written last line, no newline
