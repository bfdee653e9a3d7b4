"""rft/cpu/local_ray.py: private Ray heads on 127.0.0.1, with real `ray start`, side by side on one machine."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import tempfile

import pytest

# Skip before anything of the project is imported, so a missing Ray or psutil skips rather than errors.
pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from rft.cpu import local_ray  # noqa: E402
from tests.support.processes import groups  # noqa: E402

# one task on the cluster, which makes Ray start a worker process (a port from the head's worker window)
TASK = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(int(ray.cluster_resources()["GPU"]), ray.get(ray.remote(lambda: 41 + 1).remote()))
"""


def test_worker_window_is_free_and_below_the_ephemeral_range():
    first, last = local_ray.worker_window(random.Random(3))
    lo, hi = local_ray.WORKER_RANGE
    assert last - first + 1 == local_ray.WORKER_WINDOW and lo <= first and last <= hi
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        assert hi < int(f.read().split()[0])  # the kernel never hands out a port inside a window
    # A port in use inside that window: the same draw moves on to another window.
    with socket.socket() as held:
        held.bind(("127.0.0.1", first + 7))
        assert not local_ray.port_is_free(first + 7)
        other = local_ray.worker_window(random.Random(3))
    assert other != (first, last) and not other[0] <= first + 7 <= other[1]


def test_free_ports_are_distinct_and_free():
    ports = local_ray.free_ports(64)  # one at a time, the kernel may hand the same port out twice
    assert len(set(ports)) == 64 and all(local_ray.port_is_free(p) for p in ports)


def test_start_command_gives_every_port_flag_its_own_value():
    cmd = local_ray.start_command("/tmp/x", 4, 8)
    flags = local_ray.single_port_flags()
    assert set(local_ray.SINGLE_PORTS) - set(flags) <= {"--ray-client-server-port"}
    values = [cmd[cmd.index(flag) + 1] for flag in flags]
    assert len(set(values)) == len(values) and all(v.isdigit() for v in values)
    first, last = int(cmd[cmd.index("--min-worker-port") + 1]), int(cmd[cmd.index("--max-worker-port") + 1])
    assert last - first + 1 == local_ray.WORKER_WINDOW and not any(first <= int(v) <= last for v in values)


class DrawsFirst(random.Random):
    """A random draw whose first randrange is `index`: it offers worker_window a window chosen by the test."""

    def __init__(self, index: int):
        super().__init__(0)
        self.first = index

    def randrange(self, *args, **kwargs):
        if self.first is not None:
            index, self.first = self.first, None
            return index
        return super().randrange(*args, **kwargs)


def window_of(temp_dir: str, address: str) -> tuple[int, int]:
    """The worker window a running head was started with, from its raylet's command line."""
    raylet = []
    for p in local_ray.cluster_processes(temp_dir, address):
        try:
            if "raylet" in p.name():
                raylet.append(" ".join(p.cmdline()))
        except psutil.Error:
            continue  # a short-lived child of the head that ended after the listing
    found = dict(local_ray.WINDOW_FLAG.findall(raylet[0]))
    return int(found["min"]), int(found["max"])


def tasks(*addresses: str):
    """TASK run against each address at once (a `groups` block: all are ended on leaving it)."""
    return groups([[sys.executable, "-c", TASK, a] for a in addresses], stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True, env={**os.environ, **local_ray.LOOPBACK_ENV})


def test_two_private_heads_run_side_by_side_and_stop_apart():
    """Two heads at once, each with ports of its own, tasks on both at once; stopping one spares the other."""
    with tempfile.TemporaryDirectory(prefix="rft-ray-a") as a, tempfile.TemporaryDirectory(prefix="rft-ray-b") as b:
        addr_a = local_ray.start(a, num_gpus=1, num_cpus=2)
        try:
            # A's worker ports are not bound yet (no worker has started): its window is free, yet never drawn again.
            window_a = window_of(a, addr_a)
            assert window_a in local_ray.claimed_windows()
            assert all(local_ray.port_is_free(p) for p in range(window_a[0], window_a[1] + 1))
            index = (window_a[0] - local_ray.WORKER_RANGE[0]) // local_ray.WORKER_WINDOW
            assert local_ray.worker_window(DrawsFirst(index)) != window_a
            addr_b = local_ray.start(b, num_gpus=2, num_cpus=2)
            try:
                assert window_of(b, addr_b) != window_a
                with tasks(addr_a, addr_b) as jobs:
                    outs = [j.communicate(timeout=240) for j in jobs]
                assert [j.returncode for j in jobs] == [0, 0], [err[-3000:] for _, err in outs]
                assert [o[0].split() for o in outs] == [["1", "42"], ["2", "42"]]
                assert local_ray.stop(a, addr_a) > 0
                assert local_ray.cluster_processes(a, addr_a) == []
                with tasks(addr_b) as (after,):
                    out, err = after.communicate(timeout=240)
                assert after.returncode == 0 and out.split() == ["2", "42"], err
            finally:
                local_ray.stop(b, addr_b)
            assert local_ray.cluster_processes(b, addr_b) == []
        finally:
            local_ray.stop(a, addr_a)


# a placement group of 2 GPUs then a 1-GPU actor: on a head of 2 GPUs and a second node of 1, they land apart
TWO_NODES = """
import sys, ray
from ray.util.placement_group import placement_group
ray.init(address=sys.argv[1], log_to_driver=False)
pg = placement_group([{"GPU": 1, "CPU": 1}] * 2, strategy="PACK")
ray.get(pg.ready())
@ray.remote(num_gpus=1)
class Engine:
    def node(self):
        return ray.get_runtime_context().get_node_id()
head = [n["NodeID"] for n in ray.nodes() if n["Resources"].get("GPU") == 2]
print(len(ray.nodes()), ray.get(Engine.remote().node.remote()) != head[0])
"""


def test_join_command_gives_the_second_node_ports_of_its_own():
    cmd = local_ray.join_command("127.0.0.1:6379", 1, 2)
    values = [cmd[cmd.index(flag) + 1] for flag in local_ray.JOIN_PORTS]
    assert len(set(values)) == len(values) and cmd[cmd.index("--address") + 1] == "127.0.0.1:6379"
    assert "--head" not in cmd and "--temp-dir" not in cmd and cmd[cmd.index("--node-ip-address") + 1] == "127.0.0.1"


def test_a_second_node_joins_on_loopback_and_is_stopped_with_its_head():
    with tempfile.TemporaryDirectory(prefix="rft-ray-j") as t:
        addr = local_ray.start(t, num_gpus=2, num_cpus=2)
        try:
            local_ray.join(addr, num_gpus=1, num_cpus=2)
            job = subprocess.run([sys.executable, "-c", TWO_NODES, addr], capture_output=True, text=True,
                                 timeout=240, env={**os.environ, **local_ray.LOOPBACK_ENV})
            assert job.returncode == 0 and job.stdout.split() == ["2", "True"], job.stderr[-3000:]
        finally:
            local_ray.stop(t, addr)
        assert local_ray.cluster_processes(t, addr) == []
