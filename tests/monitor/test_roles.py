"""rft/monitor/roles.py: role labels from process titles (Ray executor workers included), and GPU memory labelled
by device holders where nvidia-smi's pids are not this namespace's (a container), on a /proc tree built here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rft.monitor.roles import (
    VLLM_WORKER,
    bus_key,
    gpu_minors,
    minor_by_bus,
    own_role,
    peak_by_role,
    process_title,
    title_role,
)

BUS = {0: "0000:17:00.0", 1: "0000:2a:00.0", 2: "0000:3d:00.0"}


def fake_proc(root: Path, procs: dict[int, tuple[str, list[int]]]) -> Path:
    """A /proc tree: per pid its title (NUL-separated argv) and the /dev/nvidia<minor> nodes it holds open."""
    for minor, bus in BUS.items():
        d = root / "driver" / "nvidia" / "gpus" / bus
        d.mkdir(parents=True)
        (d / "information").write_text(f"Model:\t\t NVIDIA H100 80GB HBM3\nIRQ:\t\t 200\nDevice Minor:\t {minor}\n")
    for pid, (title, minors) in procs.items():
        fd = root / str(pid) / "fd"
        fd.mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(title.replace(" ", "\0").encode() + b"\0")
        targets = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/null"] + [f"/dev/nvidia{m}" for m in minors]
        for i, target in enumerate(targets):
            os.symlink(target, fd / str(i))
    return root


@pytest.mark.parametrize(("title", "role"), [
    ("ray::PolicyModelActor.fit", "ray::PolicyModelActor"),
    ("ray::ReferenceModelActor", "ray::ReferenceModelActor"),
    ("ray::LLMRayActor.generate", "ray::LLMRayActor"),
    ("VLLM::Worker_TP0", VLLM_WORKER),
    ("VLLM::Worker_TP1", VLLM_WORKER),
    ("ray::RayWorkerWrapper.execute_method", VLLM_WORKER),  # TP > 1: vLLM's Ray executor
    ("ray::RayWorkerWrapper", VLLM_WORKER),
    ("/usr/bin/python3 -m rft.smoke", "python3"),
    ("", "?"),
])
def test_title_roles(title, role):
    assert title_role(title) == role


def test_pids_of_this_namespace_are_labelled_by_title(tmp_path):
    proc = fake_proc(tmp_path, {101: ("ray::PolicyModelActor.fit", [0]),
                                102: ("ray::RayWorkerWrapper.execute_method", [1]),
                                103: ("VLLM::Worker_TP0", [2])})
    rows = [(101, "00000000:17:00.0", 60000), (102, "00000000:2A:00.0", 70000), (103, "00000000:3D:00.0", 71000)]
    assert peak_by_role(rows, {}, proc) == {"ray::PolicyModelActor": 60000.0, VLLM_WORKER: 71000.0}


def test_host_pids_in_a_container_are_labelled_by_the_gpus_holders(tmp_path):
    # the container's processes are pids 7-9; nvidia-smi reports host pids: 4242 is absent, 8 is another
    # process of the container (a shell holding no GPU), so neither title may be used
    proc = fake_proc(tmp_path, {7: ("ray::PolicyModelActor.fit", [0]),
                                8: ("bash", []),
                                9: ("ray::RayWorkerWrapper.execute_method", [1])})
    rows = [(4242, "00000000:17:00.0", 60000), (8, "00000000:2a:00.0", 70000), (4243, "00000000:3d:00.0", 5)]
    assert own_role(8, 1, proc) is None and own_role(4242, 0, proc) is None
    assert peak_by_role(rows, {"ray::PolicyModelActor": 61000.0}, proc) == {
        "ray::PolicyModelActor": 61000.0, VLLM_WORKER: 70000.0, "GPU minor 2": 5.0}


def test_a_shared_gpu_names_every_holder(tmp_path):
    proc = fake_proc(tmp_path, {7: ("ray::PolicyModelActor.fit", [0]), 8: ("ray::ReferenceModelActor", [0])})
    assert peak_by_role([(999, "00000000:17:00.0", 1.5)], {}, proc) == {
        "ray::PolicyModelActor+ray::ReferenceModelActor": 1.5}


def test_readers_on_the_real_proc():
    title = process_title(os.getpid())
    assert title and "python" in title_role(title)
    assert gpu_minors(os.getpid()) == set()  # this test process holds no GPU
    assert process_title(2**22 + 12345) is None and gpu_minors(2**22 + 12345) == set()
    assert minor_by_bus(Path("/nonexistent")) == {}
    assert bus_key("00000000:17:00.0") == bus_key("0000:17:00.0")
