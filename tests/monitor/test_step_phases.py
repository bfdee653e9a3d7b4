"""The time table, the idle shares, the "where the step goes" panel and predicted vs measured, on generated logs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from rft.monitor.cli import main
from rft.monitor.logs import MetricsLog, read_metrics
from rft.monitor.step_phases import (
    OTHER,
    PREDICTED_KEY,
    comparison,
    idle_shares,
    markdown_time_table,
    mean_seconds,
    phase_seconds,
    predicted_from_record,
    predicted_vs_measured,
    rich_time_table,
    timed_steps,
)
from rft.train.step_timer import PHASES, STEP_KEY
from tests.monitor.metric_logs import step_times

STEPS = 12


def write_log(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "training_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture
def run_dir(tmp_path) -> Path:
    rows = [{"global_step": s, "reward": 0.5, **step_times(s)} for s in range(1, STEPS + 1)]
    rows.insert(4, {"global_step": 4, "event": "eval", "eval_ood_pass1": 0.3})  # an eval line: no time keys
    return write_log(tmp_path / "metrics", rows)


def test_phase_seconds_other_and_idle_shares(run_dir):
    log = read_metrics(run_dir)
    assert timed_steps(log) == list(range(1, STEPS + 1))
    sec = phase_seconds(log, 5)
    assert sec["save"] == 40.0 and sec[OTHER] == pytest.approx(3.0) and sec["step"] == log.records[5][STEP_KEY]
    idle = idle_shares(sec)
    assert idle["vllm"] == pytest.approx((sec["step"] - sec["generate"]) / sec["step"])
    assert idle["trainer"] == pytest.approx((sec["generate"] + sec["reward"]) / sec["step"])
    assert math.isnan(idle_shares({"step": 0.0, "generate": 0.0, "reward": 0.0})["vllm"])


def test_rich_table_has_the_last_steps_their_mean_and_shares(run_dir):
    log = read_metrics(run_dir)
    table = rich_time_table(log, last=4)
    console = Console(width=250, record=True)
    console.print(table)
    text = console.export_text()
    first = [line.split("│")[1].strip() for line in text.splitlines() if line.count("│") > 3]
    assert first == ["9", "10", "11", "12", "mean 4", "share"]
    mean = mean_seconds(log, [9, 10, 11, 12])
    assert f"{mean['generate']:.1f}" in text and f"{mean['generate'] / mean['step']:.0%}" in text
    assert "generated tok/s 1500" in text and "p90 4096" in text
    assert rich_time_table(MetricsLog()) is None


def test_markdown_table_every_step_or_a_note_without_time_keys(run_dir, tmp_path):
    md = markdown_time_table(read_metrics(run_dir))
    lines = md.splitlines()
    assert lines[0].startswith("| step | generate | reward | logprob | train | sync | eval | save | other | total |")
    assert sum(1 for line in lines if line.startswith("| ") and line.split("|")[1].strip().isdigit()) == STEPS
    assert any(line.startswith("| share |") for line in lines)
    old = write_log(tmp_path / "old", [{"global_step": 1, "reward": 0.1}])
    assert "No `time_*_s` keys" in markdown_time_table(read_metrics(old))


def test_predicted_vs_measured_ratio_per_phase():
    rows = predicted_vs_measured({"generate": 100.0, "train": 0.0, "warmup": 5.0},
                                 {"generate": 150.0, "train": 20.0, "step": 200.0})
    assert rows[0] == ("generate", 100.0, 150.0, 1.5)
    assert rows[1][0] == "train" and math.isnan(rows[1][3])  # no ratio against a zero prediction
    assert len(rows) == 2  # a phase the run does not measure is left out


def test_the_cli_reads_the_prediction_from_the_run_record(run_dir, capsys):
    predicted = {"generate": 150.0, "reward": 1.0, "logprob": 80.0, "train": 400.0, "sync": 9.0, "step": 650.0}
    assert main([str(run_dir), "--table"]) == 0
    assert "Predicted vs measured" not in capsys.readouterr().out  # no record yet
    record = run_dir / "run_record_20261127T060000Z.json"
    record.write_text(json.dumps({"profile": "gpu", PREDICTED_KEY: predicted}))
    assert predicted_from_record(record) == predicted
    assert main([str(run_dir), "--table"]) == 0
    out = capsys.readouterr().out
    assert "where the step goes" not in out and "| share |" in out  # the markdown time table
    log = read_metrics(run_dir)
    mean = mean_seconds(log, timed_steps(log)[-8:])
    assert f"| train | 400.0 | {mean['train']:.1f} | {mean['train'] / 400:.2f} |" in out
    assert comparison(log, None) is None
    record.write_text(json.dumps({PREDICTED_KEY: "fast"}))
    assert predicted_from_record(record) is None


def test_default_view_shows_the_time_table(run_dir, capsys):
    assert main([str(run_dir)]) == 0
    assert "where the step goes" in capsys.readouterr().out


def test_panel_stacks_every_phase_and_draws_both_idle_shares(run_dir):
    import matplotlib.pyplot as plt

    from rft.monitor.dashboard import plot_step_phases

    log = read_metrics(run_dir)
    fig, ax = plt.subplots()
    assert plot_step_phases(ax, log)
    drawn = [p for p in PHASES if any(phase_seconds(log, s)[p] for s in timed_steps(log))] + [OTHER]
    assert len(ax.patches) == len(drawn) * STEPS  # eval never ran: no empty layer
    tops = {}
    for bar in ax.patches:
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert all(tops[s] == pytest.approx(log.records[s][STEP_KEY]) for s in timed_steps(log))
    share = [a for a in fig.axes if a is not ax][0]
    vllm, trainer = (line.get_ydata() for line in share.get_lines())
    assert list(vllm) == pytest.approx([idle_shares(phase_seconds(log, s))["vllm"] for s in timed_steps(log)])
    assert list(trainer) == pytest.approx([idle_shares(phase_seconds(log, s))["trainer"] for s in timed_steps(log)])
    fig2, ax2 = plt.subplots()
    assert not plot_step_phases(ax2, MetricsLog())
    plt.close(fig)
    plt.close(fig2)
