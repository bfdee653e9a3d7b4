"""rft.launch.supervise: a signal to the launcher stops the driver it started, never orphans it; the smoke run's
sampler and verdict around it (the later stage's modules given as stand-in commands)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rft.io import pid_alive
from rft.launch import supervise
from rft.launch.rules import PROFILES
from rft.provenance import REPO_ROOT as ROOT

# A supervising launcher in miniature: one forwarded child, and a clean-up on the way out (the CPU profile stops
# its Ray there).
SCRIPT = """
import os, sys
from rft.launch.supervise import run_forwarding, stop_grace
try:
    status, stopped = run_forwarding([sys.executable, "-c", os.environ["CHILD"]], stop_grace())
    print(f"child status {status} stopped={int(stopped)}", file=sys.stderr)
finally:
    print("clean-up ran", file=sys.stderr)
sys.exit(status)
"""

SLEEPER = "import os, time; print(os.getpid(), flush=True); time.sleep(120)"
STUBBORN = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(os.getpid(), flush=True); "
            "time.sleep(120)")


def alive(pid: int) -> bool:
    if not pid_alive(pid):
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its reaper is gone for our purpose
        return f.read().split(") ", 1)[1][0] != "Z"


def start(tmp_path: Path, env: dict, ignore_sigint: bool = False) -> subprocess.Popen:
    script = tmp_path / "launcher.py"
    script.write_text(SCRIPT)
    sigint = signal.SIG_IGN if ignore_sigint else signal.SIG_DFL
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))


@pytest.mark.parametrize(("child", "grace", "sig"), [(SLEEPER, "30", signal.SIGTERM), (SLEEPER, "30", signal.SIGINT),
                                                     (SLEEPER, "30", signal.SIGHUP), (STUBBORN, "1", signal.SIGTERM)])
def test_a_signal_to_the_launcher_stops_its_child(child, grace, sig, tmp_path):
    proc = start(tmp_path, {"CHILD": child, "RFT_STOP_GRACE": grace})
    try:
        child_pid = int(proc.stdout.readline())
        began = time.time()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.time() - began < 15
    assert not alive(child_pid), err
    assert "signal received: stopping pid" in err and "clean-up ran" in err
    want = 128 + (signal.SIGKILL if child is STUBBORN else signal.SIGTERM)
    assert proc.returncode == want and f"child status {want} stopped=1" in err


def test_sigint_reaches_the_launcher_started_with_it_ignored(tmp_path):
    """A background job of a non-interactive shell starts with SIGINT ignored; the launcher takes it anyway."""
    proc = start(tmp_path, {"CHILD": SLEEPER, "RFT_STOP_GRACE": "30"}, ignore_sigint=True)
    try:
        child_pid = int(proc.stdout.readline())
        sig_ign = int(next(ln for ln in Path(f"/proc/{child_pid}/status").read_text().splitlines()
                           if ln.startswith("SigIgn:")).split()[1], 16)
        assert not sig_ign & (1 << (signal.SIGINT - 1))  # the child gets SIGINT's default back
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM and not alive(child_pid), err


def test_without_a_signal_the_childs_status_comes_back(tmp_path):
    proc = start(tmp_path, {"CHILD": "import sys; sys.exit(3)"})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and "child status 3 stopped=0" in err


def test_stop_grace_names_a_bad_value():
    assert supervise.stop_grace({}) == 30 and supervise.stop_grace({"RFT_STOP_GRACE": "2.5"}) == 2.5
    with pytest.raises(ValueError, match="RFT_STOP_GRACE=soon"):
        supervise.stop_grace({"RFT_STOP_GRACE": "soon"})


def stand_in(log: Path):
    """`module(name, *args)` for the later stage's modules: a process that records its module and arguments and
    exits 0 for a run status 0, else 1 (the verdict's contract)."""
    code = ("import json, sys; open(sys.argv[1], 'a').write(json.dumps(sys.argv[2:]) + '\\n'); "
            "sys.exit(0 if '--run-status' not in sys.argv or sys.argv[-1] == '0' else 1)")

    def module(name: str, *args: str) -> list[str]:
        return [sys.executable, "-c", code, str(log), name, *args]
    return module


@pytest.mark.parametrize(("child_status", "want"), [(0, 0), (4, 1)])
def test_a_smoke_run_ends_in_its_verdict_on_its_own_metrics(child_status, want, tmp_path, monkeypatch):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "training_metrics.jsonl").write_text('{"global_step": 9}\n')  # an older run's: removed first
    (metrics / supervise.GPU_FILE).write_text("{}")
    monkeypatch.setattr(supervise, "gpu_count", lambda: 1)  # a GPU node: the sampler runs beside the driver
    log = tmp_path / "calls.jsonl"
    after: list[int] = []
    old = metrics / "training_metrics.jsonl"
    # the driver stand-in ends once the sampler has started and recorded itself (terminated before it could, a
    # sampler would leave no line), with 8 if the older run's metrics were not removed first
    child = [sys.executable, "-c",
             f"import os, sys, time\nt = time.time() + 60\n"
             f"while time.time() < t and {supervise.SAMPLER_MODULE!r} not in (open({str(log)!r}).read() "
             f"if os.path.exists({str(log)!r}) else ''):\n    time.sleep(0.02)\n"
             f"sys.exit(8 if os.path.exists({str(old)!r}) else {child_status})"]
    env = {**os.environ, "METRICS_LOG_DIR": str(metrics), "RFT_STOP_GRACE": "5"}
    rc = supervise.supervise(PROFILES["20b"], child, env, smoke=True, after=after.append, module=stand_in(log))
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert rc == want and after == [child_status]
    assert calls[0] == [supervise.SAMPLER_MODULE, str(metrics / supervise.GPU_FILE)]
    assert calls[-1] == [supervise.VERDICT_MODULE, str(metrics), "--run-status", str(child_status)]


def test_a_plain_supervised_run_returns_the_childs_status_without_a_verdict(tmp_path):
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "METRICS_LOG_DIR": str(tmp_path / "m")}
    rc = supervise.supervise(PROFILES["cpu"], [sys.executable, "-c", "raise SystemExit(5)"], env, smoke=False,
                             module=stand_in(log))
    assert rc == 5 and not log.exists()


def test_a_smoke_relaunches_once_and_records_where_the_relaunch_starts(tmp_path):
    """The first launch logs step 1; the relaunch (flags appended) logs steps 2-3; RELAUNCH_FILE says where."""
    metrics = tmp_path / "metrics"
    log = tmp_path / "calls.jsonl"
    code = ("import json, sys\nsteps = [2, 3] if '--load_checkpoint' in sys.argv else [1]\n"
            f"open({str(metrics / 'training_metrics.jsonl')!r}, 'a').write(''.join(json.dumps({{'global_step': s}})"
            " + '\\n' for s in steps))")
    env = {**os.environ, "METRICS_LOG_DIR": str(metrics), "RFT_STOP_GRACE": "5"}
    rc = supervise.supervise(PROFILES["20b"], [sys.executable, "-c", code], env, smoke=True, module=stand_in(log),
                             resume=(1, ["--max_samples", "48", "--load_checkpoint"]))
    marker = json.loads((metrics / supervise.RELAUNCH_FILE).read_text())
    assert rc == 0 and marker == {"resumed_from": 1, "offset": len('{"global_step": 1}\n'), "status": 0}
    lines = (metrics / "training_metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["global_step"] for x in lines] == [1, 2, 3]


def test_a_failed_first_launch_is_not_relaunched(tmp_path):
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "METRICS_LOG_DIR": str(tmp_path / "m")}
    rc = supervise.supervise(PROFILES["20b"], [sys.executable, "-c", "raise SystemExit(3)"], env, smoke=True,
                             module=stand_in(log), resume=(1, ["--load_checkpoint"]))
    assert rc == 1 and not (tmp_path / "m" / supervise.RELAUNCH_FILE).exists()
    assert json.loads(log.read_text().splitlines()[-1])[-1] == "3"


def test_a_smoke_past_its_deadline_is_stopped_and_fails_timed_out(tmp_path):
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "METRICS_LOG_DIR": str(tmp_path / "m"), "RFT_STOP_GRACE": "5"}
    rc = supervise.supervise(PROFILES["20b"], [sys.executable, "-c", SLEEPER], env, smoke=True,
                             module=stand_in(log), deadline=0.5)
    assert rc == 1
    assert json.loads(log.read_text().splitlines()[-1])[-2:] == ["--run-status", str(supervise.TIMED_OUT)]
