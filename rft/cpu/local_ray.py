"""A private Ray head on 127.0.0.1 for the CPU profile: start it, and stop exactly it (never other clusters).

`python -m rft.cpu.local_ray start TEMP_DIR --num-gpus 4` prints the GCS address (RAY_ADDRESS);
`python -m rft.cpu.local_ray join ADDRESS --num-gpus 1` adds a second raylet (a second Ray node) on 127.0.0.1 to
that head, with ports of its own; `python -m rft.cpu.local_ray stop TEMP_DIR ADDRESS` ends that cluster's
processes (both nodes) and their children.
`ray stop` is not used: it matches processes by name and would kill every Ray cluster on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator

# Ray rewrites --node-ip-address 127.0.0.1 to the machine's routable address unless it believes it runs a
# single-machine cluster; with these, every process (driver, workers, OpenRLHF's MASTER_ADDR, vLLM) uses loopback.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "VLLM_HOST_IP": "127.0.0.1"}


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1: all bound at once, so the kernel cannot hand one out twice
    (Ray refuses a node whose components share a port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_flags(flags: list[str]) -> list[str]:
    """Each flag followed by a port of its own: [flag1, port1, flag2, port2, ...]."""
    return [x for flag, port in zip(flags, free_ports(len(flags)), strict=True) for x in (flag, str(port))]


# Ray's fixed defaults (Ray 2.48: client server 10001, dashboard agent 52365, workers 10002-19999) are the same
# for every cluster: a second head on the machine would collide on them ("Failed to start the grpc server ...
# port 10005"). Each head gets its own ports: every single one from the kernel (the rest are pinned too, so
# nothing is left to Ray's choice), and a window of worker ports below the kernel's ephemeral range (32768 up on
# Linux), so no port the kernel hands out lands in it, and outside every running node's window.
SINGLE_PORTS = ["--port", "--ray-client-server-port", "--object-manager-port", "--node-manager-port",
                "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
                "--metrics-export-port"]
WORKER_RANGE = (20000, 32767)
WORKER_WINDOW = 200


def single_port_flags() -> list[str]:
    """SINGLE_PORTS, less the Ray Client server's where its extra (grpc) is missing: Ray then starts none."""
    has_client = importlib.util.find_spec("grpc") is not None
    return [f for f in SINGLE_PORTS if has_client or f != "--ray-client-server-port"]


def port_is_free(port: int) -> bool:
    """Whether `port` can be bound on 127.0.0.1 now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# Every raylet's command line names its worker window (`--min_worker_port=N --max_worker_port=M`).
WINDOW_FLAG = re.compile(r"--(min|max)[-_]worker[-_]port[= ](\d+)")


def claimed_windows() -> list[tuple[int, int]]:
    """The worker-port windows of the Ray nodes running on this machine, read from their command lines."""
    import psutil

    windows = set()
    for proc in psutil.process_iter(["cmdline"]):
        try:
            found = dict(WINDOW_FLAG.findall(" ".join(proc.info["cmdline"] or [])))
        except psutil.Error:
            continue
        if {"min", "max"} <= set(found):
            windows.add((int(found["min"]), int(found["max"])))
    return sorted(windows)


def worker_window(rng: random.Random | None = None, tries: int = 50) -> tuple[int, int]:
    """A random window of WORKER_WINDOW worker ports in WORKER_RANGE, each free now and in no running node's window.

    Free is not enough: a node binds its window's ports only as workers (and drivers) start, so a second node
    given the same window crashes the first worker that draws a port the other has taken.
    """
    rng = rng or random.Random()
    lo, hi = WORKER_RANGE
    claimed = claimed_windows()
    for _ in range(tries):
        first = lo + rng.randrange((hi - lo + 1) // WORKER_WINDOW) * WORKER_WINDOW
        last = first + WORKER_WINDOW - 1
        if any(a <= last and first <= b for a, b in claimed):
            continue
        if all(port_is_free(p) for p in range(first, last + 1)):
            return first, last
    raise RuntimeError(f"no window of {WORKER_WINDOW} free ports in {lo}-{hi} after {tries} tries")


PORT_LOCK = os.path.join(tempfile.gettempdir(), "rft-ray-ports.lock")


@contextlib.contextmanager
def port_lock() -> Iterator[None]:
    """Held while a node's ports are chosen and the node starts, so two starts on the machine never share one."""
    with open(PORT_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def start_command(temp_dir: str, num_gpus: int, num_cpus: int) -> list[str]:
    """`ray start --head` on 127.0.0.1 with ports of its own (see SINGLE_PORTS)."""
    ports = port_flags(single_port_flags())
    first, last = worker_window()
    return [
        os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", "--node-ip-address", "127.0.0.1",
        *ports, "--min-worker-port", str(first), "--max-worker-port", str(last),
        "--num-gpus", str(num_gpus), "--num-cpus", str(num_cpus), "--temp-dir", temp_dir,
        "--include-dashboard", "false", "--disable-usage-stats",
    ]


# A worker node has no GCS, dashboard or client server: its own raylet, object manager and agents only.
JOIN_PORTS = ["--object-manager-port", "--node-manager-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"]


# `ray start --address 127.0.0.1:P` rewrites the loopback address to the machine's routable one (Ray 2.48
# services.resolve_ip_for_localhost) where the head, bound to 127.0.0.1, cannot be reached; and with the
# single-machine switch of LOOPBACK_ENV it refuses to add a node at all. The second node is started through Ray's
# own CLI with that one rewrite turned off, so it joins the head on loopback.
JOIN_CLI = (
    "import sys, ray._private.services as s; s.resolve_ip_for_localhost = lambda a: a; "
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"
)


def join_command(address: str, num_gpus: int, num_cpus: int) -> list[str]:
    """`ray start --address` for a second node on 127.0.0.1: its own ports and worker window.

    Ray 2.48 takes the temp dir from the head (`--temp-dir` is head-only); the second raylet's sockets and logs
    get names of their own inside the head's session directory.
    """
    ports = port_flags(JOIN_PORTS)
    first, last = worker_window()
    return [
        sys.executable, "-c", JOIN_CLI, "start", "--address", address,
        "--node-ip-address", "127.0.0.1", *ports, "--min-worker-port", str(first), "--max-worker-port", str(last),
        "--num-gpus", str(num_gpus), "--num-cpus", str(num_cpus), "--disable-usage-stats",
    ]


def join(address: str, num_gpus: int, num_cpus: int, timeout: float = 180) -> None:
    """Start a second raylet on 127.0.0.1 that joins the head at `address`."""
    env = {**os.environ, **LOOPBACK_ENV, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    with port_lock():
        res = subprocess.run(join_command(address, num_gpus, num_cpus), capture_output=True, text=True, env=env,
                             timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"ray start --address {address} failed ({res.returncode}):\n{res.stdout}{res.stderr}")


def start(temp_dir: str, num_gpus: int, num_cpus: int) -> str:
    """Start a head node bound to 127.0.0.1 with `num_gpus` logical GPUs; returns its address."""
    with port_lock():
        cmd = start_command(temp_dir, num_gpus, num_cpus)
        port = cmd[cmd.index("--port") + 1]
        res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **LOOPBACK_ENV})
    if res.returncode != 0:
        raise RuntimeError(f"ray start failed ({res.returncode}):\n{res.stdout}{res.stderr}")
    return f"127.0.0.1:{port}"


def cluster_processes(temp_dir: str, address: str | None) -> list:
    """The processes of the cluster that owns `temp_dir` (or serves `address`), with all their descendants."""
    import psutil

    temp_dir = temp_dir.rstrip("/")
    markers = [temp_dir + "/", "--temp-dir=" + temp_dir]
    if address:
        markers += ["--address=" + address, "--gcs-address=" + address]
    me = os.getpid()
    found = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if proc.pid != me and any(m in cmd for m in markers):
                found[proc.pid] = proc
                found.update((c.pid, c) for c in proc.children(recursive=True))
        except psutil.Error:
            continue
    found.pop(me, None)
    return list(found.values())


def stop(temp_dir: str, address: str | None = None, timeout: float = 10.0) -> int:
    """SIGTERM the cluster's processes, SIGKILL what is left after `timeout`; returns how many there were."""
    import psutil

    procs = cluster_processes(temp_dir, address)
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(procs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rft.cpu.local_ray", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a head node on 127.0.0.1 and print its address")
    s.add_argument("temp_dir", help="Ray's temp dir for this cluster (keep it short: socket paths < 108 chars)")
    s.add_argument("--num-gpus", type=int, default=4, help="logical GPUs the placement groups may reserve")
    s.add_argument("--num-cpus", type=int, default=4, help="logical CPUs (actors reserve some each)")
    j = sub.add_parser("join", help="start a second node on 127.0.0.1 joining the head at ADDRESS")
    j.add_argument("address", help="the head's address (what start printed)")
    j.add_argument("--num-gpus", type=int, default=1, help="logical GPUs of the second node")
    j.add_argument("--num-cpus", type=int, default=2, help="logical CPUs of the second node")
    t = sub.add_parser("stop", help="stop the cluster started with this temp dir, and nothing else")
    t.add_argument("temp_dir", help="the temp dir given to start")
    t.add_argument("address", nargs="?", help="its address, to also catch the ray client server")
    a = p.parse_args(argv)
    if a.cmd == "start":
        print(start(a.temp_dir, a.num_gpus, a.num_cpus))
    elif a.cmd == "join":
        join(a.address, a.num_gpus, a.num_cpus)
    else:
        print(f"local_ray: stopped {stop(a.temp_dir, a.address)} processes of {a.temp_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
