"""--end-on-stop: the decision as plain functions, then `monitor.sh --follow --end-on-stop` ending a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.monitor.diagnosis import STOP, WARN, Verdict
from rft.monitor.stop import (
    StopError,
    StopPlan,
    driver_pid,
    end_run,
    ignores_sigint,
    latest_checkpoint,
    stop_verdict,
)
from rft.provenance import REPO_ROOT as ROOT
from tests.monitor.metric_logs import write_scenario
from tests.support.processes import group, start_group, stop_group

STOPV = Verdict("early stop", "early-stop", STOP, "eval_ood_pass1 fell twice", "stop")


def test_plan_runs_then_waits_for_a_checkpoint_at_or_after_the_stop_step():
    plan = StopPlan()
    assert plan.update(None, 30, 30) == "run"
    assert plan.update(Verdict("g", "c", WARN, "e"), 31, 30) == "run"  # only STOP acts
    assert stop_verdict([Verdict("g", "c", WARN, "e"), STOPV]) is STOPV
    assert plan.update(STOPV, 35, 30) == "wait" and plan.seen_at == 35
    assert plan.update(None, 36, 30) == "wait"  # once seen, the STOP holds even if a later step hides it
    assert plan.update(STOPV, 37, 35) == "end" and plan.reason == "early-stop: eval_ood_pass1 fell twice"


def test_latest_checkpoint_prefers_what_a_relaunch_resumes_from(tmp_path):
    assert latest_checkpoint(tmp_path / "none") is None
    hf = tmp_path / "global_step12_hf"
    hf.mkdir()
    (hf / "adapter_config.json").write_text("{}")
    (hf / "adapter_model.bin").write_bytes(b"0")
    assert latest_checkpoint(tmp_path) == 12  # adapters only (--disable_ds_ckpt)
    (tmp_path / "_actor").mkdir()
    (tmp_path / "_actor" / "latest").write_text("global_step8\n")
    assert latest_checkpoint(tmp_path) == 8


def test_driver_pid_is_checked_before_anything_is_signalled():
    with pytest.raises(StopError, match="no driver_pid"):
        driver_pid({})
    with pytest.raises(StopError, match="not the run's driver"):
        driver_pid({"driver_pid": os.getpid()})  # pytest: not a training driver
    with pytest.raises(StopError, match="not here"):
        driver_pid({"driver_pid": os.getpid(), "host": "another-host"})


def test_follow_end_on_stop_waits_for_the_checkpoint_then_ends_the_driver(tmp_path, request):
    metrics = write_scenario("early_stop", tmp_path / "metrics")  # STOP from step 35 on; steps 1-40
    ckpt = tmp_path / "ckpt"
    (ckpt / "_actor").mkdir(parents=True)
    (ckpt / "_actor" / "latest").write_text("global_step35")
    driver = start_group([sys.executable, "-c", "import time; time.sleep(300)", "openrlhf.cli.train_ppo_ray"])
    request.addfinalizer(lambda: stop_group(driver))
    record = metrics / "run_record_20261123T000000Z.json"
    import socket

    record.write_text(json.dumps({"command": ["x"], "driver_pid": driver.pid, "host": socket.gethostname()}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON": sys.executable}
    mon = start_group(
        [
            "bash",
            str(ROOT / "monitor.sh"),
            str(metrics),
            "--follow",
            "--end-on-stop",
            "--ckpt-path",
            str(ckpt),
            "--interval",
            "0.3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    request.addfinalizer(lambda: stop_group(mon))
    time.sleep(8)
    assert driver.poll() is None and mon.poll() is None  # STOP seen at step 40, newest checkpoint 35: waits
    (ckpt / "_actor" / "latest").write_text("global_step40")
    out, err = mon.communicate(timeout=60)
    assert mon.returncode == 2, out[-2000:] + err
    assert driver.wait(timeout=30) != 0  # ended by SIGINT
    assert "STOP seen at step 40" in out
    assert f"ended the run (driver pid {driver.pid}) after global_step40" in err
    entry = json.loads(record.read_text())["stopped_by_monitor"]
    assert (
        entry["step"] == 40
        and entry["checkpoint"] == "global_step40"
        and entry["reason"].startswith("OOD probe early stopping: eval_ood_pass1 fell twice")
    )
    assert "relaunch" in entry["resume"] and json.loads(record.read_text())["command"] == ["x"]


def test_a_driver_that_ignores_sigint_gets_sigterm_at_once(tmp_path):
    """A background job of a non-interactive shell (how the launch scripts run the driver) ignores SIGINT: the
    monitor sees it and sends SIGTERM, instead of waiting out the SIGINT timeout."""
    import signal
    import socket

    with group(["bash", "-c", '"$@" & echo $!; wait $!', "bash", sys.executable, "-c", "import time; time.sleep(300)",
                "openrlhf.cli.train_ppo_ray"], stdout=subprocess.PIPE, text=True) as shell:
        pid, deadline = int(shell.stdout.readline()), time.time() + 30
        while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(sys.executable.encode()):  # exec'd
            assert time.time() < deadline
            time.sleep(0.05)
        assert ignores_sigint(pid) and not ignores_sigint(os.getpid())
        record = tmp_path / "run_record_20261123T000000Z.json"
        record.write_text(json.dumps({"driver_pid": pid, "host": socket.gethostname()}))
        entry = end_run(record, StopPlan(seen_at=3, reason="r"), 4, timeout=600)
        assert entry["signal"] == "SIGTERM" and json.loads(record.read_text())["stopped_by_monitor"] == entry
        assert shell.wait(timeout=30) == 128 + signal.SIGTERM  # the driver is gone, bash's wait reports how


def test_end_on_stop_without_follow_is_refused(tmp_path):
    metrics = write_scenario("early_stop", tmp_path / "metrics")
    proc = subprocess.run(
        [sys.executable, "-m", "rft.monitor", str(metrics), "--end-on-stop"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "--end-on-stop needs --follow" in proc.stderr
