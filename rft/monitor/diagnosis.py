"""Verdicts on a run's metrics: rollout/trainer agreement, early checks, policy movement, early stop, playbook.

Each early check and playbook pattern is one small rule function in a list (`EARLY_RULES`, `PLAYBOOK_RULES`);
docs/monitor.md states their thresholds and actions. A metric the log does not contain yields MISSING, never a
failure.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rft.monitor.early_stop import DEFAULT_PROBE_SIZE, DEFAULT_Z, decide, drop_threshold
from rft.monitor.logs import MetricsLog, Spike

PASS, INFO, MISSING, WARN, FAIL, STOP = "PASS", "INFO", "MISSING", "WARN", "FAIL", "STOP"
SEVERITY = {PASS: 0, INFO: 0, MISSING: 0, WARN: 1, FAIL: 2, STOP: 2}
Series = list[tuple[int, float]]  # (step, value) pairs of one metric, as MetricsLog.series gives them

SINK_OR_SYNC = (
    "rollouts are not coming from the trained policy: broken weight sync to vLLM (LoRA delta not applied) "
    "or attention sinks dropped in the trainer (gpt-oss needs --attn_implementation eager, no --packing_samples)"
)


@dataclass(frozen=True)
class Verdict:
    """One check's outcome: status, the numbers behind it, and the playbook's action."""

    group: str
    check: str
    status: str
    evidence: str
    action: str = ""


@dataclass(frozen=True)
class Thresholds:
    """Knobs of the checks (defaults in docs/monitor.md; see `python -m rft.monitor --help`)."""

    early_steps: int = 6
    window: int = 20
    spike_grad_norm: float = 50.0
    vllm_kl_warn: float = 0.01
    vllm_kl_fail: float = 0.05
    negative_kl_tol: float = 1e-4
    not_moving_kl: float = 5e-4
    not_moving_after: int = 10
    probe_size: int = DEFAULT_PROBE_SIZE
    stop_z: float = DEFAULT_Z
    probe_key: str | None = None
    ckpt_path: str | None = None
    judge_fail_warn: float = 0.2
    judge_fail_stop: float = 0.5
    high_but_wrong_warn: float = 0.05
    boxed_steady: float = 0.9
    ratio_max_warn: float = 10.0
    logratio_raw_warn: float = 5.0
    reward_zero_steps: int = 3
    repaired_warn: float = 0.01
    repaired_fail: float = 0.5
    uniform_share_warn: float = 0.5
    uniform_steps: int = 5
    # the rollout/trainer gap in full (rft.train.mismatch), over the last `mismatch_steps` steps (docs/monitor.md)
    mismatch_steps: int = 20
    mismatch_kl_warn: float = 0.005
    mismatch_kl_fail: float = 0.015  # prime-rl's bar for gpt-oss: mean mismatch KL < 0.015 over 20 math steps
    # mismatch_kl against the run's own floor, its first `mismatch_floor_steps` steps (docs/monitor.md): above the
    # absolute lines a run is judged by its growth past floor x growth + 3 sigma of the floor steps' spread
    mismatch_floor_steps: int = 5
    mismatch_floor_growth: float = 1.5
    out_of_band_warn: float = 0.05
    out_of_band_fail: float = 0.2
    is_clipped_warn: float = 0.01
    is_clipped_fail: float = 0.1


def exit_code(verdicts: Sequence[Verdict]) -> int:
    """0 healthy, 1 warnings, 2 stop (a FAIL or STOP)."""
    return max((SEVERITY[v.status] for v in verdicts), default=0)


def fmt(value: float | None) -> str:
    """Compact number for evidence strings."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 1e-3:
        return f"{value:.2e}"
    return f"{value:.3g}"


def trend(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares slope per step and its standard error (se=inf with < 3 points)."""
    if len(points) < 3:
        return 0.0, math.inf
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    sxx = float(((x - x.mean()) ** 2).sum())
    if sxx == 0:
        return 0.0, math.inf
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / sxx)
    resid = y - (y.mean() + slope * (x - x.mean()))
    se = math.sqrt(float((resid**2).sum()) / (len(x) - 2) / sxx)
    return slope, max(se, 1e-12)


def _values_mean(pts: Sequence[tuple[int, float]]) -> float:
    """The mean of the values of (step, value) points."""
    return _mean([v for _, v in pts])


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def negative_share(values: Sequence[float], tol: float) -> float | None:
    """The share of negative values when there are 3 or more, 70% of them negative and their mean below -tol;
    else None (a KL that should be >= 0 drifting negative)."""
    if len(values) < 3:
        return None
    share = sum(v < 0 for v in values) / len(values)
    return share if share >= 0.7 and _mean(values) < -tol else None


# ---------------------------------------------------------------- rollout/trainer agreement


def repaired_share(log: MetricsLog, th: Thresholds) -> tuple[str, tuple[str, str] | None]:
    """(evidence, problem or None) from `rollout_logprob_repaired`: the share of response tokens whose vLLM
    log-prob was non-finite and replaced by the trainer's. Those tokens agree by construction, so a high share
    hides the gap `vllm_kl` measures: an engine returning NaN everywhere would read as perfect agreement."""
    repaired = log.series("rollout_logprob_repaired")
    if not repaired:
        return "", None
    lengths = dict(log.series("response_length"))
    shares = [(s, v / lengths[s]) for s, v in repaired if lengths.get(s)]
    if not shares:  # no lengths to divide by: any repaired token is worth a look
        step, worst = max(repaired, key=lambda sv: sv[1])
        if worst <= 0:
            return "rollout_logprob_repaired 0", None
        return "", (WARN, f"rollout_logprob_repaired {fmt(worst)} tokens per sample at step {step} "
                          "(vLLM returned non-finite log-probs)")
    step, worst = max(shares, key=lambda sv: sv[1])
    where = f"{worst:.1%} of response tokens at step {step}"
    if worst > th.repaired_fail:
        return "", (FAIL, f"rollout log-probs repaired: {where}: vLLM returned non-finite log-probs for most "
                          "tokens, so vllm_kl compares the trainer with itself; check the engine (MXFP4 kernels, "
                          "dtype, the synced weights for NaN)")
    if worst > th.repaired_warn:
        return "", (WARN, f"rollout log-probs repaired: {where} (vLLM returned non-finite log-probs; those "
                          "tokens are left out of vllm_kl)")
    return f"rollout_logprob_repaired at most {where}", None


def mismatch_gap(log: MetricsLog, th: Thresholds, lag: int = 0) -> tuple[list[str], list[tuple[str, str]]]:
    """(evidence, problems) from the mismatch_* keys over the last `mismatch_steps` steps: the k3 mismatch KL, the
    share of tokens with a rollout/trainer ratio outside [0.9, 1.1] and the share whose IS weight the truncation
    changed (each WARN/FAIL by its thresholds); the largest |log-ratio| is evidence only. Means for a synchronous
    run; medians when the rollouts trail the policy (`lag` >= 1), whose steps also hold the policy's move over the
    lag: a fast-moving stretch would carry the mean, while a sync that never lands raises every step."""
    stat, name = (statistics.median, "median") if lag else (statistics.fmean, "mean")
    seen: list[str] = []
    problems: list[tuple[str, str]] = []
    rules = (("mismatch_kl", "mismatch KL (k3)", th.mismatch_kl_warn, th.mismatch_kl_fail),
             ("mismatch_out_of_band", "tokens with ratio outside [0.9, 1.1]", th.out_of_band_warn,
              th.out_of_band_fail),
             ("mismatch_is_clipped", "tokens whose IS weight was truncated", th.is_clipped_warn, th.is_clipped_fail))
    bins = [(label, log.series(key)[-th.mismatch_steps:]) for label, key in
            (("0-512", "mismatch_kl_pos0_512"), ("512-2048", "mismatch_kl_pos512_2048"), ("2048+", "mismatch_kl_pos2048_"))]
    by_position = [f"{label} {fmt(stat(v for _, v in s))}" for label, s in bins if s]
    positions = f"mismatch_kl {name} by response position: {', '.join(by_position)}" if by_position else ""
    for key, what, warn, fail in rules:
        full = log.series(key)
        series = full[-th.mismatch_steps:]
        if not series:
            continue
        value = stat(v for _, v in series)
        span = f"steps {series[0][0]}-{series[-1][0]}"
        text = f"{key} {name} {fmt(value)} over {span}"
        limit = floor_limit(full, len(series), th) if key == "mismatch_kl" else None
        if limit is not None and value > warn:
            floor, line = limit
            text += f" (its floor {fmt(floor)}, steps {full[0][0]}-{full[th.mismatch_floor_steps - 1][0]}; limit {fmt(line)})"
            seen.append(text)
            if value > line:
                problems.append((FAIL, f"{what} grew past the run's floor: {text}" + (f"; {positions}" if positions else "")))
            continue
        seen.append(text)
        if value > fail:
            problems.append((FAIL, f"{what}: {text} > {fmt(fail)}"))
        elif value > warn:
            problems.append((WARN, f"{what}: {text} > {fmt(warn)}"))
    if positions:
        seen.append(positions)
    top = log.series("mismatch_abs_max")[-th.mismatch_steps:]
    if top:
        step, worst = max(top, key=lambda sv: sv[1])
        seen.append(f"largest |log-ratio| {fmt(worst)} at step {step}")
    return seen, problems


def floor_limit(series: list[tuple[int, float]], recent: int, th: Thresholds) -> tuple[float, float] | None:
    """(floor, limit) of a gap series: the floor is the median of its first `mismatch_floor_steps` values, the limit
    floor x `mismatch_floor_growth` + 3 sigma_floor sqrt(1/n_floor + 1/recent) (docs/monitor.md). None while the
    run has fewer than twice the floor's steps (then the absolute lines judge)."""
    n = th.mismatch_floor_steps
    if len(series) < 2 * n:
        return None
    first = [v for _, v in series[:n]]
    floor = statistics.median(first)
    noise = 3 * statistics.stdev(first) * math.sqrt(1 / n + 1 / max(recent, 1))
    return floor, floor * th.mismatch_floor_growth + noise


def rollout_lag(log: MetricsLog) -> int:
    """Steps the rollouts trail the policy: the largest `rollout_lag` the run logged (--async_train: its queue
    size), 0 for a synchronous run."""
    lags = [v for _, v in log.series("rollout_lag") if math.isfinite(v)]
    return int(max(lags)) if lags else 0


def agreement(log: MetricsLog, th: Thresholds) -> Verdict:
    """vllm_kl large from the start, or a k1 KL to the reference drifting negative, means off-policy rollouts.
    vllm_kl is judged by medians over windows of max(3, lag + 2) steps: with --async_train (lag >= 1) a step's
    vllm_kl also holds the policy's move over the lag, so one step alone says little."""
    problems, seen = [], []
    vllm = log.series("vllm_kl")
    lag = rollout_lag(log)
    window = max(3, lag + 2)
    if vllm:
        early = [v for _, v in vllm[:window]]
        med = statistics.median(early)
        seen.append(f"vllm_kl first steps {', '.join(fmt(v) for v in early)}"
                    + (f" (rollouts {lag} step(s) behind the policy)" if lag else ""))
        late = statistics.median(v for _, v in vllm[-window:])
        last, where = (late, f"over the last {window} steps to step") if lag else (vllm[-1][1], "at step")
        if abs(med) > th.vllm_kl_fail:
            problems.append((FAIL, f"rollout/trainer log-prob gap vllm_kl={fmt(med)} from step {vllm[0][0]}"))
        elif len(vllm) >= 2 * window and abs(late) > th.vllm_kl_fail:  # fine at first, then drifting: no syncs
            problems.append((FAIL, f"sync drift: vllm_kl {fmt(med)} early, {fmt(late)} over the last {window} steps "
                                   f"(to step {vllm[-1][0]})"))
        elif abs(med) > th.vllm_kl_warn or abs(last) > th.vllm_kl_fail:
            problems.append((WARN, f"vllm_kl={fmt(med)} early, {fmt(last)} {where} {vllm[-1][0]}"))
    name = "logprobs_diff" if log.key_for("logprobs_diff") else "kl"
    ref = log.series(name)
    if ref and any(v != 0 for _, v in ref):
        recent = [v for _, v in ref[-10:]]
        seen.append(f"{name} (k1 KL to reference) last {len(recent)} mean {fmt(_mean(recent))}")
        neg = negative_share(recent, th.negative_kl_tol)
        if neg is not None:
            problems.append(
                (
                    FAIL,
                    f"{name} negative at {neg:.0%} of the last {len(recent)} steps (mean {fmt(_mean(recent))})",
                )
            )
    gap_seen, gap_problems = mismatch_gap(log, th, lag)
    seen += gap_seen
    problems += gap_problems
    measured = bool(seen)  # repaired tokens alone measure no gap
    repair, repair_problem = repaired_share(log, th)
    if repair:
        seen.append(repair)
    if repair_problem:
        problems.append(repair_problem)
    if not measured and not problems:
        return Verdict(
            "agreement",
            "rollout/trainer agreement",
            MISSING,
            "no mismatch_* or vllm_kl (needs vLLM rollouts) and no nonzero logprobs_diff/kl (needs a reference model)",
        )
    if not problems:
        return Verdict("agreement", "rollout/trainer agreement", PASS, "; ".join(seen))
    status = FAIL if any(s == FAIL for s, _ in problems) else WARN
    evidence = "; ".join(p for _, p in problems)
    if problems != [repair_problem]:
        evidence += f" => {SINK_OR_SYNC}"
    action = "Stop and verify trainer vs vLLM log-probs after a sync before burning compute."
    return Verdict("agreement", "rollout/trainer agreement", status, evidence, action)


# ---------------------------------------------------------------- early checks (first steps)


_FIX_FIRST = " Stop and fix before burning compute."
# What to do when an early check (one of the ops guide's smoke-test criteria) fails.
EARLY_ACTIONS = {
    "reward0": "Data/reward bug: check labels and reward_func on a samples_stepN.jsonl." + _FIX_FIRST,
    "reward1": "Problems too easy: use a harder pool (every group identical = no advantage)." + _FIX_FIRST,
    "boxed": "Format compliance below 50% or dropping: consider an SFT phase (bash train_sft.sh).",
    "grad0": "Frozen weights: check the LoRA target_modules and that gradients reach the adapter."
    + _FIX_FIRST,
    "lr_high": "LR too high: lower --actor_learning_rate." + _FIX_FIRST,
    "adv0": "Advantage computation bug (advantage_std stuck at 0 beyond step 1): check --advantage_estimator "
    "and n_samples_per_prompt > 1." + _FIX_FIRST,
    "trunc": "Increase --generate_max_len.",
}
EARLY = "early-checks"


def _first(log: MetricsLog, name: str, th: Thresholds, *, finite: bool = True) -> Series:
    steps = log.train_steps()[: th.early_steps]
    return [(s, v) for s, v in log.series(name, finite=finite) if steps and s <= steps[-1]]


def _missing(group: str, check: str, name: str) -> Verdict:
    return Verdict(group, check, MISSING, f"{name} not in the log")


# (failing, status, suffix to the evidence, action): one rule of an early check over its first steps' points
Rule = tuple[Callable[[Series], bool], str, str, str]


def _steps_evidence(log: MetricsLog, pts: Series) -> str:
    return f"steps {pts[0][0]}-{pts[-1][0]}: {', '.join(fmt(v) for _, v in pts)}"


def _early_check(log: MetricsLog, th: Thresholds, check: str, name: str, missing: str,
                 evidence: Callable[[MetricsLog, Series], str], rules: Sequence[Rule],
                 *, finite: bool = True) -> Verdict:
    """`check` over the first steps of metric `name`: the first rule that holds gives the verdict, else PASS."""
    pts = _first(log, name, th, finite=finite)
    if not pts:
        return _missing(EARLY, check, missing)
    ev = evidence(log, pts)
    for failing, status, suffix, action in rules:
        if failing(pts):
            return Verdict(EARLY, check, status, ev + suffix, action)
    return Verdict(EARLY, check, PASS, ev)


def _vals(pts: Series) -> list[float]:
    return [v for _, v in pts]


def _boxed_falling(pts: Series) -> bool:
    slope, se = trend(pts)
    return slope < 0 and slope / se < -2 and pts[0][1] - pts[-1][1] > 0.1


def early_reward(log: MetricsLog, th: Thresholds) -> Verdict:
    """The reward is neither all 0 (a data or reward bug) nor all 1 (nothing to learn)."""
    return _early_check(log, th, "reward_mean not stuck at 0/1", "reward_mean", "reward_mean/reward", _steps_evidence, [
        (lambda pts: max(_vals(pts)) <= 1e-6, FAIL, " (stuck at 0)", EARLY_ACTIONS["reward0"]),
        (lambda pts: min(_vals(pts)) >= 1 - 1e-6, FAIL, " (stuck at 1)", EARLY_ACTIONS["reward1"]),
    ])


def early_boxed(log: MetricsLog, th: Thresholds) -> Verdict:
    """Most responses box an answer, and that share is not falling."""
    def evidence(_: MetricsLog, pts: Series) -> str:
        return f"mean {_mean(_vals(pts)):.0%}, {fmt(pts[0][1])} -> {fmt(pts[-1][1])}"

    return _early_check(log, th, "has_boxed > 50% and not falling", "has_boxed", "has_boxed", evidence, [
        (lambda pts: _mean(_vals(pts)) <= 0.5, FAIL, "", EARLY_ACTIONS["boxed"]),
        (_boxed_falling, WARN, " (falling)", EARLY_ACTIONS["boxed"]),
    ])


def early_grad_norm(log: MetricsLog, th: Thresholds) -> Verdict:
    """Gradients reach the adapter (non-zero) without exploding (< 100)."""
    return _early_check(log, th, "grad_norm non-zero, < 100", "grad_norm", "grad_norm", _steps_evidence, [
        (lambda pts: any(not math.isfinite(v) for v in _vals(pts)), FAIL, " (non-finite)", "LR too high / diverged."),
        (lambda pts: max(_vals(pts)) == 0, FAIL, " (zero)", EARLY_ACTIONS["grad0"]),
        (lambda pts: statistics.median(_vals(pts)) > 100, FAIL, "", EARLY_ACTIONS["lr_high"]),
        (lambda pts: max(_vals(pts)) > 100, WARN, " (one step > 100)", "LR too high?"),
    ], finite=False)


def early_advantage(log: MetricsLog, th: Thresholds) -> Verdict:
    """Advantages are not all zero after the first step."""
    def evidence(log: MetricsLog, pts: Series) -> str:
        return f"{log.key_for('advantage_std')}: {', '.join(fmt(v) for _, v in pts)}"

    rules: list[Rule] = [
        (lambda pts: len(pts) < 2, INFO, " (only step 1 so far)", ""),
        (lambda pts: max(abs(v) for _, v in pts[1:]) < 1e-8, FAIL, "", EARLY_ACTIONS["adv0"]),
    ]
    return _early_check(log, th, "advantage_std not stuck at 0", "advantage_std", "advantage_std/group_reward_std",
                        evidence, rules)


def _first_mean(log: MetricsLog, name: str, th: Thresholds) -> float | None:
    pts = _first(log, name, th)
    return _values_mean(pts) if pts else None


def early_truncated(log: MetricsLog, th: Thresholds) -> Verdict:
    """Most responses end within --generate_max_len."""
    check, m = "truncated < 50%", _first_mean(log, "truncated", th)
    if m is None:
        return _missing(EARLY, check, "truncated")
    bad = m > 0.5
    ev = f"{log.key_for('truncated')} mean {m:.0%}"
    return Verdict(EARLY, check, FAIL if bad else PASS, ev, EARLY_ACTIONS["trunc"] if bad else "")


def early_clip(log: MetricsLog, th: Thresholds) -> Verdict:
    """Fewer than 40% of tokens clipped (more means the LR moves the policy too far per step)."""
    check, m = "ppo_clip_ratio < 40%", _first_mean(log, "ppo_clip_ratio", th)
    if m is None:
        return _missing(EARLY, check, "ppo_clip_ratio")
    if m > 0.4:
        return Verdict(EARLY, check, FAIL, f"mean {m:.1%}", EARLY_ACTIONS["lr_high"])
    note = " (~0 is expected with one optimizer step per rollout batch)" if m < 1e-3 else ""
    return Verdict(EARLY, check, PASS, f"mean {m:.1%}{note}")


EARLY_RULES = (early_reward, early_boxed, early_grad_norm, early_advantage, early_truncated, early_clip)


def early_checks(log: MetricsLog, th: Thresholds) -> list[Verdict]:
    """The early checks over the first `early_steps` logged steps, one verdict per rule."""
    return [rule(log, th) for rule in EARLY_RULES]


# ---------------------------------------------------------------- policy movement


def movement(log: MetricsLog, th: Thresholds) -> Verdict:
    """A KL to the reference stuck near 1e-4 after many steps = barely moving, not 'stable'."""
    g, c = "movement", "policy moving from reference"
    for name in ("kl", "logprobs_diff"):
        pts = log.series(name)
        if pts and any(v != 0 for _, v in pts):
            break
    else:
        if log.series("kl") or log.series("logprobs_diff"):
            return Verdict(g, c, MISSING, "kl is 0 at every step: no reference model (init_kl_coef 0)")
        return _missing(g, c, "kl/logprobs_diff")
    if len(log.train_steps()) < th.not_moving_after:
        return Verdict(
            g,
            c,
            INFO,
            f"|{name}| {fmt(abs(pts[-1][1]))} at step {pts[-1][0]} (judged after "
            f"{th.not_moving_after} steps)",
        )
    recent = [abs(v) for _, v in pts[-10:]]
    med = statistics.median(recent)
    ev = f"median |{name}| over steps {pts[-len(recent)][0]}-{pts[-1][0]}: {fmt(med)}"
    if med < th.not_moving_kl:
        return Verdict(
            g,
            c,
            WARN,
            ev + f" after {len(log.train_steps())} steps: barely moving (not 'stable')",
            "Learning rate too low for LoRA: raise it (5e-7 -> 1e-6 -> 2e-6); check LR warmup reached target.",
        )
    return Verdict(g, c, PASS, ev)


# ---------------------------------------------------------------- early stopping


def probe_key(log: MetricsLog, th: Thresholds) -> str | None:
    """The OOD probe's eval key: --probe-key, else an `eval_*ood*pass1`, else the first `eval_*_pass1`."""
    keys = log.eval_keys()
    if th.probe_key:
        return th.probe_key if th.probe_key in keys else None
    pass1 = [k for k in keys if k.endswith("pass1") or k.endswith("pass@1")]
    ood = [k for k in pass1 if "ood" in k.lower()]
    return (ood or pass1 or keys or [None])[0]


def checkpoint_name(step: int, ckpt_path: str | None) -> str:
    """OpenRLHF's checkpoint tag for a step, with the path found under ckpt_path if any."""
    tag = f"global_step{step}"
    if not ckpt_path:
        return tag
    for cand in (Path(ckpt_path) / f"{tag}_hf", Path(ckpt_path) / "_actor" / tag, Path(ckpt_path) / tag):
        if cand.exists():
            return str(cand)
    return f"{tag} (not found under {ckpt_path}: save_steps may not align with eval_steps)"


def early_stop(log: MetricsLog, th: Thresholds) -> Verdict:
    """STOP after two consecutive OOD-probe drops each beyond z standard errors; names the best checkpoint."""
    g, c = "early-stop", "OOD probe early stopping"
    key = probe_key(log, th)
    if key is None:
        wanted = th.probe_key or "eval_*_pass1"
        return Verdict(g, c, MISSING, f"no eval results ({wanted}) in the log")
    pts = log.series(key)
    scores = [v for _, v in pts]
    if len(scores) < 3:
        return Verdict(g, c, INFO, f"{key}: {len(scores)} eval(s) so far; needs 3")
    d = decide(scores, th.probe_size, th.stop_z)
    best = d.best_index if d.best_index is not None else 0
    best_txt = f"best so far step {pts[best][0]} ({scores[best]:.1%}) -> {checkpoint_name(pts[best][0], th.ckpt_path)}"
    if d.stop:
        hops = "; ".join(
            f"step {pts[i - 1][0]} {scores[i - 1]:.1%} -> step {pts[i][0]} {scores[i]:.1%} "
            f"(-{drop * 100:.1f}pp > {thr * 100:.1f}pp)"
            for i, drop, thr in d.drops
        )
        return Verdict(
            g,
            c,
            STOP,
            f"{key} fell twice in a row beyond noise: {hops}; {best_txt}",
            "Stop training; evaluate the best checkpoint post hoc (AIME + ID probe) on the spare.",
        )
    thr = drop_threshold(scores[-1], scores[-1], th.probe_size, th.stop_z)
    return Verdict(
        g,
        c,
        PASS,
        f"{key} latest {scores[-1]:.1%} at step {pts[-1][0]}; {best_txt}; "
        f"no two consecutive drops > {thr * 100:.1f}pp (z={th.stop_z}, n={th.probe_size})",
    )


# ---------------------------------------------------------------- playbook diagnosis over a window


PLAY = "playbook"
def _playbook(check: str, evidence: str, status: str = WARN) -> Verdict:
    """The playbook verdict of `check`, with the playbook's action for it."""
    return Verdict(PLAY, check, status, evidence, PLAYBOOK[check])


PLAYBOOK = {
    "flat learning": "Increase LR, decrease KL coef, increase group size (n_samples_per_prompt 8 -> 16).",
    "instability": "Decrease LR, increase KL coef, add grad clipping.",
    "reward hacking": "Reweight reward toward correctness, add judge redundancy; trust the OOD probe, stop early.",
    "loss/grad spikes": "Root cause is extreme log-prob ratios, not advantage outliers: tighten eps_clip "
    "(0.2 -> 0.1), clamp the log-ratio, or lower LR. Advantage clipping does not help.",
    "length collapse": "Add a length penalty, check entropy, add a KL constraint.",
    "high truncation": "Increase --generate_max_len or add a length penalty in the reward.",
    "entropy collapse": "Diversity collapse: lower LR, add a KL constraint (init_kl_coef), check sampling temperature.",
    "non-finite values": "Training diverged: restart from the last good checkpoint with a lower LR.",
    "uniform groups": "Most prompt groups get one reward for every sample (zero advantage): their rollouts teach "
    "nothing. Mostly all wrong: sparse reward; start easier (a pass-rate band pool ordered easy -> hard, "
    "prepare_sft_data.py --pass-rates), raise n_samples_per_prompt. Mostly all right: the pool is mastered; drop "
    "solved prompts (--pass-rates band, --prompt_history). Either way DYNAMIC_FILTER=1 refills the batch with "
    "prompts that teach.",
}


def _window(log: MetricsLog, name: str, th: Thresholds) -> Series:
    steps = log.train_steps()[-th.window :]
    return [(s, v) for s, v in log.series(name) if steps and s >= steps[0]]


def _signal(log: MetricsLog) -> str:
    return "correctness" if log.key_for("correctness") else "reward_mean"


def spike_steps(log: MetricsLog, spikes: Sequence[Spike], th: Thresholds) -> list[int]:
    """Steps with grad_norm above the spike threshold, a policy_loss outlier (> 6 robust SDs and > 3x the
    median |loss|), or a spike-log entry."""
    found = {s for s, v in log.series("grad_norm") if v > th.spike_grad_norm}
    losses = log.series("policy_loss")
    if len(losses) >= 5:
        med = statistics.median(v for _, v in losses)
        scale = 1.4826 * statistics.median(abs(v - med) for _, v in losses)
        big = 3 * statistics.median(abs(v) for _, v in losses)
        if scale > 0:
            found |= {s for s, v in losses if abs(v - med) > 6 * scale and abs(v) > big}
    found |= {sp.step for sp in spikes}
    return sorted(found)


def _spike_text(step: int, log: MetricsLog, spikes: Sequence[Spike]) -> str:
    row = log.records.get(step, {})
    parts = []
    gkey, lkey = log.key_for("grad_norm"), log.key_for("policy_loss")
    if gkey and gkey in row:
        parts.append(f"grad_norm {fmt(row[gkey])}")
    if lkey and lkey in row:
        parts.append(f"policy_loss {fmt(row[lkey])}")
    for sp in (s for s in spikes if s.step == step):
        stats = {k: v for k, v in sp.stats.items() if "ratio" in k}
        shown = ", ".join(f"{k} {fmt(v)}" for k, v in sorted(stats.items())[:4])
        parts.append(f"spike log: {shown or 'no ratio stats'}; {len(sp.prompt_hashes)} prompt hash(es)")
    return f"step {step}: " + (", ".join(parts) or "in the spike log")


@dataclass
class Window:
    """The last `th.window` steps, as every playbook rule reads them."""

    log: MetricsLog
    spikes: Sequence[Spike]
    th: Thresholds
    steps: list[int]
    signal: str  # correctness when logged, else reward_mean
    pts: Series  # the signal over the window
    kl: list[float]  # |kl| over the window
    ent: list[float]  # entropy over the window

    @classmethod
    def of(cls, log: MetricsLog, spikes: Sequence[Spike], th: Thresholds) -> Window:
        sig = _signal(log)
        return cls(log, spikes, th, log.train_steps()[-th.window :], sig, _window(log, sig, th),
                   [abs(v) for _, v in _window(log, "kl", th)], [v for _, v in _window(log, "entropy", th)])

    @property
    def span(self) -> str:
        return f"steps {self.steps[0]}-{self.steps[-1]}"


# A playbook rule returns a WARN/FAIL verdict when its pattern is there, None when it is not, or a string
# naming what it could not check (the metric it needs is missing or too short).
Finding = Verdict | str | None


def reads(key: str, what: str) -> Callable[[Callable[[Window, Series], Finding]], Callable[[Window], Finding]]:
    """A playbook rule over one metric's series: without the metric in the log, `what (key)` names the check that
    could not run; otherwise the rule gets the series."""

    def wrap(rule: Callable[[Window, Series], Finding]) -> Callable[[Window], Finding]:
        @functools.wraps(rule)
        def checked(w: Window) -> Finding:
            pts = w.log.series(key)
            return rule(w, pts) if pts else f"{what} ({key})"

        return checked

    return wrap


def non_finite(w: Window) -> Finding:
    """A NaN or inf in the loss, the gradient norm or the reward."""
    bad = [f"{name}@{s}" for name in ("policy_loss", "grad_norm", "reward_mean")
           for s, v in w.log.series(name, finite=False) if not math.isfinite(v)]
    return _playbook("non-finite values", ", ".join(bad[:8]), FAIL) if bad else None


def learned_before(w: Window) -> bool:
    """The run learned before the window: the window's mean of the signal is 5 points and two standard errors
    above the first 5 steps before it, or the probe rose beyond its binomial noise since its first eval."""
    first = [v for s, v in w.log.series(w.signal)[:5] if s < w.steps[0]]
    win = [v for _, v in w.pts]
    if len(first) >= 3 and len(win) >= 3:
        gain = _mean(win) - _mean(first)
        se = math.sqrt(statistics.variance(first) / len(first) + statistics.variance(win) / len(win))
        if gain > 0.05 and gain > 2 * se:
            return True
    key = probe_key(w.log, w.th)
    evals = w.log.series(key) if key else []
    if len(evals) >= 2:
        p0 = evals[0][1]  # 2 standard errors of one eval at p0; a difference of two evals has sqrt(2) of that
        return evals[-1][1] - p0 > drop_threshold(p0, p0, w.th.probe_size) * math.sqrt(2)
    return False


def flat_learning(w: Window) -> Finding:
    """The training signal's fitted trend over the window is neither significant nor 5 points."""
    if len(w.pts) < 10:
        return f"flat learning ({w.signal}: {len(w.pts)} of 10 steps)"
    slope, se = trend(w.pts)
    if abs(slope / se) >= 2 or abs(slope * (w.steps[-1] - w.steps[0])) >= 0.05:
        return None
    if learned_before(w):
        return None  # a plateau after learning, not a run that does not learn
    ev = f"{w.signal} {fmt(w.pts[0][1])} -> {fmt(w.pts[-1][1])} over {w.span} (slope {fmt(slope)}/step +- {fmt(se)})"
    if w.kl:
        ev += f"; |kl| median {fmt(statistics.median(w.kl))}"
    if w.ent:
        ev += f"; entropy {fmt(w.ent[0])} -> {fmt(w.ent[-1])}"
    return _playbook("flat learning", ev)


def instability(w: Window) -> Finding:
    """The signal falls significantly while the KL spikes or the entropy drops."""
    slope, se = trend(w.pts)
    if len(w.pts) < 6 or slope / se >= -2:
        return None
    kl, ent = w.kl, w.ent
    kl_spike = len(kl) >= 5 and max(kl) > 5 * statistics.median(kl) and max(kl) > 1e-3
    ent_drop = len(ent) >= 6 and _mean(ent[-3:]) < 0.7 * _mean(ent[:3])
    if not (kl_spike or ent_drop):
        return None
    ev = f"{w.signal} slope {fmt(slope)}/step over {w.span}"
    ev += f"; kl max {fmt(max(kl))} vs median {fmt(statistics.median(kl))}" if kl_spike else ""
    ev += f"; entropy {fmt(_mean(ent[:3]))} -> {fmt(_mean(ent[-3:]))}" if ent_drop else ""
    return _playbook("instability", ev)


def reward_hacking(w: Window) -> Finding:
    """The training signal rises significantly while the held-out probe's fitted change stays within noise."""
    key = probe_key(w.log, w.th)
    if not key:
        return "reward hacking (no eval results)"
    evals, train_all = w.log.series(key), w.log.series(w.signal)
    if len(evals) < 4 or len(train_all) < 10:
        return None
    t_slope, t_se = trend(train_all)
    t_change = t_slope * (train_all[-1][0] - train_all[0][0])
    e_slope, _ = trend(evals)
    e_span = evals[-1][0] - evals[0][0]
    e_mean = _values_mean(evals)
    sxx = sum((s - _mean([x for x, _ in evals])) ** 2 for s, _ in evals)
    gain_se = math.sqrt(max(e_mean * (1 - e_mean), 1 / w.th.probe_size) / w.th.probe_size / sxx) * e_span
    if not (t_slope / t_se > 2 and t_change > 0.03 and e_slope * e_span <= 0.5 * gain_se):
        return None
    ev = (
        f"{w.signal} up {fmt(train_all[0][1])} -> {fmt(train_all[-1][1])} (slope {fmt(t_slope)}/step, "
        f"t={t_slope / t_se:.1f}) while {key} fitted change over steps {evals[0][0]}-{evals[-1][0]} is "
        f"{e_slope * e_span * 100:+.1f}pp (binomial SE {gain_se * 100:.1f}pp; {len(evals)} evals "
        f"{evals[0][1]:.1%} ... {evals[-1][1]:.1%})"
    )
    return _playbook("reward hacking", ev)


def loss_grad_spikes(w: Window) -> Finding:
    """Gradient-norm or loss spikes, joined with the spike log; escalating peaks are called out."""
    sp_steps = spike_steps(w.log, w.spikes, w.th)
    if not sp_steps:
        return None if w.log.key_for("grad_norm") or w.spikes else "loss/grad spikes (grad_norm)"
    ev = "; ".join(_spike_text(s, w.log, w.spikes) for s in sp_steps[:5])
    if len(sp_steps) > 5:
        ev += f"; ... {len(sp_steps) - 5} more"
    peaks = [v for s, v in w.log.series("grad_norm") if s in sp_steps]
    if len(peaks) >= 3 and peaks[-3] < peaks[-2] < peaks[-1]:
        ev += f"; spike grad norms escalating ({', '.join(fmt(p) for p in peaks[-3:])}): policy drifting into unstable regions"
    return _playbook("loss/grad spikes", ev)


@reads("response_length", "length collapse")
def length_collapse(w: Window, lengths: Series) -> Finding:
    """The last 3 steps' mean response length is below 60% of its earlier 3-step peak."""
    if len(lengths) < 6:
        return None
    vals = [v for _, v in lengths]
    roll = [_mean(vals[i : i + 3]) for i in range(len(vals) - 2)]
    peak, recent = max(roll[:-1]), roll[-1]
    if recent >= 0.6 * peak:
        return None
    ev = f"mean response_length {fmt(peak)} (peak, 3-step mean) -> {fmt(recent)} (last 3 steps)"
    if w.ent:
        ev += f"; entropy {fmt(w.ent[0])} -> {fmt(w.ent[-1])}"
    return _playbook("length collapse", ev)


@reads("truncated", "high truncation")
def high_truncation(w: Window, trunc: Series) -> Finding:
    """More than 70% of responses truncated over the last 5 steps."""
    recent = _values_mean(trunc[-5:])
    if recent <= 0.7:
        return None
    ev = f"{w.log.key_for('truncated')} {recent:.0%} over the last {min(5, len(trunc))} steps"
    return _playbook("high truncation", ev)


@reads("entropy", "entropy collapse")
def entropy_collapse(w: Window, ent_all: Series) -> Finding:
    """Entropy of the last 3 steps below half of the first 3 (or below 1 nat from above it, by 20%)."""
    if len(ent_all) < 6:
        return None
    first, recent = _values_mean(ent_all[:3]), _values_mean(ent_all[-3:])
    if not (recent < 0.5 * first or (recent < 1.0 <= first and recent < 0.8 * first)):
        return None
    ev = f"{w.log.key_for('entropy')} {fmt(first)} (first 3 steps) -> {fmt(recent)} (last 3 steps)"
    p10 = w.log.series("entropy_p10")
    if len(p10) >= 6:
        ev += f"; entropy_p10 {fmt(_values_mean(p10[:3]))} -> {fmt(_values_mean(p10[-3:]))}"
    return _playbook("entropy collapse", ev)


@reads("uniform_group_share", "uniform groups")
def uniform_groups(w: Window, pts: Series) -> Finding:
    """Over half the prompt groups uniform (zero advantage) at each of the last 5 steps."""
    recent = pts[-w.th.uniform_steps :]
    if len(recent) < w.th.uniform_steps or min(v for _, v in recent) <= w.th.uniform_share_warn:
        return None
    ev = f"uniform_group_share {', '.join(f'{v:.0%}' for _, v in recent)} at steps {recent[0][0]}-{recent[-1][0]}"
    row = w.log.records.get(recent[-1][0], {})
    parts = [f"{label} {row[k]:.0%}" for label, name in (("all right", "groups_all_correct"),
             ("all wrong", "groups_all_wrong"), ("of the tokens", "uniform_group_token_share"))
             if (k := w.log.key_for(name)) and row.get(k) is not None]  # fmt: skip
    if parts:
        ev += f" ({', '.join(parts)} at step {recent[-1][0]})"
    return _playbook("uniform groups", ev)


# ---------------------------------------------------------------- the guide's named thresholds


GUIDE = "thresholds"
GUIDE_ACTIONS = {
    "boxed": "Format compliance below the guide's 90%: check truncation (a cut-off answer has no box) and the "
    "prompt's instruction; below 95% the guide's SFT decision applies (bash train_sft.sh).",
    "ratios": "Tokens where the policy moved far from the rollout policy: tighten eps_clip (0.2 -> 0.1), keep "
    "the log-ratio clamp, lower the LR; the spike log names the prompts.",
    "ppo_kl": "ppo_kl estimates KL(rollout policy || current policy) on the rollout's own tokens, which cannot "
    "be negative on average: the old log-probs are not those of the policy that sampled (off-policy rollouts, "
    "a weight sync that did not land) or numerics. Check rollout/trainer agreement (vllm_kl); lower the LR.",
    "reward0": "The reward fell to 0 mid-run: a reward function or judge that broke (reward_defaulted, "
    "judge_fail_rate), a data file that changed, or a collapsed policy; read the latest samples_stepN.jsonl.",
}


@reads("has_boxed", "has_boxed steady state")
def boxed_steady_state(w: Window, pts: Series) -> Finding:
    """has_boxed averaged over the last 5 steps, once past the early-check steps, stays above 90%."""
    past = w.log.train_steps()[w.th.early_steps - 1] if len(w.log.train_steps()) >= w.th.early_steps else None
    steady = [(s, v) for s, v in pts if past is not None and s > past]
    if len(steady) < 5:
        return None
    recent = _values_mean(steady[-5:])
    if recent >= w.th.boxed_steady:
        return None
    ev = (f"has_boxed {recent:.0%} over steps {steady[-5][0]}-{steady[-1][0]} (< {w.th.boxed_steady:.0%}); "
          f"{pts[0][1]:.0%} at step {pts[0][0]}")
    return Verdict(GUIDE, "has_boxed >= 90% in steady state", WARN, ev, GUIDE_ACTIONS["boxed"])


def extreme_ratios(w: Window) -> Finding:
    """ratio_max above 10 (an extreme importance ratio) or logratio_raw_max above 5 (before the clamp)."""
    ratio, raw = _window(w.log, "ratio_max", w.th), _window(w.log, "logratio_raw_max", w.th)
    if not ratio and not raw:
        return "extreme log-prob ratios (ratio_max, logratio_raw_max)"
    parts = []
    for name, pts, limit in (("ratio_max", ratio, w.th.ratio_max_warn), ("logratio_raw_max", raw, w.th.logratio_raw_warn)):
        over = [(s, v) for s, v in pts if v > limit]
        if over:
            shown = ", ".join(f"{fmt(v)}@{s}" for s, v in over[:5]) + (f", ... {len(over) - 5} more" if len(over) > 5 else "")
            parts.append(f"{name} > {fmt(limit)} at {len(over)} of {len(pts)} steps ({shown})")
    if not parts:
        return None
    return Verdict(GUIDE, "extreme log-prob ratios", WARN, "; ".join(parts) + f" over {w.span}", GUIDE_ACTIONS["ratios"])


def negative_ppo_kl(w: Window) -> Finding:
    """ppo_kl negative at 70% of the last 10 steps with a mean below -negative_kl_tol."""
    pts = _window(w.log, "ppo_kl", w.th)[-10:]
    if not pts:
        return "negative ppo_kl (ppo_kl)"
    vals = [v for _, v in pts]
    neg = negative_share(vals, w.th.negative_kl_tol)
    if neg is None:
        return None
    ev = f"ppo_kl negative at {neg:.0%} of steps {pts[0][0]}-{pts[-1][0]} (mean {fmt(_mean(vals))})"
    return Verdict(GUIDE, "ppo_kl not negative", WARN, ev, GUIDE_ACTIONS["ppo_kl"])


@reads("reward_mean", "reward drops to zero")
def reward_drops_to_zero(w: Window, pts: Series) -> Finding:
    """The reward at 0 for `reward_zero_steps` consecutive steps after it was above 0: FAIL while it lasts."""
    runs, start = [], None  # (first, last) index of each run of zero-reward steps after a non-zero one
    seen_reward = False
    for i, (_, v) in enumerate(pts):
        if abs(v) <= 1e-6 and seen_reward:
            start = i if start is None else start
        else:
            if start is not None:
                runs.append((start, i - 1))
            start, seen_reward = None, seen_reward or abs(v) > 1e-6
    if start is not None:
        runs.append((start, len(pts) - 1))
    runs = [(a, b) for a, b in runs if b - a + 1 >= w.th.reward_zero_steps]
    if not runs:
        return None
    a, b = runs[-1]
    before = [v for _, v in pts[max(0, a - 5) : a]]
    ongoing = b == len(pts) - 1
    ev = (f"{w.log.key_for('reward_mean')} 0 at steps {pts[a][0]}-{pts[b][0]}"
          f"{' (to the latest step)' if ongoing else ''}, after a mean of {fmt(_mean(before))} over the "
          f"{len(before)} steps before")
    return Verdict(GUIDE, "reward not dropping to 0", FAIL if ongoing else WARN, ev, GUIDE_ACTIONS["reward0"])


GUIDE_RULES = (boxed_steady_state, extreme_ratios, negative_ppo_kl, reward_drops_to_zero)


PLAYBOOK_RULES = (non_finite, flat_learning, instability, reward_hacking, loss_grad_spikes, length_collapse,
                  high_truncation, entropy_collapse, uniform_groups, *GUIDE_RULES)


def playbook(log: MetricsLog, spikes: Sequence[Spike], th: Thresholds) -> list[Verdict]:
    """Match the tuning playbook's scenarios over the last `window` steps; each with evidence and actions."""
    steps = log.train_steps()[-th.window :]
    if len(steps) < 6:
        return [Verdict(PLAY, "playbook diagnosis", INFO, f"{len(steps)} step(s) logged; needs 6")]
    w = Window.of(log, spikes, th)
    findings = [rule(w) for rule in PLAYBOOK_RULES]
    out = [f for f in findings if isinstance(f, Verdict)]
    unchecked = [f for f in findings if isinstance(f, str)]
    if not out:
        out.append(Verdict(PLAY, "playbook diagnosis", PASS, f"no playbook pattern over {w.span}"))
    if unchecked:
        out.append(Verdict(PLAY, "not checked", MISSING, "; ".join(unchecked)))
    return out


# ---------------------------------------------------------------- judge reward


JUDGE_ACTIONS = {
    "fail": "Judge calls are failing (quota, timeouts, malformed replies): those samples get the running-mean "
    "quality, so the quality signal thins out. Lower concurrency / rpm in reward.toml's [judge], raise the quota, "
    "or fall back to REWARD=em.",
    "hacking": "Wrong answers are paid above their group: the policy is learning to please the judge. Use "
    "[judge] mode = \"correct_only\" in reward.toml (no credit for wrong answers), trust the OOD probe, stop early.",
}


def judge_failures(log: MetricsLog, th: Thresholds) -> list[Verdict]:
    """Per-step judge failure rate (failed / asked) against thresholds, and the judge's cost; [] without a judge."""
    g, c = "judge", "judge failure rate"
    pts = log.series("judge_fail_rate")
    if not pts:
        return []
    cost = log.series("judge_cost_step_usd")
    cost_txt = (
        f"; cost ${cost[-1][1]:.2f} at step {cost[-1][0]}, ${sum(v for _, v in cost):.2f} over {len(cost)} steps"
        if cost
        else ""
    )
    recent = [v for _, v in pts[-3:]]
    over = [(s, v) for s, v in _window(log, "judge_fail_rate", th) if v > th.judge_fail_warn]
    if len(recent) == 3 and min(recent) > th.judge_fail_stop:
        ev = f"judge_fail_rate {', '.join(f'{v:.0%}' for v in recent)} at the last 3 steps (> {th.judge_fail_stop:.0%})"
        return [Verdict(g, c, FAIL, ev + cost_txt, JUDGE_ACTIONS["fail"])]
    if over:
        ev = f"judge_fail_rate above {th.judge_fail_warn:.0%} at " + ", ".join(f"step {s} ({v:.0%})" for s, v in over[:6])
        return [Verdict(g, c, WARN, ev + cost_txt, JUDGE_ACTIONS["fail"])]
    ev = f"max {max(v for _, v in pts[-th.window :]):.0%} over the last {min(len(pts), th.window)} steps"
    return [Verdict(g, c, PASS, ev + cost_txt)]


def high_but_wrong(log: MetricsLog, th: Thresholds) -> list[Verdict]:
    """Wrong answers the reward pays above their prompt group (judge-pleasing); meaningful with a judge reward."""
    g, c = "judge", "wrong answers paid above their group"
    pts = _window(log, "reward_high_but_wrong", th)
    if not pts:
        return []
    recent = _values_mean(pts[-5:])
    slope, se = trend(pts)
    rising = len(pts) >= 6 and slope / se > 2 and slope * (pts[-1][0] - pts[0][0]) > 0.03
    ev = f"reward_high_but_wrong {fmt(pts[0][1])} -> {fmt(pts[-1][1])}, last-5 mean {recent:.1%}"
    wrong = log.series("reward_mean_wrong")
    if wrong:
        ev += f"; mean reward of wrong answers {fmt(wrong[0][1])} -> {fmt(wrong[-1][1])}"
    if recent > th.high_but_wrong_warn or rising:
        return [Verdict(g, c, WARN, ev + (" (rising)" if rising else ""), JUDGE_ACTIONS["hacking"])]
    return [Verdict(g, c, PASS, ev)]


def diagnose(log: MetricsLog, spikes: Sequence[Spike] = (), th: Thresholds | None = None) -> list[Verdict]:
    """All verdicts, rollout/trainer agreement first (a FAIL there invalidates every other number)."""
    th = th or Thresholds()
    return [
        agreement(log, th),
        *early_checks(log, th),
        movement(log, th),
        early_stop(log, th),
        *judge_failures(log, th),
        *high_but_wrong(log, th),
        *playbook(log, spikes, th),
    ]
