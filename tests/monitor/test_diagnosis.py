"""Verdicts on generated scenario logs: each run pattern gets its playbook diagnosis, nothing else fires."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rft.monitor.diagnosis import FAIL, MISSING, PASS, STOP, WARN, Thresholds, diagnose, exit_code, trend
from rft.monitor.logs import MetricsLog, read_metrics, read_spikes
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
    "smoke_fail": (2, {"reward_mean not stuck at 0/1": FAIL, "has_boxed > 50% and not falling": FAIL,
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
    assert warn.status == WARN and "step 2 (25%)" in warn.evidence and "RFT_JUDGE_CONCURRENCY" in warn.action
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


def test_grad_norm_smoke_test_cases():
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


def _smoke(rows: list[dict]) -> dict:
    log = MetricsLog()
    for s, row in enumerate(rows, start=1):
        log.add({"global_step": s, **row}, "x")
    return {v.check: v for v in diagnose(log)}


def test_smoke_tests_give_the_playbook_action():
    v = _smoke([{"reward": 1.0}] * 6)["reward_mean not stuck at 0/1"]
    assert v.status == FAIL and "stuck at 1" in v.evidence and "too easy" in v.action
    v = _smoke([{"has_boxed": b} for b in (0.95, 0.9, 0.85, 0.8, 0.72, 0.66)])["has_boxed > 50% and not falling"]
    assert v.status == WARN and "falling" in v.evidence and "train_sft.sh" in v.action
    v = _smoke([{"group_reward_std": 0.0}] * 6)["advantage_std not stuck at 0"]
    assert v.status == FAIL and "Advantage computation bug" in v.action
    assert _smoke([{"group_reward_std": 0.0}] + [{"group_reward_std": 0.3}] * 5)[
        "advantage_std not stuck at 0"].status == PASS
    v = _smoke([{"ppo_clip_ratio": 0.55}] * 6)["ppo_clip_ratio < 40%"]
    assert v.status == FAIL and "--actor_learning_rate" in v.action
    assert _smoke([{"truncated": 0.2}] * 6)["truncated < 50%"].status == PASS


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
    # Zero from the first step is the smoke test's FAIL, not a drop.
    by = {v.check: v for v in diagnose(_rows(reward=[0.0] * 10))}
    assert "reward not dropping to 0" not in by and by["reward_mean not stuck at 0/1"].status == FAIL


def test_boxed_steady_state_waits_past_the_smoke_steps():
    def verdict(boxed):
        return {v.check: v for v in diagnose(_rows(reward=[0.3] * len(boxed), has_boxed=boxed))}.get(
            "has_boxed >= 90% in steady state")

    assert verdict([0.8] * 10) is None  # 4 steps past the first 6: not yet a steady state
    assert verdict([0.8] * 11).status == WARN
    assert verdict([0.7] * 6 + [0.95] * 5) is None  # learnt the format after the smoke steps


def test_step0_eval_is_a_baseline_not_a_training_step(tmp_path):
    """The eval-only record at step 0 leaves the smoke tests' six steps alone and starts the probe's trend."""
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
