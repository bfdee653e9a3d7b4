"""One-PNG dashboard of a run: main curves, held-out eval points and spikes marked, and where each step's time
goes (matplotlib, Agg)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from io import BytesIO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rft.io import atomic_write_bytes  # noqa: E402
from rft.monitor.diagnosis import Thresholds, probe_key, spike_steps  # noqa: E402
from rft.monitor.logs import MetricsLog, Spike  # noqa: E402
from rft.monitor.step_phases import OTHER, idle_shares, phase_seconds, timed_steps  # noqa: E402
from rft.train.step_timer import PHASES  # noqa: E402

# (panel title, [(display name, label)], y scale)
PANELS: tuple[tuple[str, tuple[tuple[str, str], ...], str], ...] = (
    (
        "reward / correctness / format",
        (("reward_mean", "reward"), ("correctness", "correctness"), ("has_boxed", "has_boxed")),
        "linear",
    ),
    ("grad_norm (pre-clip)", (("grad_norm", "grad_norm"),), "log"),
    ("KL to reference / rollout gap", (("kl", "kl"), ("vllm_kl", "vllm_kl"), ("ppo_kl", "ppo_kl")), "symlog"),
    (
        "rollout/trainer gap (every token)",
        (("mismatch_kl", "mismatch_kl (k3)"), ("mismatch_out_of_band", "ratio outside [0.9, 1.1]"),
         ("mismatch_is_clipped", "IS weight truncated")),
        "symlog",
    ),
    ("entropy", (("entropy", "entropy"),), "linear"),
    ("response length", (("response_length", "response_length"),), "linear"),
    ("truncation / clipping", (("truncated", "truncated"), ("ppo_clip_ratio", "ppo_clip_ratio")), "linear"),
    (
        "groups that teach nothing",
        (("uniform_group_share", "uniform groups"), ("uniform_group_token_share", "their token share"),
         ("nonzero_adv_share", "samples with advantage")),
        "linear",
    ),
)


STEP_PANEL = "where the step goes"


def plot_step_phases(ax, log: MetricsLog) -> bool:
    """Stacked seconds per phase of every timed step and, on a second axis, the share of the step the vLLM
    devices (step - generate) and the trainer devices (generate + reward) wait; False without time keys."""
    steps = timed_steps(log)
    ax.set_title(STEP_PANEL, fontsize=10)
    if not steps:
        ax.text(0.01, 0.02, "missing: time_*_s", transform=ax.transAxes, fontsize=7, color="gray")
        return False
    rows = [phase_seconds(log, s) for s in steps]
    bottom = [0.0] * len(steps)
    for phase in (*PHASES, OTHER):
        heights = [r[phase] for r in rows]
        if any(heights):
            ax.bar(steps, heights, bottom=bottom, width=0.9, label=phase)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("seconds", fontsize=8)
    ax.set_ylim(0, 1.45 * max(bottom))  # headroom for the legend
    share = ax.twinx()
    idle = [idle_shares(r) for r in rows]
    share.plot(steps, [i["vllm"] for i in idle], color="black", lw=1.2, ls="--", label="vLLM devices idle")
    share.plot(steps, [i["trainer"] for i in idle], color="gray", lw=1.2, ls=":", label="trainer devices idle")
    share.set_ylim(0, 1.05)
    share.set_ylabel("share of the step idle", fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = share.get_legend_handles_labels()
    ax.legend(handles + more, labels + more_labels, fontsize=6, loc="upper left", ncol=2)
    return True


def plot_dashboard(
    log: MetricsLog, spikes: Sequence[Spike], out_path: str | os.PathLike, th: Thresholds | None = None
) -> None:
    """Render the dashboard to `out_path` (PNG, written atomically)."""
    th = th or Thresholds()
    ncols = -(-(len(PANELS) + 1) // 2)
    fig, axes = plt.subplots(2, ncols, figsize=(5 * ncols, 7.5), sharex=True, squeeze=False)
    marks = spike_steps(log, spikes, th)
    key = probe_key(log, th)
    plot_step_phases(axes.flat[len(PANELS)], log)
    axes.flat[len(PANELS)].grid(alpha=0.3)
    for ax in axes.flat[len(PANELS) + 1 :]:
        ax.set_visible(False)
    for ax, (title, metrics, scale) in zip(axes.flat, PANELS, strict=False):
        drawn, missing = 0, []
        for name, label in metrics:
            pts = log.series(name)
            if not pts:
                missing.append(name)
                continue
            xs, ys = zip(*pts, strict=True)
            ax.plot(
                xs,
                ys,
                lw=1.4,
                label=f"{label} ({log.key_for(name)})" if log.key_for(name) != label else label,
            )
            drawn += 1
        if title.startswith("reward"):
            for ek in log.eval_keys():
                pts = log.series(ek)
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    style = (
                        dict(marker="D", ms=6, lw=1.2)
                        if ek == key
                        else dict(marker="o", ms=4, lw=0.8, ls="--")
                    )
                    ax.plot(xs, ys, label=f"{ek}" + (" (probe)" if ek == key else ""), **style)
                    drawn += 1
        for s in marks:
            ax.axvline(s, color="red", alpha=0.35, lw=1, ls=":")
        if drawn:
            if scale == "symlog":
                ax.set_yscale("symlog", linthresh=1e-4)
            elif scale == "log" and all(v > 0 for n, _ in metrics for _, v in log.series(n)):
                ax.set_yscale("log")
            ax.legend(fontsize=7, loc="best")
        if missing:
            ax.text(
                0.01, 0.02, "missing: " + ", ".join(missing), transform=ax.transAxes, fontsize=7, color="gray"
            )
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("global step")
    steps = log.steps()
    span = f"steps {steps[0]}-{steps[-1]}" if steps else "no steps"
    spike_txt = f"; spikes (red dotted): {', '.join(map(str, marks[:10]))}" if marks else ""
    fig.suptitle(f"{log.path.parent.name if log.path else 'run'}: {span}{spike_txt}", fontsize=11)
    fig.tight_layout()
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    atomic_write_bytes(out_path, buf.getvalue())
    os.chmod(out_path, 0o644)  # mkstemp's 0600 would make a committed image unreadable to others
