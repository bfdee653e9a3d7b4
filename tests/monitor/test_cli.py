"""The monitor CLI and its readers on generated logs: --check exit codes, --table, --plot, --follow, corruption."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rft.launch.run_pointer import write_pointer
from rft.monitor import cli
from rft.monitor import logs as metrics_log
from rft.monitor.cli import main
from rft.monitor.logs import ALIASES, JsonlTail, MetricsLog, feed_lines, read_metrics, read_spikes
from rft.provenance import REPO_ROOT as ROOT
from tests.monitor.metric_logs import write_scenario
from tests.support.processes import group


@pytest.mark.parametrize(
    "name,code",
    [("healthy", 0), ("flat", 1), ("spiking", 1), ("hacking", 1), ("collapsing", 1), ("unstable", 1), ("truncating", 1), ("early_stop", 2),
     ("broken_sync", 2), ("early_fail", 2), ("upstream_only", 0), ("corrupted", 2)],
)
def test_check_exit_codes(name, code, tmp_path, capsys):
    d = write_scenario(name, tmp_path / name)
    assert main([str(d), "--check"]) == code
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[1] == "agreement:"  # rollout/trainer agreement always first


def test_early_steps_sets_the_steps_the_early_checks_judge(tmp_path, capsys):
    d = write_scenario("early_fail", tmp_path / "e")
    main([str(d), "--check"])
    assert "FAIL    early-checks: reward_mean not stuck at 0/1: steps 1-6: " in capsys.readouterr().out
    main([str(d), "--check", "--early-steps", "3"])
    assert "FAIL    early-checks: reward_mean not stuck at 0/1: steps 1-3: 0, 0, 0 (stuck at 0)" in capsys.readouterr().out


def test_corrupted_log_is_read_without_crashing(tmp_path):
    log = read_metrics(write_scenario("corrupted", tmp_path / "c"))
    assert log.steps() == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12]  # step 4 garbage, 13 partially written
    assert log.restarts == 1
    assert all(log.records[s]["correctness"] == 0.99 for s in range(8, 13))  # after the restart, last wins
    assert all(log.records[s]["correctness"] != 0.99 for s in (1, 2, 3, 5, 6, 7))
    notes = " ".join(log.notes)
    for needle in (":4: not valid JSON", ":6: not a JSON object", ":7: no global_step", "restart at step 8",
                   ":21: partially written last line"):
        assert needle in notes, needle
    grad = dict(log.series("grad_norm", finite=False))
    assert np.isnan(grad[12]) and 12 not in dict(log.series("grad_norm"))
    assert np.isinf(log.records[12]["policy_loss"])
    assert np.isnan(log.records[12]["eval_ood_pass1"])  # the writer's null


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope"), "--check"]) == 2
    assert "no metrics log" in capsys.readouterr().err


def test_tail_reads_only_complete_lines_and_survives_truncation(tmp_path):
    path = tmp_path / "training_metrics.jsonl"
    path.write_text('{"global_step": 1, "reward": 0.1}\n{"global_step": 2, "rew')
    tail, log = JsonlTail(path), MetricsLog(path=path)
    feed_lines(log, tail.read_new())
    assert log.steps() == [1]
    with open(path, "a") as f:
        f.write('ard": 0.2}\n')
    feed_lines(log, tail.read_new())
    assert log.records[2] == {"reward": 0.2}
    path.write_text('{"global_step": 1, "reward": 0.5}\n')  # rewritten from scratch
    lines = tail.read_new()
    assert tail.resets == 1 and lines[0][1].endswith(":1")


def test_spike_log_restart_and_partial_line(tmp_path):
    path = tmp_path / "spike_log.jsonl"
    rows = [{"global_step": 5, "grad_norm": 80.0, "ratio_max": 9.0}, {"global_step": 9, "grad_norm": 120.0},
            {"global_step": 7, "grad_norm": 60.0, "prompt_hashes": ["ab"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"global_step": 8, "gr')
    spikes, notes = read_spikes(path)
    assert [(s.step, s.grad_norm) for s in spikes] == [(5, 80.0), (7, 60.0)]
    assert spikes[0].stats == {"ratio_max": 9.0} and spikes[1].prompt_hashes == ["ab"]
    assert "partially written" in notes[0]


def test_aliases_use_the_keys_the_patched_trainer_writes():
    """Every display metric maps to a key in rft.train.metrics.KNOWN_KEYS, and both sides name the same files."""
    from rft.train import metrics  # imports torch: fine in a test, never in the monitor itself

    for name, keys in ALIASES.items():
        assert set(metrics.KNOWN_KEYS) & set(keys), (name, keys)
    assert metrics.METRICS_FILE == metrics_log.METRICS_FILE and metrics.SPIKE_FILE == metrics_log.SPIKE_FILE


def test_table_is_markdown_with_every_step_and_a_summary(tmp_path, capsys):
    d = write_scenario("hacking", tmp_path / "h")
    assert main([str(d), "--table"]) == 0
    out = capsys.readouterr().out
    steps, times = out.split("| step | generate |")  # the step table and summary, then the time table

    def step_rows(text):
        return [line for line in text.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]

    assert len(step_rows(steps)) == 40 and len(step_rows(times)) == 40
    assert out.splitlines()[0].startswith("| step | reward | correct | boxed | grad_norm |")
    assert "| correct |" in out and "↑" in out and "| WARN | reward hacking |" in out
    assert "ood_pass1" in out


def test_table_lists_missing_metrics(tmp_path, capsys):
    main([str(write_scenario("upstream_only", tmp_path / "u")), "--table", "--last", "3"])
    out = capsys.readouterr().out
    assert "Missing from the log: `correctness`, `has_boxed`, `grad_norm`" in out


def test_plot_writes_a_nontrivial_png(tmp_path):
    import matplotlib.image as mpimg

    d = write_scenario("spiking", tmp_path / "s")
    out = tmp_path / "dash.png"
    assert main([str(d), "--plot", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000
    img = mpimg.imread(out)
    assert img.shape[0] > 400 and img.shape[1] > 800
    assert float(img[..., :3].std()) > 0.05  # curves, not a blank canvas
    red = (img[..., 0] > 0.8) & (img[..., 1] < 0.5) & (img[..., 2] < 0.5)
    assert red.sum() > 200  # spike markers drawn


def test_default_view_prints_tables(tmp_path):
    d = write_scenario("healthy", tmp_path / "h")
    res = subprocess.run([sys.executable, "-m", "rft.monitor", str(d)], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "trend" in res.stdout and "OOD probe early stopping" in res.stdout


def test_monitor_sh_check_passes_the_exit_code(tmp_path):
    d = write_scenario("early_stop", tmp_path / "e")
    res = subprocess.run(["bash", str(ROOT / "monitor.sh"), "--check"], capture_output=True, text=True,
                         env={**os.environ, "METRICS_LOG_DIR": str(d)}, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "STOP" in res.stdout and "global_step20" in res.stdout


def test_follow_shows_lines_as_they_arrive(tmp_path):
    path = tmp_path / "training_metrics.jsonl"
    path.write_text(json.dumps({"global_step": 1, "reward": 0.3, "grad_norm": 1.0}) + "\n")
    with group(
        [sys.executable, "-m", "rft.monitor", str(tmp_path), "--follow", "--interval", "0.2", "--disk", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"},
    ) as proc:
        time.sleep(3)
        with open(path, "a") as f:
            f.write(json.dumps({"global_step": 2, "reward": 0.35, "grad_norm": 1.1}) + "\n")
            f.write(json.dumps({"global_step": 3, "reward": 0.4, "grad_norm": 1.2}) + "\n")
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "3 steps" in out and "0.400" in out and "GiB free" in out


def test_live_view_shows_gpu_usage_and_free_disk(tmp_path, monkeypatch):
    """GPU line from nvidia-smi (a stand-in script here: no GPU on CI), free disk of the save paths."""
    from rft.monitor.cli import disk_free, gpu_samples, gpu_usage

    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))
    assert gpu_usage(gpu_samples()) == "GPU: n/a (no nvidia-smi)"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, 97, 70123, 81559'\necho '1, 3, 1024, 81559'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert gpu_usage(gpu_samples()) == "GPU 0:97% 68/80G  1:3% 1/80G"
    line = disk_free([str(tmp_path), str(tmp_path / "not-yet")])
    assert line.startswith(f"disk {tmp_path}: ") and "GiB free" in line and "not-yet" not in line


def test_gpu_watch_memory_and_deadlock():
    """The guide's GPU signs over a sequence of nvidia-smi samples: > 95% memory now; all GPUs idle 5 minutes."""
    from rft.monitor.cli import GpuWatch, parse_nvidia_smi

    busy = parse_nvidia_smi("0, 100, 60000, 81559\n1, 0, 30000, 81559\n")  # one group works, the other waits
    full = parse_nvidia_smi("0, 100, 78500, 81559\n1, 0, 30000, 81559\n")  # 96% on GPU 0
    idle = parse_nvidia_smi("0, 0, 60000, 81559\n1, 0, 30000, 81559\n")
    assert parse_nvidia_smi("0, [N/A], 1, 2\ngarbage\n") == []
    watch = GpuWatch()
    assert watch.update(0, busy) == []
    alerts = watch.update(5, full)
    assert len(alerts) == 1 and alerts[0].startswith("GPU 0 memory 96% > 95%: OOM imminent")
    # All idle: silent for the first 5 minutes, then a deadlock warning until any GPU works again.
    assert [watch.update(t, idle) for t in (10, 100, 309)] == [[], [], []]
    late = watch.update(310, idle)
    assert len(late) == 1 and "every GPU at 0% utilisation for 5 min: possible deadlock" in late[0]
    assert watch.update(320, busy) == [] and watch.update(330, idle) == []  # the idle clock restarted
    assert watch.update(700, idle) and GpuWatch().update(0, "no nvidia-smi") == []
    # One group idle for an hour while the other works is the normal 8-GPU split, not a deadlock.
    quiet = GpuWatch()
    assert all(quiet.update(t, busy) == [] for t in range(0, 3600, 60))


def _launched(root: Path, name: str, metrics: Path, age: float, scenario: str = "healthy") -> Path:
    """A run as a launch leaves it: its metrics (written `age` s ago) and the pointer runs/NAME/run.json."""
    write_scenario(scenario, metrics)
    pointer = write_pointer(root, name, {"METRICS_LOG_DIR": str(metrics)},
                            ["--ckpt_path", str(metrics.parent / "ckpt"), "--save_path", str(metrics.parent / "out")])
    stamp = time.time() - age
    for f in [*metrics.iterdir(), pointer]:
        os.utime(f, (stamp, stamp))
    return metrics


def test_monitor_finds_the_latest_run_or_the_one_named(tmp_path, monkeypatch, capsys):
    """No directory, no METRICS_LOG_DIR: the run of this checkout that wrote last (runs/*/run.json); --run NAME:
    that one, its checkpoint directory with it; an unknown name lists the runs there are."""
    root = tmp_path / "rft"
    monkeypatch.setattr(cli, "REPO_ROOT", root)
    monkeypatch.delenv("METRICS_LOG_DIR", raising=False)
    monkeypatch.delenv("CKPT_PATH", raising=False)
    with pytest.raises(SystemExit) as none:
        cli.main(["--check"])
    assert none.value.code == 2 and f"no run launched from this checkout yet ({root}/runs/*/run.json)" in (
        capsys.readouterr().err)
    a29 = _launched(root, "a29", tmp_path / "scratch" / "rft_metrics" / "a29", age=600, scenario="early_stop")
    cpu = _launched(root, "cpu-grpo-qwen2", root / "runs" / "cpu-grpo-qwen2" / "metrics", age=60)
    assert cli.main(["--check"]) == 0
    assert f"monitor: run cpu-grpo-qwen2 (the latest of this checkout): {cpu}" in capsys.readouterr().err
    assert cli.main(["--check", "--run", "a29"]) == 2
    out = capsys.readouterr()
    assert f"monitor: run a29: {a29}" in out.err and "STOP" in out.out
    with pytest.raises(SystemExit):
        cli.main(["--check", "--run", "a30"])
    err = capsys.readouterr().err
    assert "no run 'a30'" in err and "runs of this checkout: a29, cpu-grpo-qwen2)" in err


def _check_edited_healthy(tmp_path, edit, code: int, needle: str) -> subprocess.CompletedProcess:
    """`monitor.sh --check` over the healthy run with `edit` applied to each step row: asserts the exit code and
    `needle` in the rollout/trainer agreement line; returns the run."""
    d = write_scenario("healthy", tmp_path / "h")
    path = d / "training_metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        if "response_length" in row:
            edit(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = subprocess.run(["bash", str(ROOT / "monitor.sh"), "--check"], capture_output=True, text=True,
                         env={**os.environ, "METRICS_LOG_DIR": str(d), "COLUMNS": "250", "PYTHON": sys.executable},
                         timeout=60)
    assert res.returncode == code, res.stdout + res.stderr
    line = next(ln for ln in res.stdout.splitlines() if "rollout/trainer agreement" in ln)
    assert needle in line, res.stdout
    return res


@pytest.mark.parametrize(("share", "code", "needle"), [(0.0, 0, "rollout_logprob_repaired at most 0.0%"),
                                                       (0.05, 1, "WARN"), (1.0, 2, "FAIL")])
def test_monitor_sh_check_does_not_pass_repaired_rollout_logprobs(share, code, needle, tmp_path):
    """The healthy run with a share of its vLLM log-probs repaired: 5% warns, all of them (an engine returning
    NaN everywhere, where vllm_kl reads as perfect agreement) fails the agreement check."""
    def edit(row: dict) -> None:
        row["rollout_logprob_repaired"] = share * row["response_length"]
        row["vllm_kl"] = 0.0 if share == 1.0 else row.get("vllm_kl", 0.0)

    res = _check_edited_healthy(tmp_path, edit, code, needle)
    if share:
        assert "rollout log-probs repaired" in res.stdout


@pytest.mark.parametrize(("out_of_band", "code", "needle"), [(0.01, 0, "mismatch_out_of_band mean 0.01"),
                                                             (0.1, 1, "WARN"), (0.5, 2, "FAIL")])
def test_monitor_sh_check_does_not_pass_a_high_out_of_band_share(out_of_band, code, needle, tmp_path):
    """The healthy run (vllm_kl near 0, which gaps of both signs can give) with a share of its tokens' rollout/trainer
    ratio outside [0.9, 1.1]: 10% warns, half of them fails the agreement check."""
    def edit(row: dict) -> None:
        row.update(mismatch_out_of_band=out_of_band, mismatch_kl=1e-3, mismatch_is_clipped=0.0, mismatch_abs_max=0.4)

    res = _check_edited_healthy(tmp_path, edit, code, needle)
    if code:
        assert "tokens with ratio outside [0.9, 1.1]" in res.stdout


@pytest.mark.parametrize(("late", "code", "needle"), [
    (1.0, 0, "mismatch_kl mean 0.03 over steps 21-40 (its floor 0.03"),
    (2.0, 2, "mismatch KL (k3) grew past the run's floor: mismatch_kl mean 0.06 over steps 21-40 (its floor 0.03"),
])
def test_check_judges_mismatch_kl_against_the_runs_floor(late, code, needle, tmp_path):
    """A gap at 0.03 (twice the absolute line) from step 1: flat passes, doubling from step 21 fails; the
    per-position bins are shown."""
    def edit(row: dict) -> None:
        s = row["global_step"]
        kl = 0.03 * (late if s > 20 else 1.0) * (1 + 0.02 * ((s * 7) % 5 - 2))
        row.update(mismatch_kl=kl, mismatch_out_of_band=0.01, mismatch_is_clipped=0.0, mismatch_abs_max=0.4,
                   mismatch_kl_pos0_512=kl / 2, mismatch_kl_pos512_2048=kl, mismatch_kl_pos2048_=kl * 1.5)

    res = _check_edited_healthy(tmp_path, edit, code, needle)
    assert "by response position: 0-512 " in res.stdout
