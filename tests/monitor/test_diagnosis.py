"""Verdicts on generated scenario logs: each run pattern gets its playbook diagnosis, nothing else fires."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from rft.monitor.diagnosis import (
    EARLY_ACTIONS,
    FAIL,
    GUIDE_ACTIONS,
    INFO,
    JUDGE_ACTIONS,
    MISSING,
    PASS,
    PLAYBOOK,
    SINK_OR_SYNC,
    STOP,
    WARN,
    Thresholds,
    checkpoint_name,
    diagnose,
    exit_code,
    fmt,
    negative_share,
    probe_key,
    trend,
)
from rft.monitor.early_stop import drop_threshold
from rft.monitor.logs import MetricsLog, Spike, read_metrics, read_spikes
from tests.monitor.metric_logs import SCENARIOS, write_scenario

# scenario -> (exit code, {check: status} that must appear; every other verdict must be PASS/INFO/MISSING)
EXPECTED = {
    "healthy": (0, {"playbook diagnosis": PASS, "OOD probe early stopping": PASS, "rollout/trainer agreement": PASS}),
    "flat": (1, {"flat learning": WARN, "policy moving from reference": WARN}),
    "spiking": (1, {"loss/grad spikes": WARN, "extreme log-prob ratios": WARN}),
    "hacking": (1, {"reward hacking": WARN, "OOD probe early stopping": PASS}),
    "collapsing": (1, {"length collapse": WARN, "entropy collapse": WARN}),
    "unstable": (1, {"instability": WARN}),
    "truncating": (1, {"high truncation": WARN}),
    "early_stop": (2, {"OOD probe early stopping": STOP, "reward hacking": WARN}),
    "broken_sync": (2, {"rollout/trainer agreement": FAIL}),
    "nan_loss": (2, {"non-finite values": FAIL, "flat learning": WARN}),  # a NaN run learns nothing
    "sync_drift": (2, {"rollout/trainer agreement": FAIL, "flat learning": WARN}),  # rollouts from the base model
    "early_fail": (2, {"reward_mean not stuck at 0/1": FAIL, "has_boxed > 50% and not falling": FAIL,
                       "truncated < 50%": FAIL}),
    "upstream_only": (0, {"grad_norm non-zero, < 100": MISSING, "has_boxed > 50% and not falling": MISSING}),
    "judge_failing": (1, {"judge failure rate": WARN, "wrong answers paid above their group": PASS}),
    "judge_pleasing": (1, {"judge failure rate": PASS, "wrong answers paid above their group": WARN}),
    "format_drift": (1, {"has_boxed >= 90% in steady state": WARN, "has_boxed > 50% and not falling": PASS}),
    "ratio_tail": (1, {"extreme log-prob ratios": WARN}),
    "negative_ppo_kl": (1, {"ppo_kl not negative": WARN}),
    "reward_dropout": (2, {"reward not dropping to 0": FAIL, "reward_mean not stuck at 0/1": PASS}),
    # A run that learned and plateaued: with the base model's step-0 eval nothing fires; without it the probe
    # starts after the learning and the playbook calls it reward hacking. The plateau is not flat learning.
    "showcase": (0, {"playbook diagnosis": PASS, "OOD probe early stopping": PASS}),
    "showcase_no_baseline": (1, {"reward hacking": WARN}),
    "uniform_groups": (1, {"uniform groups": WARN}),
}


def test_uniform_groups_verdict_names_the_split_and_the_switches(tmp_path):
    v = {v.check: v for v in run("uniform_groups", tmp_path)}["uniform groups"]
    assert "uniform_group_share 80%, 81%, 82%, 83%, 84% at steps 36-40" in v.evidence
    assert "all right 79%" in v.evidence and "DYNAMIC_FILTER=1" in v.action and "--pass-rates" in v.action
    log = MetricsLog()
    for s, share in enumerate([0.9, 0.9, 0.4, 0.9, 0.9, 0.9], start=1):  # one teaching step breaks the run of 5
        log.add({"global_step": s, "uniform_group_share": share}, "x")
    assert "uniform groups" not in {v.check for v in diagnose(log)}


def test_judge_failure_rate_verdicts():
    def verdict(rates: list[float]):
        log = MetricsLog()
        for s, r in enumerate(rates, start=1):
            log.add({"global_step": s, "judge_fail_rate": r, "judge_cost_step_usd": 0.5}, "x")
        return {v.check: v for v in diagnose(log)}["judge failure rate"]

    ok = verdict([0.0, 0.1, 0.05])
    assert ok.status == PASS and "$1.50 over 3 steps" in ok.evidence
    warn = verdict([0.0, 0.25, 0.0])
    assert warn.status == WARN and "step 2 (25%)" in warn.evidence and "concurrency / rpm in reward.toml" in warn.action
    assert verdict([0.1, 0.6, 0.7, 0.9]).status == FAIL
    em_only = MetricsLog()
    em_only.add({"global_step": 1, "reward": 0.5}, "x")
    assert "judge failure rate" not in {v.check for v in diagnose(em_only)}


def run(name: str, tmp_path: Path):
    d = write_scenario(name, tmp_path / name)
    spikes, _ = read_spikes(d / "spike_log.jsonl")
    return diagnose(read_metrics(d), spikes)


def test_every_scenario_has_expectations():
    assert set(EXPECTED) == set(SCENARIOS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scenario_verdicts(name, tmp_path):
    verdicts = run(name, tmp_path)
    code, must = EXPECTED[name]
    got = {v.check: v.status for v in verdicts}
    for check, status in must.items():
        assert got.get(check) == status, (check, got)
    extra = [v for v in verdicts if v.status in (WARN, FAIL, STOP) and v.check not in must]
    assert not extra, extra
    assert exit_code(verdicts) == code


def test_agreement_failure_is_first_and_explains_off_policy_rollouts(tmp_path):
    v = run("broken_sync", tmp_path)[0]
    assert (v.check, v.status) == ("rollout/trainer agreement", FAIL)
    assert "vllm_kl=0.1" in v.evidence and "negative" in v.evidence
    assert "weight sync" in v.evidence and "attention sinks" in v.evidence


def test_sync_drift_fails_though_the_first_steps_agree(tmp_path):
    v = {v.check: v for v in run("sync_drift", tmp_path)}["rollout/trainer agreement"]
    assert v.status == FAIL and "sync drift" in v.evidence and "3.00e-04 early" in v.evidence


def test_spikes_are_joined_with_the_spike_log(tmp_path):
    spikes = {v.check: v for v in run("spiking", tmp_path)}["loss/grad spikes"]
    for step, raw in ((17, "9.5"), (29, "12"), (35, "14.2")):
        assert f"step {step}: grad_norm" in spikes.evidence
        assert f"logratio_raw_max {raw}" in spikes.evidence
    assert "2 prompt hash(es)" in spikes.evidence and "escalating" in spikes.evidence
    assert "eps_clip" in spikes.action


def test_early_stop_names_the_best_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "global_step20_hf").mkdir(parents=True)
    d = write_scenario("early_stop", tmp_path / "run")
    v = {x.check: x for x in diagnose(read_metrics(d), (), Thresholds(ckpt_path=str(ckpt)))}["OOD probe early stopping"]
    assert v.status == STOP
    assert "step 25 46.0% -> step 30 38.0%" in v.evidence and "step 30 38.0% -> step 35 30.0%" in v.evidence
    assert f"best so far step 20 (47.0%) -> {ckpt / 'global_step20_hf'}" in v.evidence


def test_noise_sized_probe_wobble_does_not_stop(tmp_path):
    log = MetricsLog()
    for i, score in enumerate([0.42, 0.39, 0.36, 0.33, 0.36, 0.33], start=1):  # 3 pp drops, three in a row
        log.add({"global_step": 5 * i, "eval_ood_pass1": score}, "x")
    v = {x.check: x for x in diagnose(log)}["OOD probe early stopping"]
    assert v.status == PASS


def test_missing_metrics_are_missing_never_failures():
    log = MetricsLog()
    for s in range(1, 8):
        log.add({"global_step": s, "reward": 0.3 + 0.01 * s}, "x")
    verdicts = diagnose(log)
    assert exit_code(verdicts) == 0
    by = {v.check: v.status for v in verdicts}
    assert by["rollout/trainer agreement"] == MISSING and by["grad_norm non-zero, < 100"] == MISSING
    assert by["OOD probe early stopping"] == MISSING


def test_zero_kl_means_no_reference_not_stuck():
    log = MetricsLog()
    for s in range(1, 15):
        log.add({"global_step": s, "kl": 0.0, "logprobs_diff": 0.0}, "x")
    v = {x.check: x for x in diagnose(log)}["policy moving from reference"]
    assert v.status == MISSING and "no reference model" in v.evidence


def test_grad_norm_early_check_cases():
    def verdict(values):
        log = MetricsLog()
        for s, g in enumerate(values, start=1):
            log.add(json.loads(json.dumps({"global_step": s, "grad_norm": g})), "x")
        return {v.check: v for v in diagnose(log)}["grad_norm non-zero, < 100"]

    assert verdict([0.0] * 6).status == FAIL and "Frozen" in verdict([0.0] * 6).action
    assert verdict([150.0] * 6).status == FAIL and "LR too high" in verdict([150.0] * 6).action
    assert verdict([1.0, 1.0, 150.0, 1.0]).status == WARN
    assert verdict([1.0, None, 1.0]).status == FAIL  # null = non-finite in the writer's log
    assert verdict([0.5, 0.7, 0.6]).status == PASS


def test_trend_slope_and_error():
    slope, se = trend([(s, 0.1 * s) for s in range(10)])
    assert slope == pytest.approx(0.1) and se < 1e-9
    assert trend([(1, 0.0), (2, 1.0)])[1] == float("inf")


def _early(rows: list[dict]) -> dict:
    log = MetricsLog()
    for s, row in enumerate(rows, start=1):
        log.add({"global_step": s, **row}, "x")
    return {v.check: v for v in diagnose(log)}


def test_early_checks_give_the_playbook_action():
    v = _early([{"reward": 1.0}] * 6)["reward_mean not stuck at 0/1"]
    assert v.status == FAIL and "stuck at 1" in v.evidence and "too easy" in v.action
    v = _early([{"has_boxed": b} for b in (0.95, 0.9, 0.85, 0.8, 0.72, 0.66)])["has_boxed > 50% and not falling"]
    assert v.status == WARN and "falling" in v.evidence and "train_sft.sh" in v.action
    v = _early([{"group_reward_std": 0.0}] * 6)["advantage_std not stuck at 0"]
    assert v.status == FAIL and "Advantage computation bug" in v.action
    assert _early([{"group_reward_std": 0.0}] + [{"group_reward_std": 0.3}] * 5)[
        "advantage_std not stuck at 0"].status == PASS
    v = _early([{"ppo_clip_ratio": 0.55}] * 6)["ppo_clip_ratio < 40%"]
    assert v.status == FAIL and "--actor_learning_rate" in v.action
    assert _early([{"truncated": 0.2}] * 6)["truncated < 50%"].status == PASS


def test_guide_thresholds_name_their_steps(tmp_path):
    by = {v.check: v for v in run("format_drift", tmp_path)}
    assert "has_boxed 79% over steps 36-40 (< 90%)" in by["has_boxed >= 90% in steady state"].evidence
    ratios = {v.check: v for v in run("ratio_tail", tmp_path)}["extreme log-prob ratios"]
    assert "ratio_max > 10 at 2 of 20 steps (14.9@25, 446@32)" in ratios.evidence
    assert "logratio_raw_max > 5 at 1 of 20 steps (6.1@32)" in ratios.evidence and "eps_clip" in ratios.action
    kl = {v.check: v for v in run("negative_ppo_kl", tmp_path)}["ppo_kl not negative"]
    assert "negative at 100% of steps 31-40" in kl.evidence and "vllm_kl" in kl.action
    zero = {v.check: v for v in run("reward_dropout", tmp_path)}["reward not dropping to 0"]
    assert "0 at steps 37-40 (to the latest step)" in zero.evidence


def _rows(**series: list[float]) -> MetricsLog:
    log = MetricsLog()
    n = len(next(iter(series.values())))
    for i in range(n):
        log.add({"global_step": i + 1, **{k: v[i] for k, v in series.items()}}, "x")
    return log


def test_reward_zero_mid_run_cases():
    def verdict(rewards):
        return {v.check: v for v in diagnose(_rows(reward=rewards))}.get("reward not dropping to 0")

    learning = [0.2, 0.3, 0.3, 0.4, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5]
    assert verdict(learning) is None
    recovered = verdict(learning[:5] + [0.0, 0.0, 0.0] + learning[8:])  # three zero steps, then back
    assert recovered.status == WARN and "0 at steps 6-8," in recovered.evidence
    assert verdict(learning[:5] + [0.0, 0.0] + learning[7:]) is None  # two zero steps: a hard batch, not a break
    assert verdict(learning[:7] + [0.0, 0.0, 0.0]).status == FAIL
    # Zero from the first step is the early check's FAIL, not a drop.
    by = {v.check: v for v in diagnose(_rows(reward=[0.0] * 10))}
    assert "reward not dropping to 0" not in by and by["reward_mean not stuck at 0/1"].status == FAIL


def test_boxed_steady_state_waits_past_the_early_steps():
    def verdict(boxed):
        return {v.check: v for v in diagnose(_rows(reward=[0.3] * len(boxed), has_boxed=boxed))}.get(
            "has_boxed >= 90% in steady state")

    assert verdict([0.8] * 10) is None  # 4 steps past the first 6: not yet a steady state
    assert verdict([0.8] * 11).status == WARN
    assert verdict([0.7] * 6 + [0.95] * 5) is None  # learnt the format after the early steps


def test_step0_eval_is_a_baseline_not_a_training_step(tmp_path):
    """The eval-only record at step 0 leaves the early checks' six steps alone and starts the probe's trend."""
    log = read_metrics(write_scenario("showcase", tmp_path / "s"))
    assert log.steps()[0] == 0 and log.train_steps()[0] == 1 and len(log.train_steps()) == 32
    by = {v.check: v for v in diagnose(log)}
    assert by["reward_mean not stuck at 0/1"].evidence.startswith("steps 1-6:")
    assert "eval_ood_pass1 latest 80.0% at step 32; best so far step 16 (83.0%)" in by["OOD probe early stopping"].evidence
    assert log.series("eval_ood_pass1")[0] == (0, 0.10)


def test_a_plateau_after_learning_is_not_flat_learning():
    """Flat over the window: WARN when the run never learned, nothing when it learned before the window."""
    def verdict(rewards):
        log = MetricsLog()
        for s, r in enumerate(rewards, start=1):
            log.add({"global_step": s, "reward": r}, "x")
        return {v.check: v for v in diagnose(log)}.get("flat learning")

    wobble = [0.02 * ((i * 7) % 5 - 2) for i in range(20)]  # +-0.04, no trend
    assert verdict([0.40 + w for w in wobble[:12]] + [0.40 + w for w in wobble]).status == WARN
    assert verdict([0.10, 0.12, 0.15, 0.20, 0.25, 0.30, 0.35, 0.38, 0.40, 0.41, 0.42, 0.42]
                   + [0.42 + w for w in wobble]) is None


def test_repaired_rollout_logprobs_cannot_pass_the_agreement_check():
    """An engine returning non-finite log-probs everywhere: every token repaired, vllm_kl 0 (the trainer compared
    with itself). The share of repaired tokens decides: <= 1% passes, above warns, above half fails."""
    def verdict(share: float, **extra):
        log = MetricsLog()
        for s in range(1, 7):
            log.add({"global_step": s, "response_length": 200.0, "rollout_logprob_repaired": 200.0 * share,
                     **extra}, "x")
        return {v.check: v for v in diagnose(log)}["rollout/trainer agreement"]

    everywhere = verdict(1.0, vllm_kl=0.0)
    assert everywhere.status == FAIL and "100.0% of response tokens" in everywhere.evidence
    assert "attention sinks" not in everywhere.evidence  # the cause named is the engine, not sinks or sync
    assert verdict(0.6, vllm_kl=0.0).status == FAIL
    assert verdict(0.05, vllm_kl=0.0).status == WARN
    ok = verdict(0.005, vllm_kl=1e-4)
    assert ok.status == PASS and "rollout_logprob_repaired at most 0.5%" in ok.evidence
    assert verdict(0.0).status == MISSING  # no vllm_kl, no reference: nothing measured the gap


def _log(evals: dict[int, float] | None = None, probe: str = "eval_ood_pass1", **series: list) -> MetricsLog:
    """One training record per step 1..n from `series` (None = non-finite; a shorter series stops early), and
    an eval record of `probe` at each step of `evals` (step 0 before step 1)."""
    log = MetricsLog()
    evals = evals or {}
    if 0 in evals:
        log.add({"global_step": 0, "event": "eval", probe: evals[0]}, "x")
    for i in range(max((len(v) for v in series.values()), default=0)):
        log.add({"global_step": i + 1, **{k: v[i] for k, v in series.items() if i < len(v)}}, "x")
        if i + 1 in evals:
            log.add({"global_step": i + 1, "event": "eval", probe: evals[i + 1]}, "x")
    return log


AGREE = "Stop and verify trainer vs vLLM log-probs after a sync before burning compute."
NOT_MOVING = "Learning rate too low for LoRA: raise it (5e-7 -> 1e-6 -> 2e-6); check LR warmup reached target."
STOP_ACTION = "Stop training; evaluate the best checkpoint post hoc (AIME + ID probe) on the spare."
EARLY_REWARD, EARLY_BOXED, EARLY_GRAD = "reward_mean not stuck at 0/1", "has_boxed > 50% and not falling", \
    "grad_norm non-zero, < 100"
EARLY_ADV, EARLY_TRUNC, EARLY_CLIP = "advantage_std not stuck at 0", "truncated < 50%", "ppo_clip_ratio < 40%"
AGREEMENT, MOVING, EARLY = "rollout/trainer agreement", "policy moving from reference", "OOD probe early stopping"

# (check, log, thresholds, status, evidence, action): the whole verdict a user reads, at and around each threshold.
VERDICT_TEXT = {
    "reward all 0": (EARLY_REWARD, lambda: _log(reward=[0.0] * 6), {}, FAIL,
                     "steps 1-6: 0, 0, 0, 0, 0, 0 (stuck at 0)", EARLY_ACTIONS["reward0"]),
    "reward at the zero tolerance": (EARLY_REWARD, lambda: _log(reward=[1e-6] * 6), {}, FAIL,
                                     "steps 1-6: " + ", ".join(["1.00e-06"] * 6) + " (stuck at 0)",
                                     EARLY_ACTIONS["reward0"]),
    "reward above the zero tolerance": (EARLY_REWARD, lambda: _log(reward=[0.0] * 5 + [2e-6]), {}, PASS,
                                        "steps 1-6: 0, 0, 0, 0, 0, 2.00e-06", ""),
    "reward at the one tolerance": (EARLY_REWARD, lambda: _log(reward=[1 - 1e-6] * 6), {}, FAIL,
                                    "steps 1-6: 1, 1, 1, 1, 1, 1 (stuck at 1)", EARLY_ACTIONS["reward1"]),
    "reward below the one tolerance": (EARLY_REWARD, lambda: _log(reward=[1.0] * 5 + [0.999]), {}, PASS,
                                       "steps 1-6: 1, 1, 1, 1, 1, 0.999", ""),
    "reward judged on the first 6 steps": (EARLY_REWARD, lambda: _log(reward=[0.2, 0.3, 0.25, 0.4, 0.35, 0.5, 0.0, 0.0]),
                                           {}, PASS, "steps 1-6: 0.2, 0.3, 0.25, 0.4, 0.35, 0.5", ""),
    "reward with a non-finite step": (EARLY_REWARD, lambda: _log(reward=[0.2, None, 0.3, 0.3, 0.3, 0.3]), {}, PASS,
                                      "steps 1-6: 0.2, 0.3, 0.3, 0.3, 0.3", ""),
    "reward missing": (EARLY_REWARD, lambda: _log(grad_norm=[1.0] * 6), {}, MISSING,
                       "reward_mean/reward not in the log", ""),
    "boxed at 50%": (EARLY_BOXED, lambda: _log(has_boxed=[0.5] * 6), {}, FAIL, "mean 50%, 0.5 -> 0.5",
                     EARLY_ACTIONS["boxed"]),
    "boxed above 50%": (EARLY_BOXED, lambda: _log(has_boxed=[0.55] * 6), {}, PASS, "mean 55%, 0.55 -> 0.55", ""),
    "boxed falling": (EARLY_BOXED, lambda: _log(has_boxed=[0.95, 0.9, 0.85, 0.8, 0.72, 0.66]), {}, WARN,
                      "mean 81%, 0.95 -> 0.66 (falling)", EARLY_ACTIONS["boxed"]),
    "boxed falling from step 1 only": (EARLY_BOXED, lambda: _log(has_boxed=[0.95, 0.84, 0.82, 0.8, 0.78, 0.76]), {},
                                       WARN, "mean 82%, 0.95 -> 0.76 (falling)", EARLY_ACTIONS["boxed"]),
    "boxed falling at the last step only": (EARLY_BOXED, lambda: _log(has_boxed=[0.9, 0.88, 0.86, 0.84, 0.82, 0.76]),
                                            {}, WARN, "mean 84%, 0.9 -> 0.76 (falling)", EARLY_ACTIONS["boxed"]),
    "boxed falling by less than 10 points": (EARLY_BOXED, lambda: _log(has_boxed=[0.9, 0.89, 0.88, 0.87, 0.86, 0.85]),
                                             {}, PASS, "mean 88%, 0.9 -> 0.85", ""),
    "boxed down 15 points within noise": (EARLY_BOXED, lambda: _log(has_boxed=[0.95, 0.7, 0.95, 0.7, 0.95, 0.8]), {},
                                          PASS, "mean 84%, 0.95 -> 0.8", ""),
    "boxed missing": (EARLY_BOXED, lambda: _log(reward=[0.5] * 6), {}, MISSING, "has_boxed not in the log", ""),
    "grad zero": (EARLY_GRAD, lambda: _log(grad_norm=[0.0] * 6), {}, FAIL, "steps 1-6: 0, 0, 0, 0, 0, 0 (zero)",
                  EARLY_ACTIONS["grad0"]),
    "grad zero but the last": (EARLY_GRAD, lambda: _log(grad_norm=[0.0] * 5 + [0.3]), {}, PASS,
                               "steps 1-6: 0, 0, 0, 0, 0, 0.3", ""),
    "grad median above 100": (EARLY_GRAD, lambda: _log(grad_norm=[100.5] * 6), {}, FAIL,
                              "steps 1-6: " + ", ".join(["100"] * 6), EARLY_ACTIONS["lr_high"]),
    "grad at 100": (EARLY_GRAD, lambda: _log(grad_norm=[100.0] * 6), {}, PASS, "steps 1-6: " + ", ".join(["100"] * 6),
                    ""),
    "grad one step above 100": (EARLY_GRAD, lambda: _log(grad_norm=[1.0, 1.0, 100.5, 1.0]), {}, WARN,
                                "steps 1-4: 1, 1, 100, 1 (one step > 100)", "LR too high?"),
    "grad one step at 150": (EARLY_GRAD, lambda: _log(grad_norm=[1.0, 1.0, 150.0, 1.0]), {}, WARN,
                             "steps 1-4: 1, 1, 150, 1 (one step > 100)", "LR too high?"),
    "grad non-finite": (EARLY_GRAD, lambda: _log(grad_norm=[1.0, None, 1.0]), {}, FAIL,
                        "steps 1-3: 1, nan, 1 (non-finite)", "LR too high / diverged."),
    "grad non-finite at the last early step": (EARLY_GRAD, lambda: _log(grad_norm=[1.0] * 5 + [None, 1.0]), {}, FAIL,
                                               "steps 1-6: 1, 1, 1, 1, 1, nan (non-finite)", "LR too high / diverged."),
    "grad all non-finite": (EARLY_GRAD, lambda: _log(grad_norm=[None] * 3), {}, FAIL,
                            "steps 1-3: nan, nan, nan (non-finite)", "LR too high / diverged."),
    "grad judged on the first 6 steps": (EARLY_GRAD, lambda: _log(grad_norm=[0.5, 0.7, 0.6, 0.5, 0.5, 0.5, 200.0]),
                                         {}, PASS, "steps 1-6: 0.5, 0.7, 0.6, 0.5, 0.5, 0.5", ""),
    "grad missing": (EARLY_GRAD, lambda: _log(reward=[0.5] * 6), {}, MISSING, "grad_norm not in the log", ""),
    "advantage step 1 only": (EARLY_ADV, lambda: _log(group_reward_std=[0.0]), {}, INFO,
                              "group_reward_std: 0 (only step 1 so far)", ""),
    "advantage zero at step 2": (EARLY_ADV, lambda: _log(group_reward_std=[0.0, 0.0]), {}, FAIL,
                                 "group_reward_std: 0, 0", EARLY_ACTIONS["adv0"]),
    "advantage non-zero at step 2": (EARLY_ADV, lambda: _log(group_reward_std=[0.0, 0.3]), {}, PASS,
                                     "group_reward_std: 0, 0.3", ""),
    "advantage non-zero at step 2 only": (EARLY_ADV, lambda: _log(advantage_std=[0.0, 0.3, 0.0, 0.0, 0.0, 0.0]), {},
                                          PASS, "advantage_std: 0, 0.3, 0, 0, 0, 0", ""),
    "advantage at the zero tolerance": (EARLY_ADV, lambda: _log(advantage_std=[0.0, 1e-8, 0.0]), {}, PASS,
                                        "advantage_std: 0, 1.00e-08, 0", ""),
    "advantage below the zero tolerance": (EARLY_ADV, lambda: _log(advantage_std=[0.5, 9e-9, 0.0]), {}, FAIL,
                                           "advantage_std: 0.5, 9.00e-09, 0", EARLY_ACTIONS["adv0"]),
    "advantage missing": (EARLY_ADV, lambda: _log(reward=[0.5] * 6), {}, MISSING,
                          "advantage_std/group_reward_std not in the log", ""),
    "truncated at 50%": (EARLY_TRUNC, lambda: _log(truncated=[0.5] * 6), {}, PASS, "truncated mean 50%", ""),
    "truncated above 50%": (EARLY_TRUNC, lambda: _log(truncated_response=[0.6] * 6), {}, FAIL,
                            "truncated_response mean 60%", EARLY_ACTIONS["trunc"]),
    "truncated missing": (EARLY_TRUNC, lambda: _log(reward=[0.5] * 6), {}, MISSING, "truncated not in the log", ""),
    "clip at 40%": (EARLY_CLIP, lambda: _log(ppo_clip_ratio=[0.4]), {}, PASS, "mean 40.0%", ""),
    "clip above 40%": (EARLY_CLIP, lambda: _log(ppo_clip_ratio=[0.41] * 6), {}, FAIL, "mean 41.0%",
                       EARLY_ACTIONS["lr_high"]),
    "clip zero": (EARLY_CLIP, lambda: _log(ppo_clip_ratio=[0.0] * 6), {}, PASS,
                  "mean 0.0% (~0 is expected with one optimizer step per rollout batch)", ""),
    "clip at the zero note's limit": (EARLY_CLIP, lambda: _log(ppo_clip_ratio=[1e-3]), {}, PASS, "mean 0.1%", ""),
    "clip 20%": (EARLY_CLIP, lambda: _log(ppo_clip_ratio=[0.2] * 6), {}, PASS, "mean 20.0%", ""),
    "clip missing": (EARLY_CLIP, lambda: _log(reward=[0.5] * 6), {}, MISSING, "ppo_clip_ratio not in the log", ""),
    # rollout/trainer agreement
    "vllm_kl gap from step 1": (AGREEMENT, lambda: _log(vllm_kl=[0.1] * 3), {}, FAIL,
                                f"rollout/trainer log-prob gap vllm_kl=0.1 from step 1 => {SINK_OR_SYNC}", AGREE),
    "vllm_kl at the fail limit": (AGREEMENT, lambda: _log(vllm_kl=[0.05] * 3), {}, WARN,
                                  f"vllm_kl=0.05 early, 0.05 at step 3 => {SINK_OR_SYNC}", AGREE),
    "vllm_kl above the warn limit": (AGREEMENT, lambda: _log(vllm_kl=[0.02] * 3), {}, WARN,
                                     f"vllm_kl=0.02 early, 0.02 at step 3 => {SINK_OR_SYNC}", AGREE),
    "vllm_kl at the warn limit": (AGREEMENT, lambda: _log(vllm_kl=[0.01] * 3), {}, PASS,
                                  "vllm_kl first steps 0.01, 0.01, 0.01", ""),
    "vllm_kl first three steps": (AGREEMENT, lambda: _log(vllm_kl=[1e-4, 2e-4, 3e-4, 4e-4]), {}, PASS,
                                  "vllm_kl first steps 1.00e-04, 2.00e-04, 3.00e-04", ""),
    "vllm_kl drifting over 6 steps": (AGREEMENT, lambda: _log(vllm_kl=[3e-4] * 3 + [0.01, 0.06, 0.07]), {}, FAIL,
                                      f"sync drift: vllm_kl 3.00e-04 early, 0.06 over the last 3 steps (to step 6) "
                                      f"=> {SINK_OR_SYNC}", AGREE),
    "vllm_kl drifting over 7 steps": (AGREEMENT, lambda: _log(vllm_kl=[3e-4] * 4 + [0.01, 0.06, 0.07]), {}, FAIL,
                                      f"sync drift: vllm_kl 3.00e-04 early, 0.06 over the last 3 steps (to step 7) "
                                      f"=> {SINK_OR_SYNC}", AGREE),
    "vllm_kl drifting to the fail limit": (AGREEMENT, lambda: _log(vllm_kl=[3e-4] * 3 + [0.05] * 3), {}, PASS,
                                           "vllm_kl first steps 3.00e-04, 3.00e-04, 3.00e-04", ""),
    "vllm_kl late jump in 5 steps": (AGREEMENT, lambda: _log(vllm_kl=[2e-3] * 4 + [0.07]), {}, WARN,
                                     f"vllm_kl=0.002 early, 0.07 at step 5 => {SINK_OR_SYNC}", AGREE),
    "vllm_kl last step at the fail limit": (AGREEMENT, lambda: _log(vllm_kl=[2e-3] * 4 + [0.05]), {}, PASS,
                                            "vllm_kl first steps 0.002, 0.002, 0.002", ""),
    "kl negative": (AGREEMENT, lambda: _log(kl=[-1e-3] * 10), {}, FAIL,
                    f"kl negative at 100% of the last 10 steps (mean -0.001) => {SINK_OR_SYNC}", AGREE),
    "kl negative over the last 10 steps": (AGREEMENT, lambda: _log(kl=[0.5] + [-1e-3] * 10), {}, FAIL,
                                           f"kl negative at 100% of the last 10 steps (mean -0.001) => {SINK_OR_SYNC}",
                                           AGREE),
    "logprobs_diff preferred to kl": (AGREEMENT, lambda: _log(kl=[1e-3] * 4, logprobs_diff=[-1e-3] * 4), {}, FAIL,
                                      f"logprobs_diff negative at 100% of the last 4 steps (mean -0.001) => "
                                      f"{SINK_OR_SYNC}", AGREE),
    "kl positive": (AGREEMENT, lambda: _log(kl=[1e-3] * 4), {}, PASS, "kl (k1 KL to reference) last 4 mean 0.001", ""),
    "vllm_kl and kl": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3, kl=[2e-3] * 3), {}, PASS,
                       "vllm_kl first steps 1.00e-04, 1.00e-04, 1.00e-04; kl (k1 KL to reference) last 3 mean 0.002",
                       ""),
    "vllm_kl and a zero kl": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3, kl=[0.0] * 3), {}, PASS,
                              "vllm_kl first steps 1.00e-04, 1.00e-04, 1.00e-04", ""),
    "two agreement problems": (AGREEMENT, lambda: _log(vllm_kl=[0.1] * 3, kl=[-1e-3] * 3), {}, FAIL,
                               "rollout/trainer log-prob gap vllm_kl=0.1 from step 1; kl negative at 100% of the last "
                               f"3 steps (mean -0.001) => {SINK_OR_SYNC}", AGREE),
    "agreement not measured": (AGREEMENT, lambda: _log(reward=[0.5] * 3), {}, MISSING,
                               "no mismatch_* or vllm_kl (needs vLLM rollouts) and no nonzero logprobs_diff/kl "
                               "(needs a reference model)", ""),
    "mismatch kl over prime-rl's bar": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3, mismatch_kl=[0.02] * 3,
                                                                mismatch_abs_max=[0.5, 3.0, 1.0]), {}, FAIL,
                                        "mismatch KL (k3): mismatch_kl mean 0.02 over steps 1-3 > 0.015 => "
                                        f"{SINK_OR_SYNC}", AGREE),
    # a lagged run (--async_train): a fast-moving stretch lifts the mean over prime-rl's bar (the CI async run:
    # mean 0.0158, median 0.0018); the median judges it, as vllm_kl is judged in a lagged run
    "lagged mismatch kl by its median": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 5, rollout_lag=[1] * 5,
                                                                 mismatch_kl=[0.2, 0.1, 1e-3, 1e-3, 1e-3]), {}, PASS,
                                         "vllm_kl first steps 1.00e-04, 1.00e-04, 1.00e-04 (rollouts 1 step(s) behind "
                                         "the policy); mismatch_kl median 0.001 over steps 1-5", ""),
    "lagged run whose sync never lands": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 5, rollout_lag=[1] * 5,
                                                                  mismatch_kl=[1e-3, 0.02, 0.05, 0.1, 0.2]), {}, FAIL,
                                          "mismatch KL (k3): mismatch_kl median 0.05 over steps 1-5 > 0.015 => "
                                          f"{SINK_OR_SYNC}", AGREE),
    "sync run's stretch counts in the mean": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 5,
                                                                      mismatch_kl=[0.2, 0.1, 1e-3, 1e-3, 1e-3]), {},
                                              FAIL, "mismatch KL (k3): mismatch_kl mean 0.0606 over steps 1-5 > "
                                              f"0.015 => {SINK_OR_SYNC}", AGREE),
    "mismatch clipped warns": (AGREEMENT, lambda: _log(mismatch_kl=[1e-3] * 3, mismatch_is_clipped=[0.02] * 3), {},
                               WARN, "tokens whose IS weight was truncated: mismatch_is_clipped mean 0.02 over "
                               f"steps 1-3 > 0.01 => {SINK_OR_SYNC}", AGREE),
    "mismatch small passes": (AGREEMENT, lambda: _log(mismatch_kl=[1e-3] * 3, mismatch_out_of_band=[0.01] * 3,
                                                      mismatch_abs_max=[0.5, 3.0, 1.0]), {}, PASS,
                              "mismatch_kl mean 0.001 over steps 1-3; mismatch_out_of_band mean 0.01 over steps 1-3; "
                              "largest |log-ratio| 3 at step 2", ""),
    "repaired per sample without lengths": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3,
                                                                    rollout_logprob_repaired=[0.0, 2.5, 1.0]), {},
                                            WARN, "rollout_logprob_repaired 2.5 tokens per sample at step 2 "
                                            "(vLLM returned non-finite log-probs)", AGREE),
    "repaired half a token per sample": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3,
                                                                 rollout_logprob_repaired=[0.0, 0.5, 0.0]), {}, WARN,
                                         "rollout_logprob_repaired 0.5 tokens per sample at step 2 "
                                         "(vLLM returned non-finite log-probs)", AGREE),
    "repaired zero without lengths": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3, rollout_logprob_repaired=[0.0] * 3),
                                      {}, PASS, "vllm_kl first steps 1.00e-04, 1.00e-04, 1.00e-04; "
                                      "rollout_logprob_repaired 0", ""),
    "repaired share at half": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3, response_length=[100.0, 200.0, 100.0],
                                                       rollout_logprob_repaired=[1.0, 100.0, 2.0]), {}, WARN,
                               "rollout log-probs repaired: 50.0% of response tokens at step 2 (vLLM returned "
                               "non-finite log-probs; those tokens are left out of vllm_kl)", AGREE),
    "repaired share above half": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3, response_length=[100.0, 200.0, 100.0],
                                                          rollout_logprob_repaired=[1.0, 102.0, 2.0]), {}, FAIL,
                                  "rollout log-probs repaired: 51.0% of response tokens at step 2: vLLM returned "
                                  "non-finite log-probs for most tokens, so vllm_kl compares the trainer with itself; "
                                  "check the engine (MXFP4 kernels, dtype, the synced weights for NaN)", AGREE),
    "repaired share at 1%": (AGREEMENT, lambda: _log(vllm_kl=[1e-4] * 3, response_length=[100.0, 200.0, 100.0],
                                                     rollout_logprob_repaired=[0.5, 2.0, 0.0]), {}, PASS,
                             "vllm_kl first steps 1.00e-04, 1.00e-04, 1.00e-04; rollout_logprob_repaired at most "
                             "1.0% of response tokens at step 2", ""),
    # policy movement
    "kl zero: no reference": (MOVING, lambda: _log(kl=[0.0] * 12), {}, MISSING,
                              "kl is 0 at every step: no reference model (init_kl_coef 0)", ""),
    "logprobs_diff zero: no reference": (MOVING, lambda: _log(logprobs_diff=[0.0] * 12), {}, MISSING,
                                         "kl is 0 at every step: no reference model (init_kl_coef 0)", ""),
    "no kl": (MOVING, lambda: _log(reward=[0.5] * 12), {}, MISSING, "kl/logprobs_diff not in the log", ""),
    "kl before 10 steps": (MOVING, lambda: _log(kl=[1e-3 * s for s in range(1, 9)] + [-9e-3]), {}, INFO,
                           "|kl| 0.009 at step 9 (judged after 10 steps)", ""),
    "logprobs_diff before 10 steps": (MOVING, lambda: _log(logprobs_diff=[2e-3] * 9), {}, INFO,
                                      "|logprobs_diff| 0.002 at step 9 (judged after 10 steps)", ""),
    "kl barely moving at 10 steps": (MOVING, lambda: _log(kl=[1e-4] * 10), {}, WARN,
                                     "median |kl| over steps 1-10: 1.00e-04 after 10 steps: barely moving "
                                     "(not 'stable')", NOT_MOVING),
    "kl barely moving over the last 10 steps": (MOVING, lambda: _log(kl=[1.0, 1.0] + [-1e-4] * 10), {}, WARN,
                                                "median |kl| over steps 3-12: 1.00e-04 after 12 steps: barely moving "
                                                "(not 'stable')", NOT_MOVING),
    "kl at the moving limit": (MOVING, lambda: _log(kl=[5e-4] * 10), {}, PASS, "median |kl| over steps 1-10: 5.00e-04",
                               ""),
    "logprobs_diff moving": (MOVING, lambda: _log(logprobs_diff=[2e-3] * 11), {}, PASS,
                             "median |logprobs_diff| over steps 2-11: 0.002", ""),
    # early stop on the probe
    "no probe": (EARLY, lambda: _log(reward=[0.5] * 6), {}, MISSING, "no eval results (eval_*_pass1) in the log", ""),
    "named probe absent": (EARLY, lambda: _log(evals={2: 0.4}, reward=[0.5] * 6), {"probe_key": "eval_x_pass1"},
                           MISSING, "no eval results (eval_x_pass1) in the log", ""),
    "two evals": (EARLY, lambda: _log(evals={2: 0.4, 4: 0.4}, reward=[0.5] * 6), {}, INFO,
                  "eval_ood_pass1: 2 eval(s) so far; needs 3", ""),
    "three evals": (EARLY, lambda: _log(evals={5: 0.42, 10: 0.45, 15: 0.40}, reward=[0.5] * 15), {}, PASS,
                    "eval_ood_pass1 latest 40.0% at step 15; best so far step 10 (45.0%) -> global_step10; "
                    "no two consecutive drops > 6.9pp (z=2.0, n=202)", ""),
    "three evals, z=3": (EARLY, lambda: _log(evals={5: 0.42, 10: 0.45, 15: 0.40}, reward=[0.5] * 15),
                         {"stop_z": 3.0}, PASS, "eval_ood_pass1 latest 40.0% at step 15; best so far step 10 (45.0%) "
                         "-> global_step10; no two consecutive drops > 10.3pp (z=3.0, n=202)", ""),
    "two drops of 6 points": (EARLY, lambda: _log(evals={5: 0.5, 10: 0.44, 15: 0.38}, reward=[0.5] * 15),
                              {"probe_size": 800}, STOP, "eval_ood_pass1 fell twice in a row beyond noise: "
                              "step 5 50.0% -> step 10 44.0% (-6.0pp > 3.5pp); step 10 44.0% -> step 15 38.0% "
                              "(-6.0pp > 3.5pp); best so far step 5 (50.0%) -> global_step5", STOP_ACTION),
    "two drops of 6 points, z=4": (EARLY, lambda: _log(evals={5: 0.5, 10: 0.44, 15: 0.38}, reward=[0.5] * 15),
                                   {"probe_size": 800, "stop_z": 4.0}, PASS,
                                   "eval_ood_pass1 latest 38.0% at step 15; best so far step 5 (50.0%) -> global_step5; "
                                   "no two consecutive drops > 6.9pp (z=4.0, n=800)", ""),
}


def _wobble(n: int, a: float) -> list[float]:
    """+-a at both ends of n steps, 0 between: symmetric, so it changes a fitted trend's error but not its slope."""
    return [a, -a] + [0.0] * (n - 4) + [-a, a]


def _line(n: int, start: float, slope: float, wobble: float = 0.0) -> list[float]:
    """start + slope*i over n steps plus `_wobble`."""
    return [start + slope * i + e for i, e in enumerate(_wobble(n, wobble))]


PLAYBOOK_NOT_CHECKED = ("flat learning (reward_mean: 6 of 10 steps); reward hacking (no eval results); loss/grad spikes "
                        "(grad_norm); length collapse (response_length); high truncation (truncated); entropy collapse "
                        "(entropy); uniform groups (uniform_group_share); has_boxed steady state (has_boxed); extreme "
                        "log-prob ratios (ratio_max, logratio_raw_max); negative ppo_kl (ppo_kl)")
SPIKE_LOG = [Spike(4, 70.0, {"ratio_max": 2.4e4, "logratio_raw_max": 9.5, "logratio_max": 9.5, "logratio_abs_p99": 3.1,
                             "log_ratio_q": 7.0, "grad_norm": 70.0}, ["a" * 32, "b" * 32]),
             Spike(99, None, {"grad_norm": 80.0}, [])]
HACKING = {"probe_size": 100}

PLAYBOOK_TEXT = {
    "playbook before 6 steps": ("playbook diagnosis", lambda: _log(reward=[0.5] * 5), {}, INFO,
                                "5 step(s) logged; needs 6", ""),
    "playbook at 6 steps": ("playbook diagnosis", lambda: _log(reward=[0.5] * 6), {}, PASS,
                            "no playbook pattern over steps 1-6", ""),
    "playbook metrics missing": ("not checked", lambda: _log(reward=[0.5] * 6), {}, MISSING, PLAYBOOK_NOT_CHECKED, ""),
    "playbook without a reward": ("not checked", lambda: _log(grad_norm=[1.0] * 6), {}, MISSING,
                                  PLAYBOOK_NOT_CHECKED.replace("6 of 10", "0 of 10").replace(
                                      " loss/grad spikes (grad_norm);", "") + "; reward drops to zero (reward_mean)", ""),
    "playbook with 5 entropy and length steps": ("not checked", lambda: _log(reward=[0.5] * 6, entropy_loss=[1.0] * 5,
                                                                             response_length=[500.0] * 5), {}, MISSING,
                                                 PLAYBOOK_NOT_CHECKED.replace(" length collapse (response_length);", "")
                                                 .replace(" entropy collapse (entropy);", ""), ""),
    "non-finite": ("non-finite values", lambda: _log(policy_loss=[0.1, None, 0.1, 0.1, 0.1, 0.1],
                                                     grad_norm=[1.0, 1.0, None, 1.0, 1.0, 1.0],
                                                     reward=[0.5, 0.5, 0.5, None, 0.5, 0.5]), {}, FAIL,
                   "policy_loss@2, grad_norm@3, reward_mean@4", PLAYBOOK["non-finite values"]),
    "non-finite, first 8 shown": ("non-finite values", lambda: _log(policy_loss=[None] * 9), {}, FAIL,
                                  ", ".join(f"policy_loss@{s}" for s in range(1, 9)), PLAYBOOK["non-finite values"]),
    "flat over 10 steps": ("flat learning", lambda: _log(reward=_line(10, 0.375, 0.0, 1 / 64), kl=[2e-3] * 10,
                                                         entropy_loss=[1.4] + [1.3] * 8 + [1.1]), {}, WARN,
                           "reward_mean 0.391 -> 0.391 over steps 1-10 (slope 0/step +- 0.00122); |kl| median 0.002; "
                           "entropy 1.4 -> 1.1", PLAYBOOK["flat learning"]),
    "instability with a kl spike": ("instability", lambda: _log(reward=_line(6, 0.6, -0.02), kl=[1e-4] * 5 + [2e-3]), {},
                                    WARN, "reward_mean slope -0.02/step over steps 1-6; kl max 0.002 vs median 1.00e-04",
                                    PLAYBOOK["instability"]),
    "instability with an entropy drop": ("instability", lambda: _log(correctness=_line(7, 0.6, -0.02),
                                                                     reward=_line(7, 0.1, 0.05),
                                                                     entropy_loss=[1.0, 1.0, 1.0, 0.9, 0.5, 0.5, 0.5]),
                                         {}, WARN, "correctness slope -0.02/step over steps 1-7; entropy 1 -> 0.5",
                                         PLAYBOOK["instability"]),
    "reward hacking": ("reward hacking", lambda: _log(reward=_line(20, 0.3 - 0.05, 0.01, 0.05),
                                                      evals={5: 0.5, 10: 0.5625, 15: 0.5625, 20: 0.5}), HACKING, WARN,
                       "reward_mean up 0.3 -> 0.49 (slope 0.01/step, t=10.9) while eval_ood_pass1 fitted change over "
                       "steps 5-20 is +0.0pp (binomial SE 6.7pp; 4 evals 50.0% ... 50.0%)", PLAYBOOK["reward hacking"]),
    "reward hacking, probe near 0": ("reward hacking", lambda: _log(reward=_line(20, 0.3 - 0.05, 0.01, 0.05),
                                                                    evals={5: 0.0, 10: 1 / 64, 15: 1 / 64, 20: 0.0}),
                                     HACKING, WARN, "reward_mean up 0.3 -> 0.49 (slope 0.01/step, t=10.9) while "
                                     "eval_ood_pass1 fitted change over steps 5-20 is +0.0pp (binomial SE 1.3pp; 4 evals "
                                     "0.0% ... 0.0%)", PLAYBOOK["reward hacking"]),
    "reward hacking, probe up within noise": ("reward hacking", lambda: _log(
        reward=_line(20, 0.3 - 0.05, 0.01, 0.05), evals={5: 0.5, 10: 0.5, 15: 0.5625, 20: 0.5625}), {"probe_size": 16},
        WARN, "reward_mean up 0.3 -> 0.49 (slope 0.01/step, t=10.9) while eval_ood_pass1 fitted change over steps 5-20 "
        "is +7.5pp (binomial SE 16.7pp; 4 evals 50.0% ... 56.2%)", PLAYBOOK["reward hacking"]),
    "grad spike": ("loss/grad spikes", lambda: _log(grad_norm=[1.0] * 5 + [60.0], policy_loss=[0.05] * 6), {}, WARN,
                   "step 6: grad_norm 60, policy_loss 0.05", PLAYBOOK["loss/grad spikes"]),
    "grad spike, no loss that step": ("loss/grad spikes", lambda: _log(grad_norm=[1.0] * 5 + [60.0],
                                                                       policy_loss=[0.05] * 5), {}, WARN,
                                      "step 6: grad_norm 60", PLAYBOOK["loss/grad spikes"]),
    "loss outlier among 5": ("loss/grad spikes", lambda: _log(policy_loss=[0.04, 0.05, 0.06, 0.05, 1.0],
                                                              reward=[0.5] * 6), {}, WARN, "step 5: policy_loss 1",
                             PLAYBOOK["loss/grad spikes"]),
    "loss outlier, 4.5 MADs from 0.02": ("loss/grad spikes", lambda: _log(policy_loss=[0.01, 0.02, 0.03, 0.02, -0.07],
                                                                          reward=[0.5] * 6), {}, WARN,
                                         "step 5: policy_loss -0.07", PLAYBOOK["loss/grad spikes"]),
    "loss outlier, 6.4 robust SDs": ("loss/grad spikes", lambda: _log(policy_loss=[-0.01, 0.0, 0.01, 0.0, 0.095],
                                                                      reward=[0.5] * 6), {}, WARN,
                                     "step 5: policy_loss 0.095", PLAYBOOK["loss/grad spikes"]),
    "grad and loss spikes": ("loss/grad spikes", lambda: _log(grad_norm=[1.0, 1.0, 1.0, 1.0, 60.0],
                                                              policy_loss=[0.01, 0.02, 0.03, 0.02, 0.02, -0.07]), {},
                             WARN, "step 5: grad_norm 60, policy_loss 0.02; step 6: policy_loss -0.07",
                             PLAYBOOK["loss/grad spikes"]),
    "grad spike and the spike log": ("loss/grad spikes", lambda: _log(grad_norm=[1.0, 60.0, 1.0, 1.0, 1.0, 1.0]),
                                     {"spikes": SPIKE_LOG}, WARN,
                                     "step 2: grad_norm 60; step 4: grad_norm 1, spike log: log_ratio_q 7, logratio_abs_p99 3.1, "
                                     "logratio_max 9.5, logratio_raw_max 9.5; 2 prompt hash(es); "
                                     "step 99: spike log: no ratio stats; 0 prompt hash(es)",
                                     PLAYBOOK["loss/grad spikes"]),
    "five spikes": ("loss/grad spikes", lambda: _log(grad_norm=[60.0] * 5 + [1.0]), {}, WARN,
                    "; ".join(f"step {s}: grad_norm 60" for s in range(1, 6)), PLAYBOOK["loss/grad spikes"]),
    "six spikes": ("loss/grad spikes", lambda: _log(grad_norm=[60.0] * 6), {}, WARN,
                   "; ".join(f"step {s}: grad_norm 60" for s in range(1, 6)) + "; ... 1 more",
                   PLAYBOOK["loss/grad spikes"]),
    "seven spikes": ("loss/grad spikes", lambda: _log(grad_norm=[60.0] * 7 + [1.0]), {}, WARN,
                     "; ".join(f"step {s}: grad_norm 60" for s in range(1, 6)) + "; ... 2 more",
                     PLAYBOOK["loss/grad spikes"]),
    "escalating spikes": ("loss/grad spikes", lambda: _log(grad_norm=[60.0, 70.0, 80.0, 90.0, 1.0, 1.0]), {}, WARN,
                          "step 1: grad_norm 60; step 2: grad_norm 70; step 3: grad_norm 80; step 4: grad_norm 90; "
                          "spike grad norms escalating (70, 80, 90): policy drifting into unstable regions",
                          PLAYBOOK["loss/grad spikes"]),
    "spikes level then up": ("loss/grad spikes", lambda: _log(grad_norm=[60.0, 60.0, 70.0, 1.0, 1.0, 1.0]), {}, WARN,
                             "step 1: grad_norm 60; step 2: grad_norm 60; step 3: grad_norm 70",
                             PLAYBOOK["loss/grad spikes"]),
    "spikes up then level": ("loss/grad spikes", lambda: _log(grad_norm=[60.0, 70.0, 70.0, 1.0, 1.0, 1.0]), {}, WARN,
                             "step 1: grad_norm 60; step 2: grad_norm 70; step 3: grad_norm 70",
                             PLAYBOOK["loss/grad spikes"]),
    "length collapse": ("length collapse", lambda: _log(response_length=[900.0] * 3 + [450.0] * 3,
                                                        entropy_loss=[1.4, 1.3, 1.2, 1.1, 1.0, 0.7]), {}, WARN,
                        "mean response_length 900 (peak, 3-step mean) -> 450 (last 3 steps); entropy 1.4 -> 0.7",
                        PLAYBOOK["length collapse"]),
    "length collapse from the latest peak": ("length collapse",
                                             lambda: _log(response_length=[100.0] * 4 + [1500.0, 150.0, 150.0, 0.0]), {},
                                             WARN, "mean response_length 600 (peak, 3-step mean) -> 100 (last 3 steps)",
                                             PLAYBOOK["length collapse"]),
    "high truncation": ("high truncation", lambda: _log(truncated=[0.1] * 6 + [0.75] * 5), {}, WARN,
                        "truncated 75% over the last 5 steps", PLAYBOOK["high truncation"]),
    "high truncation, 3 steps logged": ("high truncation", lambda: _log(reward=[0.5] * 6, truncated=[0.9] * 3), {},
                                        WARN, "truncated 90% over the last 3 steps", PLAYBOOK["high truncation"]),
    "entropy collapse": ("entropy collapse", lambda: _log(entropy_loss=[2.0, 2.0, 2.0, 0.4, 0.6, 0.6, 0.6],
                                                          entropy_p10=[0.5, 0.5, 0.5, 0.3, 0.1, 0.1, 0.1]), {}, WARN,
                         "entropy_loss 2 (first 3 steps) -> 0.6 (last 3 steps); entropy_p10 0.5 -> 0.1",
                         PLAYBOOK["entropy collapse"]),
    "entropy collapse over 6 steps": ("entropy collapse", lambda: _log(entropy_loss=[4.0] * 3 + [1.5] * 3,
                                                                       entropy_p10=[0.4] * 3 + [0.2] * 3), {}, WARN,
                                      "entropy_loss 4 (first 3 steps) -> 1.5 (last 3 steps); entropy_p10 0.4 -> 0.2",
                                      PLAYBOOK["entropy collapse"]),
    "uniform groups": ("uniform groups", lambda: _log(uniform_group_share=[0.9] * 6, groups_all_correct=[0.5] * 6,
                                                      groups_all_wrong=[0.3] * 6, uniform_group_token_share=[0.7] * 6),
                       {}, WARN, "uniform_group_share 90%, 90%, 90%, 90%, 90% at steps 2-6 (all right 50%, all wrong "
                       "30%, of the tokens 70% at step 6)", PLAYBOOK["uniform groups"]),
    "uniform groups, split not at the last step": ("uniform groups",
                                                   lambda: _log(uniform_group_share=[0.9] * 6, groups_all_correct=[0.5]),
                                                   {}, WARN, "uniform_group_share 90%, 90%, 90%, 90%, 90% at steps 2-6",
                                                   PLAYBOOK["uniform groups"]),
    "boxed below 90% after the early steps": ("has_boxed >= 90% in steady state",
                                              lambda: _log(has_boxed=[0.95] + [0.9] * 5 + [0.8] * 5), {}, WARN,
                                              "has_boxed 80% over steps 7-11 (< 90%); 95% at step 1",
                                              GUIDE_ACTIONS["boxed"]),
    "ratio_max over 10 at 5 steps": ("extreme log-prob ratios",
                                     lambda: _log(ratio_max=[1.0] * 14 + [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]), {}, WARN,
                                     "ratio_max > 10 at 5 of 20 steps (11@16, 12@17, 13@18, 14@19, 15@20) over steps "
                                     "1-20", GUIDE_ACTIONS["ratios"]),
    "ratio_max over 10 at 6 steps": ("extreme log-prob ratios",
                                     lambda: _log(ratio_max=[1.0] * 4 + [11.0, 12.0, 13.0, 14.0, 15.0, 16.0]), {}, WARN,
                                     "ratio_max > 10 at 6 of 10 steps (11@5, 12@6, 13@7, 14@8, 15@9, ... 1 more) over "
                                     "steps 1-10", GUIDE_ACTIONS["ratios"]),
    "ratio_max over 10 at 7 steps": ("extreme log-prob ratios",
                                     lambda: _log(ratio_max=[1.0] * 3 + [11.0] * 7), {}, WARN,
                                     "ratio_max > 10 at 7 of 10 steps (11@4, 11@5, 11@6, 11@7, 11@8, ... 2 more) over "
                                     "steps 1-10", GUIDE_ACTIONS["ratios"]),
    "both ratios over": ("extreme log-prob ratios", lambda: _log(ratio_max=[1.0] * 5 + [20.0],
                                                                 logratio_raw_max=[1.0] * 5 + [6.0]), {}, WARN,
                         "ratio_max > 10 at 1 of 6 steps (20@6); logratio_raw_max > 5 at 1 of 6 steps (6@6) over steps "
                         "1-6", GUIDE_ACTIONS["ratios"]),
    "raw log-ratio over 5 only": ("extreme log-prob ratios", lambda: _log(logratio_raw_max=[1.0] * 5 + [6.0]), {}, WARN,
                                  "logratio_raw_max > 5 at 1 of 6 steps (6@6) over steps 1-6", GUIDE_ACTIONS["ratios"]),
    "negative ppo_kl over the last 10 steps": ("ppo_kl not negative", lambda: _log(ppo_kl=[1.0, 1.0] + [-1e-3] * 10),
                                               {}, WARN, "ppo_kl negative at 100% of steps 3-12 (mean -0.001)",
                                               GUIDE_ACTIONS["ppo_kl"]),
    "reward to 0 until the latest step": ("reward not dropping to 0", lambda: _log(reward=[0.1] + [0.5] * 5 + [0.0] * 3),
                                          {}, FAIL, "reward 0 at steps 7-9 (to the latest step), after a mean of 0.5 "
                                          "over the 5 steps before", GUIDE_ACTIONS["reward0"]),
    "reward to 0 after 2 steps": ("reward not dropping to 0", lambda: _log(reward=[0.2, 0.4, 0.0, 0.0, 0.0, 0.3]), {},
                                  WARN, "reward 0 at steps 3-5, after a mean of 0.3 over the 2 steps before",
                                  GUIDE_ACTIONS["reward0"]),
    "reward at the zero tolerance mid-run": ("reward not dropping to 0",
                                             lambda: _log(reward_mean=[0.3, 0.3, 1e-6, 1e-6, 1e-6, 0.3]), {}, WARN,
                                             "reward_mean 0 at steps 3-5, after a mean of 0.3 over the 2 steps before",
                                             GUIDE_ACTIONS["reward0"]),
}
VERDICT_TEXT.update(PLAYBOOK_TEXT)

JUDGE_TEXT = {
    "judge at the warn limit": ("judge failure rate", lambda: _log(judge_fail_rate=[0.2] * 3,
                                                                   judge_cost_step_usd=[0.5, 0.25, 1.0]), {}, PASS,
                                "max 20% over the last 3 steps; cost $1.00 at step 3, $1.75 over 3 steps", ""),
    "judge at the stop limit": ("judge failure rate", lambda: _log(judge_fail_rate=[0.5] * 3), {}, WARN,
                                "judge_fail_rate above 20% at step 1 (50%), step 2 (50%), step 3 (50%)",
                                JUDGE_ACTIONS["fail"]),
    "judge above the stop limit": ("judge failure rate", lambda: _log(judge_fail_rate=[0.6] * 3), {}, FAIL,
                                   "judge_fail_rate 60%, 60%, 60% at the last 3 steps (> 50%)", JUDGE_ACTIONS["fail"]),
    "judge failing at 7 steps": ("judge failure rate", lambda: _log(judge_fail_rate=[0.3] * 7), {}, WARN,
                                 "judge_fail_rate above 20% at " + ", ".join(f"step {s} (30%)" for s in range(1, 7)),
                                 JUDGE_ACTIONS["fail"]),
    "wrong answers paid, rising": ("wrong answers paid above their group",
                                   lambda: _log(reward_high_but_wrong=_line(6, 0.0, 0.008),
                                                reward_mean_wrong=[0.1, 0.11, 0.12, 0.13, 0.15, 0.2]), {}, WARN,
                                   "reward_high_but_wrong 0 -> 0.04, last-5 mean 2.4%; mean reward of wrong answers "
                                   "0.1 -> 0.2 (rising)", JUDGE_ACTIONS["hacking"]),
    "wrong answers paid, high and flat": ("wrong answers paid above their group",
                                          lambda: _log(reward_high_but_wrong=[0.1] * 6), {}, WARN,
                                          "reward_high_but_wrong 0.1 -> 0.1, last-5 mean 10.0%", JUDGE_ACTIONS["hacking"]),
    "wrong answers paid, last 5 steps": ("wrong answers paid above their group",
                                         lambda: _log(reward_high_but_wrong=[0.5] + [0.01] * 4 + [0.04]), {}, PASS,
                                         "reward_high_but_wrong 0.5 -> 0.04, last-5 mean 1.6%", ""),
}
VERDICT_TEXT.update(JUDGE_TEXT)


W10 = {"window": 10}
FLAT10 = _line(10, 0.4, 0.0, 0.01)  # a flat window of 10 steps


# Inputs that sit exactly on a threshold in floating point (test_exact_threshold_inputs checks that they do).
T2 = [i * 2e-12 for i in range(10)]  # an exact line: slope 2e-12, residuals 0, so t = slope / 1e-12 (the SE floor) = 2
PROBE_AT_NOISE = 0.5385640646055102  # 0.4 + 2 SE of a 100-problem probe at p=0.4, times sqrt(2)
SLOPE_3_POINTS = 0.005999999999999999  # an exact line of 6 steps rising by 0.03
# 0, 0, 0, this at steps 4-16 (probe of 100): a fitted rise of exactly half the binomial SE at the floor p(1-p) = 1/100
PROBE_AT_HALF_SE = 0.007453559924999299
_HALF = [5, -5, 5, -5, 3, -3, 1, -1]
GAIN_AT_2SE = [0.5 + d / 32 for d in _HALF + _HALF[::-1]]  # variance 16/32**2, SE 1/32; 1/16 above 0.4375


def _t2(start: float, slope: float, q: tuple[int, ...]) -> list[float]:
    """An exact line through steps 1..n plus slope/2 * q, with q orthogonal to 1 and to the steps and |q|^2 =
    (n - 2) * sxx: residual variance (slope/2)^2 * |q|^2 / (n - 2) / sxx, so t = slope / (slope / 2) = 2 exactly."""
    mid = (len(q) + 1) / 2
    return [start + slope * (s - mid) + slope / 2 * r for s, r in zip(range(1, len(q) + 1), q, strict=True)]


Q6 = (5, -2, -3, -4, 0, 4)  # |q|^2 = 70 = 4 * 17.5
Q10 = (-13, -6, 5, 6, 8, 8, 6, 5, -6, -13)  # |q|^2 = 660 = 8 * 82.5


def test_exact_threshold_inputs():
    slope, se = trend(list(enumerate(T2, start=1)))
    assert slope / se == 2.0 and abs(slope * 9) < 0.05
    slope, se = trend(list(enumerate([-v for v in T2], start=1)))
    assert slope / se == -2.0
    assert PROBE_AT_NOISE - 0.4 == drop_threshold(0.4, 0.4, 100) * 2**0.5
    assert trend(list(enumerate(_line(6, 0.0, SLOPE_3_POINTS), start=1)))[0] * 5 == 0.03
    assert statistics.fmean([0.1125] * 10) - statistics.fmean([0.0625] * 3) == 0.05
    assert 0.3 - (0.3 - 0.1) == 0.1
    for values, t in ((_t2(0.046875, 2**-7, Q6), 2.0), (_t2(0.75, -(2**-5), Q6), -2.0), (_t2(0.5, 2**-6, Q10), 2.0)):
        slope, se = trend(list(enumerate(values, start=1)))
        assert slope / se == t
    assert statistics.fmean(GAIN_AT_2SE) - 0.4375 == 2 * (statistics.variance(GAIN_AT_2SE) / 16) ** 0.5 == 0.0625
    slope, se = trend(list(enumerate(_line(17, 0.3, 0.003125, 0.125), start=1)))
    assert slope * 16 == 0.05 and abs(slope / se) < 2
    assert trend(list(enumerate(_line(17, 0.0, 0.001875), start=1)))[0] * 16 == 0.03


def _learned(first: list[float], window: list[float]) -> MetricsLog:
    """A reward log: `first` before the window, then `window`."""
    return _log(reward=first + window)


# (check, log, thresholds, status or None when the rule does not fire): whether a rule fires at, just above and just
# below its thresholds, over the window it looks at.
RULE_FIRES = {
    "flat: a 5.2-point change within noise is learning": ("flat learning",
                                                          lambda: _log(reward=_line(20, 0.4, 0.052 / 19, 0.1)), {},
                                                          None),
    "flat: a 4-point change within noise": ("flat learning", lambda: _log(reward=_line(20, 0.4, 0.04 / 19, 0.1)), {},
                                            WARN),
    "flat after learning in 3 steps before the window": ("flat learning",
                                                         lambda: _learned([0.1, 0.12, 0.1], FLAT10), W10, None),
    "flat: a late step before the window is not among the first 5": ("flat learning", lambda: _learned(
        [0.1] * 5 + [0.9], FLAT10), W10, None),
    "flat: the window's first step is not before it": ("flat learning", lambda: _learned(
        [0.2] * 4, [0.4] + [0.3] * 8 + [0.4]), W10, None),
    "flat: a gain within the noise of a noisy window": ("flat learning", lambda: _learned(
        [0.1, 0.12, 0.08], _line(10, 0.17, 0.0, 0.17)), W10, WARN),
    "flat: a gain of 2.5 standard errors": ("flat learning", lambda: _learned(
        [0.1] * 3, _line(10, 0.2, 0.0, 0.19)), W10, None),
    "flat: the probe rose beyond noise in 2 evals": ("flat learning", lambda: _log(
        evals={2: 0.1, 10: 0.5}, reward=_line(12, 0.4, 0.0, 0.01)), {}, None),
    "flat: the probe rose from its first eval": ("flat learning", lambda: _log(
        evals={2: 0.1, 6: 0.5, 10: 0.55}, reward=_line(12, 0.4, 0.0, 0.01)), {}, None),
    "flat: the probe rose at its last eval": ("flat learning", lambda: _log(
        evals={2: 0.1, 6: 0.12, 10: 0.5}, reward=_line(12, 0.4, 0.0, 0.01)), {}, None),
    "flat: the probe up 8 points from 40%": ("flat learning", lambda: _log(
        evals={2: 0.4, 10: 0.48}, reward=_line(12, 0.4, 0.0, 0.01)), {}, WARN),
    "flat: the probe up 11 points from 40%": ("flat learning", lambda: _log(
        evals={2: 0.4, 10: 0.51}, reward=_line(12, 0.4, 0.0, 0.01)), {}, None),
    "instability: 5 kl steps": ("instability", lambda: _log(reward=_line(6, 0.6, -0.02), kl=[1e-4] * 4 + [2e-3]), {},
                                WARN),
    "instability: kl max at 5x its median": ("instability", lambda: _log(
        reward=_line(6, 0.6, -0.02), kl=[2**-10] * 5 + [5 * 2**-10]), {}, None),
    "instability: kl max at 5.5x its median": ("instability", lambda: _log(
        reward=_line(6, 0.6, -0.02), kl=[2**-10] * 5 + [5.5 * 2**-10]), {}, WARN),
    "instability: kl max at 1e-3": ("instability", lambda: _log(reward=_line(6, 0.6, -0.02), kl=[1e-4] * 5 + [1e-3]),
                                    {}, None),
    "instability: entropy over 6 steps": ("instability", lambda: _log(
        reward=_line(6, 0.6, -0.02), entropy_loss=[1.0] * 3 + [0.5] * 3), {}, WARN),
    "instability: entropy at 70%": ("instability", lambda: _log(
        reward=_line(6, 0.6, -0.02), entropy_loss=[1.25] * 3 + [0.875] * 3), {}, None),
    "instability: entropy 2 -> 1.2": ("instability", lambda: _log(
        reward=_line(6, 0.6, -0.02), entropy_loss=[2.0] * 3 + [1.2] * 3), {}, WARN),
    "instability: a fall within noise": ("instability", lambda: _log(
        reward=[0.5, 0.6, 0.4, 0.55, 0.45, 0.5], kl=[1e-4] * 5 + [2e-3]), {}, None),
    "instability: a fall of 2.5 standard errors": ("instability", lambda: _log(
        reward=_line(6, 0.6, -0.01, 0.0167), kl=[1e-4] * 5 + [2e-3]), {}, WARN),
    "instability: entropy low at the last 3 of 7 steps only": ("instability", lambda: _log(
        reward=_line(7, 0.6, -0.02), entropy_loss=[1.0, 1.0, 1.0, 1.2, 0.6, 0.6, 0.6]), {}, WARN),
    "instability: entropy against the first 3 steps": ("instability", lambda: _log(
        reward=_line(7, 0.6, -0.02), entropy_loss=[1.0, 1.0, 1.0, 0.4, 0.65, 0.65, 0.65]), {}, WARN),
    "boxed falling at 2.5 standard errors": (EARLY_BOXED, lambda: _log(has_boxed=_line(6, 0.95, -0.03, 0.05)), {},
                                             WARN),
    "spikes: a loss 6.7 robust SDs out but under 3x the median": ("loss/grad spikes", lambda: _log(
        grad_norm=[1.0] * 6, policy_loss=[0.49, 0.5, 0.51, 0.5, 0.6]), {}, None),
    "spikes: a loss at 3x the median |loss|": ("loss/grad spikes", lambda: _log(
        grad_norm=[1.0] * 6, policy_loss=[0.25, 0.25, 0.3125, 0.1875, -0.75]), {}, None),
    "spikes: a loss at 6 robust SDs": ("loss/grad spikes", lambda: _log(
        grad_norm=[1.0] * 6, policy_loss=[-0.01, 0.0, 0.01, 0.0, 6 * (1.4826 * 0.01)]), {}, None),
    "spikes: a loss just over 6 robust SDs": ("loss/grad spikes", lambda: _log(
        grad_norm=[1.0] * 6, policy_loss=[-0.01, 0.0, 0.01, 0.0, 6 * 1.4826 * 0.01 * (1 + 1e-9)]), {}, WARN),
    "flat: a trend at exactly t=2": ("flat learning", lambda: _log(reward=T2), {}, None),
    "instability: a fall at exactly t=-2": ("instability", lambda: _log(reward=[-v for v in T2],
                                                                         kl=[1e-4] * 9 + [2e-3]), {}, None),
    "flat: a gain of exactly 5 points": ("flat learning", lambda: _learned([0.0625] * 3, [0.1125] * 10), W10, WARN),
    "flat: a gain of exactly 2 standard errors": ("flat learning", lambda: _learned([0.4375] * 3, GAIN_AT_2SE),
                                                  {"window": 16}, WARN),
    "flat: the probe up exactly its noise": ("flat learning", lambda: _log(
        evals={2: 0.4, 10: PROBE_AT_NOISE}, reward=_line(12, 0.4, 0.0, 0.01)), {"probe_size": 100}, WARN),
    "wrong answers paid, up exactly 3 points": ("wrong answers paid above their group", lambda: _log(
        reward_high_but_wrong=_line(6, 0.0, SLOPE_3_POINTS)), {}, PASS),
    "flat: a change of exactly 5 points within noise": ("flat learning", lambda: _log(reward=_line(17, 0.3, 0.003125, 0.125)),
                                                         {}, None),
    "hacking: a rise of exactly 3 points": ("reward hacking", lambda: _log(
        reward=_line(17, 0.0, 0.001875), evals={5: 0.5, 9: 0.5, 13: 0.5, 17: 0.5}), HACKING, None),
    "hacking: a rise at exactly t=2": ("reward hacking", lambda: _log(
        reward=_t2(0.5, 2**-6, Q10), evals={1: 0.5, 4: 0.5, 7: 0.5, 10: 0.5}), HACKING, None),
    "wrong answers paid, rising at exactly t=2": ("wrong answers paid above their group", lambda: _log(
        reward_high_but_wrong=_t2(0.046875, 2**-7, Q6)), {}, PASS),
    "boxed falling at exactly t=-2": (EARLY_BOXED, lambda: _log(has_boxed=_t2(0.75, -(2**-5), Q6)), {}, PASS),
    "boxed falling by exactly 10 points": (EARLY_BOXED, lambda: _log(
        has_boxed=[0.3] + [1.0 - 0.02 * i for i in range(18)] + [0.3 - 0.1]), {"early_steps": 20}, PASS),
    "boxed falling by 11 points": (EARLY_BOXED, lambda: _log(
        has_boxed=[0.3] + [1.0 - 0.02 * i for i in range(18)] + [0.19]), {"early_steps": 20}, WARN),
    "hacking: the probe up exactly half its SE": ("reward hacking", lambda: _log(
        reward=_line(20, 0.25, 0.01, 0.05), evals={4: 0.0, 8: 0.0, 12: 0.0, 16: PROBE_AT_HALF_SE}), HACKING, WARN),
    "hacking: the probe up just over half its SE": ("reward hacking", lambda: _log(
        reward=_line(20, 0.25, 0.01, 0.05), evals={4: 0.0, 8: 0.0, 12: 0.0, 16: PROBE_AT_HALF_SE * 1.01}), HACKING,
        None),
    "hacking: t 2.7": ("reward hacking", lambda: _log(reward=_line(20, 0.3, 0.005, 0.1),
                                                     evals={5: 0.5, 10: 0.5, 15: 0.5, 20: 0.5}), HACKING, WARN),
    "hacking: 2.8 points": ("reward hacking", lambda: _log(reward=_line(20, 0.3, 0.028 / 19, 0.005),
                                                          evals={5: 0.5, 10: 0.5, 15: 0.5, 20: 0.5}), HACKING, None),
    "hacking: 3.04 points": ("reward hacking", lambda: _log(reward=_line(20, 0.3, 0.0016, 0.005),
                                                           evals={5: 0.5, 10: 0.5, 15: 0.5, 20: 0.5}), HACKING, WARN),
    "hacking: 2.95 points": ("reward hacking", lambda: _log(reward=_line(20, 0.3, 0.00155, 0.005),
                                                           evals={5: 0.5, 10: 0.5, 15: 0.5, 20: 0.5}), HACKING, None),
    "hacking: 3 evals": ("reward hacking", lambda: _log(reward=_line(20, 0.3, 0.01, 0.05),
                                                       evals={5: 0.5, 10: 0.5, 15: 0.5}), HACKING, None),
    "hacking: 10 training steps": ("reward hacking", lambda: _log(reward=_line(10, 0.3, 0.01, 0.01),
                                                                 evals={1: 0.5, 4: 0.5, 7: 0.5, 10: 0.5}), HACKING,
                                   WARN),
    "hacking: the probe up 9 points": ("reward hacking", lambda: _log(reward=_line(20, 0.3, 0.01, 0.05),
                                                                     evals={5: 0.5, 10: 0.53, 15: 0.56, 20: 0.59}),
                                       HACKING, None),
    "spikes: grad_norm at 50": ("loss/grad spikes", lambda: _log(grad_norm=[1.0] * 5 + [50.0]), {}, None),
    "spikes: a loss outlier with no spread": ("loss/grad spikes", lambda: _log(
        grad_norm=[1.0] * 6, policy_loss=[0.05] * 4 + [1.0]), {}, None),
    "length at 60% of its peak": ("length collapse", lambda: _log(response_length=[1000.0] * 3 + [600.0] * 3), {},
                                  None),
    "truncation at 70%": ("high truncation", lambda: _log(truncated=[0.1] * 5 + [0.7] * 5), {}, None),
    "entropy at half": ("entropy collapse", lambda: _log(entropy_loss=[2.0] * 3 + [1.0] * 3), {}, None),
    "entropy 1 -> 0.79": ("entropy collapse", lambda: _log(entropy_loss=[1.0] * 3 + [0.79] * 3), {}, WARN),
    "entropy at 80% below 1": ("entropy collapse", lambda: _log(entropy_loss=[1.125] * 3 + [0.9] * 3), {}, None),
    "entropy 1.2 -> 0.9": ("entropy collapse", lambda: _log(entropy_loss=[1.2] * 3 + [0.9] * 3), {}, WARN),
    "entropy 0.9 -> 0.7": ("entropy collapse", lambda: _log(entropy_loss=[0.9] * 3 + [0.7] * 3), {}, None),
    "entropy 1.2 -> 0.99": ("entropy collapse", lambda: _log(entropy_loss=[1.2] * 3 + [0.99] * 3), {}, None),
    "uniform groups at half": ("uniform groups", lambda: _log(uniform_group_share=[0.5] * 6), {}, None),
    "boxed at 90% after the early steps": ("has_boxed >= 90% in steady state", lambda: _log(
        has_boxed=[0.95] * 6 + [0.9] * 5), {}, None),
    "boxed before the early steps end": ("has_boxed >= 90% in steady state", lambda: _log(has_boxed=[0.5] * 7),
                                         {"early_steps": 8}, None),
    "ratio_max at 10": ("extreme log-prob ratios", lambda: _log(ratio_max=[10.0] * 6), {}, None),
    "reward 1e-6 from the start": ("reward not dropping to 0", lambda: _log(reward=[1e-6, 1e-6, 0.0, 0.0, 0.0, 0.3]),
                                   {}, None),
    "wrong answers paid at 5%": ("wrong answers paid above their group", lambda: _log(
        reward_high_but_wrong=[0.05] * 6), {}, PASS),
    "wrong answers paid at 10%": ("wrong answers paid above their group", lambda: _log(
        reward_high_but_wrong=[0.1] * 6), {}, WARN),
    "wrong answers paid, up 2.9 points": ("wrong answers paid above their group", lambda: _log(
        reward_high_but_wrong=_line(6, 0.0, 0.0058)), {}, PASS),
    "wrong answers paid, up 3.2 points": ("wrong answers paid above their group", lambda: _log(
        reward_high_but_wrong=_line(6, 0.0, 0.0064)), {}, WARN),
    "wrong answers paid, rising at t 2.5": ("wrong answers paid above their group", lambda: _log(
        reward_high_but_wrong=_line(6, 0.02, 0.008, 0.01339)), {}, WARN),
    "wrong answers paid, up 4 points within noise": ("wrong answers paid above their group", lambda: _log(
        reward_high_but_wrong=_line(6, 0.02, 0.008, 0.03)), {}, PASS),
}


@pytest.mark.parametrize("case", sorted(RULE_FIRES))
def test_rule_fires(case):
    check, build, th, status = RULE_FIRES[case]
    v = {x.check: x for x in diagnose(build(), (), Thresholds(**th))}.get(check)
    assert (v.status if v else None) == status


@pytest.mark.parametrize("case", sorted(VERDICT_TEXT))
def test_verdict_text(case):
    check, build, th, status, evidence, action = VERDICT_TEXT[case]
    th = dict(th)
    spikes = th.pop("spikes", ())
    v = {x.check: x for x in diagnose(build(), spikes, Thresholds(**th))}[check]
    assert (v.status, v.evidence, v.action) == (status, evidence, action)


GROUP_OF = {
    AGREEMENT: "agreement", MOVING: "movement", EARLY: "early-stop",
    **dict.fromkeys((EARLY_REWARD, EARLY_BOXED, EARLY_GRAD, EARLY_ADV, EARLY_TRUNC, EARLY_CLIP), "early-checks"),
    **dict.fromkeys(("judge failure rate", "wrong answers paid above their group"), "judge"),
    **dict.fromkeys(("has_boxed >= 90% in steady state", "extreme log-prob ratios", "ppo_kl not negative",
                     "reward not dropping to 0"), "thresholds"),
}


def test_every_verdict_names_its_group(tmp_path):
    """The group printed before each verdict (`STATUS group: check: evidence`) is the section of docs/monitor.md."""
    logs = [build() for _, build, *_ in (*VERDICT_TEXT.values(), *RULE_FIRES.values())]
    logs += [read_metrics(write_scenario(name, tmp_path / name)) for name in SCENARIOS]
    seen = set()
    for log in logs:
        for v in diagnose(log):
            assert v.group == GROUP_OF.get(v.check, "playbook"), v
            assert v.group != "playbook" or v.check in (*PLAYBOOK, "playbook diagnosis", "not checked"), v
            seen.add(v.check)
    assert seen >= set(GROUP_OF) | set(PLAYBOOK)


def test_stop_line_is_the_one_in_the_docs(tmp_path):
    """docs/monitor.md shows `--check` on the generated early-stop log: the verdict prints that line."""
    v = {x.check: x for x in diagnose(read_metrics(write_scenario("early_stop", tmp_path)))}[EARLY]
    docs = (Path(__file__).parents[2] / "docs" / "monitor.md").read_text()
    assert f"\n{v.status} {v.group}: {v.evidence}\n" in docs


@pytest.mark.parametrize(("value", "text"), [
    (None, "-"), (float("nan"), "nan"), (float("inf"), "inf"), (0.0, "0"), (1.0, "1"), (0.25, "0.25"),
    (999.0, "999"), (1000.0, "1.00e+03"), (1000.5, "1.00e+03"), (-2500.0, "-2.50e+03"), (1e-3, "0.001"),
    (9.99e-4, "9.99e-04"), (123.456, "123"),
])
def test_fmt(value, text):
    assert fmt(value) == text


def test_trend_by_hand():
    """Slope and standard error of a least-squares line, worked by hand; < 3 points or one step: no trend."""
    slope, se = trend([(0, 0.0), (1, 1.0), (2, 3.0)])  # slope 3/2; residuals 1/6, -1/3, 1/6: SE sqrt(1/6 / 1 / 2)
    assert slope == pytest.approx(1.5) and se == pytest.approx((1 / 12) ** 0.5)
    slope, se = trend([(0, 0.0), (1, 1.0), (2, 3.0), (3, 3.0)])  # slope 5.5/5; residuals -0.1, -0.2, 0.7, -0.4
    assert slope == pytest.approx(1.1) and se == pytest.approx((0.7 / 2 / 5) ** 0.5)
    assert trend([(0, 0.0), (0, 0.0), (1, 1.0), (1, 1.0)]) == (pytest.approx(1.0), 1e-12)  # exact fit: SE floored
    assert trend([(5, 0.1), (5, 0.2), (5, 0.3)]) == (0.0, float("inf"))
    assert trend([(1, 0.0), (2, 1.0)]) == (0.0, float("inf"))


def test_trend_ignores_an_offset():
    """Adding a constant to every value moves no slope."""
    pts = [(1, 0.0), (2, 0.0), (4, 3.0)]
    slope, se = trend(pts)
    shifted = trend([(s, 1e12 + v) for s, v in pts])
    assert slope == pytest.approx(15 / 14) and shifted == (pytest.approx(slope, rel=1e-9), pytest.approx(se, rel=1e-3))
    flat = [(0, 0.97), (1, 1.47), (3, 1.07)]  # no trend: sum((x - 4/3) * (y - 1.17)) = 0
    assert abs(trend(flat)[0]) < 1e-12 and abs(trend([(s + 10**6, v) for s, v in flat])[0]) < 1e-12


@pytest.mark.parametrize(("values", "share"), [
    ([-1.0] * 3, 1.0), ([-1.0] * 2, None), ([-1e-4] * 3, None), ([-2e-4] * 3, 1.0),
    ([-1.0] * 7 + [1.0] * 3, 0.7), ([-1.0] * 6 + [1.0] * 4, None), ([-1.0] * 6 + [0.0] + [1.0] * 3, None),
    ([-1.0] * 6 + [0.5] * 4, None),
])
def test_negative_share(values, share):
    """A share of negative values >= 70% with a mean below -tol (tol 1e-4), over 3 or more values."""
    assert negative_share(values, 1e-4) == share


@pytest.mark.parametrize(("keys", "th", "key"), [
    (["eval_aime_acc", "eval_math_pass@1"], {}, "eval_math_pass@1"),
    (["eval_aime_pass1", "eval_ood_pass1"], {}, "eval_ood_pass1"),
    (["eval_aime_acc", "eval_math_acc"], {}, "eval_aime_acc"),
    (["eval_aime_pass1", "eval_ood_pass1"], {"probe_key": "eval_aime_pass1"}, "eval_aime_pass1"),
    (["eval_ood_pass1"], {"probe_key": "eval_x_pass1"}, None),
    ([], {}, None),
])
def test_probe_key(keys, th, key):
    log = MetricsLog()
    log.add({"global_step": 1, "reward": 0.5, **dict.fromkeys(keys, 0.4)}, "x")
    assert probe_key(log, Thresholds(**th)) == key


@pytest.mark.parametrize("layout", ["global_step20_hf", "_actor/global_step20", "global_step20"])
def test_checkpoint_name_finds_each_layout(tmp_path, layout):
    (tmp_path / layout).mkdir(parents=True)
    assert checkpoint_name(20, str(tmp_path)) == str(tmp_path / layout)
    assert checkpoint_name(20, None) == "global_step20"


def test_exit_code_of_no_verdicts_is_healthy():
    assert exit_code([]) == 0


def test_async_rollout_lag_judges_vllm_kl_by_the_median_of_lag_plus_2_steps():
    """--async_train logs rollout_lag; one high step at the end (the policy moved over the lag) is judged with its
    neighbours: median over max(3, lag + 2) steps. Synchronous, the same last step warns on its own."""
    def verdict(lag: float | None, tail: list[float]):
        log = MetricsLog()
        values = [3e-4] * 8 + tail
        for s, v in enumerate(values, start=1):
            log.add({"global_step": s, "vllm_kl": v, **({"rollout_lag": lag} if lag is not None else {})}, "x")
        return {v.check: v for v in diagnose(log)}["rollout/trainer agreement"]

    sync = verdict(None, [0.08])
    assert sync.status == WARN and "0.08 at step 9" in sync.evidence
    lagged = verdict(1.0, [0.08])
    assert lagged.status == PASS and "rollouts 1 step(s) behind the policy" in lagged.evidence
    # the median still fails a lagged run whose syncs stopped: most of the last lag + 2 steps are high
    drifted = verdict(2.0, [0.08, 0.09, 0.07])
    assert drifted.status == FAIL and "over the last 4 steps" in drifted.evidence
