"""One-PNG dashboard of a run: main curves, held-out eval points and spikes marked (matplotlib, Agg)."""

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


def plot_dashboard(
    log: MetricsLog, spikes: Sequence[Spike], out_path: str | os.PathLike, th: Thresholds | None = None
) -> None:
    """Render the dashboard to `out_path` (PNG, written atomically)."""
    th = th or Thresholds()
    ncols = -(-len(PANELS) // 2)
    fig, axes = plt.subplots(2, ncols, figsize=(5 * ncols, 7.5), sharex=True, squeeze=False)
    marks = spike_steps(log, spikes, th)
    key = probe_key(log, th)
    for ax in axes.flat[len(PANELS) :]:
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
