"""Generation/training overlap measured: the CPU loop synchronous and with `--async_train`, in one invocation.

Each arm is a whole `train_grpo_cpu.sh` run (the demo's 32 steps, no eval, no checkpoints) (the real patched OpenRLHF, one vLLM-CPU engine, 2 ZeRO-3 gloo ranks)
with its roles pinned to their own cores while it runs: every thread of the vLLM engine's processes to one core,
every thread of the trainer's processes (actor ranks, reference, trainer and sampler actors) to the other, so the
2-core machine stands in for two devices. Printed per arm: the median step time (metrics timestamps, steps 3 to
the end: start-up and the first sync left out), each role's idle share over those steps (1 - the CPU seconds its
processes used / the wall seconds, one core each) and the speed-up of the async arm.
Usage: python benchmarks/bench_overlap.py [--out DIR] [--vllm-core 0] [--train-core 1]
Needs .venv-vllm (train_grpo_cpu.sh's default interpreter, or PYTHON=...); any other load on the cores counts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "train_grpo_cpu.sh"
ARMS = (("sync", []), ("async", ["--async_train"]))
# a process's role by its command line (Ray sets `ray::Class.method` titles; vLLM's engine core names itself)
ROLE_MARKS = {
    "vllm": ("LLMRayActor", "VLLM::EngineCore", "VLLM::Worker"),
    "train": ("PolicyModelActor", "ReferenceModelActor", "TrainingActor", "GenerateSamplesActor", "PPOTrainer"),
}
TICKS = os.sysconf("SC_CLK_TCK")
MARK = "RFT_BENCH_OVERLAP_RUN"  # set in each arm's environment; its processes carry it wherever Ray starts them


def role_of(cmdline: str) -> str | None:
    """'vllm', 'train' or None (driver, Ray's own processes: left unpinned, not counted)."""
    for role, marks in ROLE_MARKS.items():
        if any(m in cmdline for m in marks):
            return role
    return None


def marked(token: str) -> list[int]:
    """Every live process of this user whose environment holds `MARK=token`.

    Ray's head daemonizes (raylet and its workers are not children of the launched script), but every process
    it starts inherits the environment of `ray start`, which inherits the script's.
    """
    needle, uid, out = f"{MARK}={token}".encode(), os.getuid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid and needle in (entry / "environ").read_bytes().split(b"\0"):
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads, finished ones included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def pin(pid: int, core: int) -> None:
    """Every thread of `pid` onto `core` (new threads inherit it from the thread that makes them)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {core})
        except OSError:
            pass


class Watcher(threading.Thread):
    """Pins each role's processes (those marked with `token`) to its core every `every` seconds and samples the
    roles' CPU seconds."""

    def __init__(self, token: str, cores: dict[str, int], every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.token, self.cores, self.every = token, cores, every
        self.last: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU seconds last seen)
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for pid in marked(self.token):
                try:
                    role = role_of(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
                    if role:
                        pin(pid, self.cores[role])
                        self.last[pid] = (role, cpu_seconds(pid))
                except OSError:
                    continue  # ended between the listing and the read: its last sample stands
            totals = {role: 0.0 for role in self.cores}
            for role, secs in self.last.values():
                totals[role] += secs
            self.samples.append((time.time(), totals))
            self.stop.wait(self.every)

    def at(self, t: float) -> dict[str, float]:
        """The roles' CPU seconds at time `t` (the last sample at or before it)."""
        before = [s for ts, s in self.samples if ts <= t]
        return before[-1] if before else {role: 0.0 for role in self.cores}


def run_arm(name: str, flags: list[str], out: Path, cores: dict[str, int]) -> dict:
    """One pinned train_grpo_cpu.sh run; its step times and the roles' idle shares over steps 3..end."""
    token = f"{name}-{os.getpid()}-{time.time_ns()}"
    env = {**os.environ, "OUT_ROOT": str(out), "RUN_NAME": name, "TQDM_DISABLE": "1", "RFT_EVAL_AT_START": "0",
           MARK: token}
    # the demo's 32 steps (fewer would be refused by the LR preflight at its decay), no eval, no checkpoints
    cmd = ["bash", str(SCRIPT), "--eval_steps", "-1", "--save_steps", "-1", *flags]
    with open(out / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        watcher = Watcher(token, cores)
        watcher.start()
        rc = proc.wait()
        watcher.stop.set()
        watcher.join()
    if rc != 0:
        raise SystemExit(f"{name}: train_grpo_cpu.sh exited {rc}; see {out / f'{name}.log'}")
    rows = [json.loads(x) for x in (out / name / "metrics" / "training_metrics.jsonl").read_text().splitlines()]
    stamps = [r["timestamp"] for r in rows if r.get("event") != "eval"]
    t0, t1 = stamps[1], stamps[-1]  # from the end of step 2 to the end of the last step
    a, b = watcher.at(t0), watcher.at(t1)
    wall = t1 - t0
    unseen = [role for role in cores if b[role] <= a[role]]
    if unseen:
        raise SystemExit(f"{name}: no CPU time seen for {unseen} over steps 3..end: no process marked {MARK} matched "
                         f"ROLE_MARKS (did Ray's or vLLM's process titles change?); an idle share would be invented")
    return {
        "steps": len(stamps),
        "step_s": statistics.median(y - x for x, y in zip(stamps[1:], stamps[2:], strict=False)),
        "idle": {role: max(0.0, 1 - (b[role] - a[role]) / wall) for role in cores},
        "reward_last4": statistics.fmean(r["reward"] for r in rows[-4:] if r.get("event") != "eval"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=None, help="where both runs go (default: a temporary directory)")
    p.add_argument("--vllm-core", type=int, default=0, help="the core the vLLM engine's processes are pinned to")
    p.add_argument("--train-core", type=int, default=1, help="the core the trainer's processes are pinned to")
    a = p.parse_args(argv)
    cores = {"vllm": a.vllm_core, "train": a.train_core}
    python = os.environ.get("PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(python).exists():
        p.error(f"{python} not found: train_grpo_cpu.sh needs the real vLLM (make venv-vllm, or PYTHON=...)")
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-overlap-"))
    out.mkdir(parents=True, exist_ok=True)
    result = {name: run_arm(name, flags, out, cores) for name, flags in ARMS}
    print(f"{'arm':6} {'steps':>5} {'step s':>7} {'vLLM idle':>9} {'trainer idle':>12} {'reward last 4':>13}")
    for name, r in result.items():
        print(f"{name:6} {r['steps']:5d} {r['step_s']:7.2f} {r['idle']['vllm']:9.0%} {r['idle']['train']:12.0%} "
              f"{r['reward_last4']:13.2f}")
    print(f"speed-up (sync step / async step): {result['sync']['step_s'] / result['async']['step_s']:.2f}x")
    print(f"runs: {out}; load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
