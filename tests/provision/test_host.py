"""rft/provision/host.py: every host fact read in one module, by the prerequisites and the launch rules alike."""

from __future__ import annotations

import shutil

import pytest

from rft.launch import cpu_profile, rules, supervise
from rft.provision import host, prereqs
from rft.provision.prereqs import read_host
from tests.provision.test_prereqs import fake_bin

SMI = """case "$1" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: a)"; echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: b)";;
  --query-gpu=index,name,memory.total) echo "0, NVIDIA H100 80GB HBM3, 81559"; echo "1, NVIDIA H100 80GB HBM3, 81559";;
  --query-gpu=driver_version) echo 570.133.20; echo 570.133.20;;
  topo) printf '\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\nGPU1\\tNV18\\t X \\n';;
  *) exit 2;;
esac"""


def test_one_gpu_count_serves_the_host_probe_the_supervisor_and_the_cpu_profile(tmp_path, monkeypatch):
    """`nvidia-smi -L` is counted in one place, on the PATH it is given (default: this process's)."""
    env = fake_bin(tmp_path, nvidia_smi='echo "GPU 0: NVIDIA H100"; echo "GPU 1: NVIDIA H100"')
    assert host.gpu_count(env) == 2 and read_host(env, "python3", tmp_path).gpus == 2
    monkeypatch.setenv("PATH", env["PATH"])
    assert host.gpu_count() == 2
    assert supervise.gpu_count is host.gpu_count and cpu_profile.gpu_count is host.gpu_count
    assert prereqs.gpu_count is host.gpu_count
    (tmp_path / "failing").mkdir()
    assert host.gpu_count(fake_bin(tmp_path / "failing", nvidia_smi='echo "GPU 0: NVIDIA H100"; exit 9')) == 0


def test_the_gpu_facts_come_from_one_nvidia_smi(tmp_path, monkeypatch):
    """Count, inventory, driver and topology read the same nvidia-smi; the launch rules call the same readers."""
    env = fake_bin(tmp_path, nvidia_smi=SMI)
    assert host.gpu_count(env) == 2
    assert host.gpu_inventory(env) == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.6},
                                       {"index": 1, "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.6}]
    assert host.driver_version(env) == (570, 133, 20)
    assert "NV18" in host.gpu_topology(env)
    monkeypatch.setenv("PATH", env["PATH"])
    assert host.gpu_inventory() == host.gpu_inventory(env)
    assert rules.host is host and prereqs.driver_version is host.driver_version


def test_no_nvidia_smi_or_a_failing_one_reads_as_no_gpus(tmp_path):
    empty = fake_bin(tmp_path)
    assert (host.gpu_count(empty), host.gpu_inventory(empty), host.driver_version(empty), host.gpu_topology(empty)) \
        == (0, None, None, None)
    (tmp_path / "failing").mkdir()
    failing = fake_bin(tmp_path / "failing", nvidia_smi="echo 'NVIDIA-SMI has failed'; exit 9")
    assert (host.gpu_inventory(failing), host.driver_version(failing), host.gpu_topology(failing)) == (None, None, None)


def test_free_disk_is_read_at_the_nearest_existing_directory(tmp_path):
    """The prerequisites' cache and venv space and the launch rules' checkpoint space are one reading."""
    assert host.existing_ancestor(tmp_path / "not" / "yet") == tmp_path
    assert host.free_gib(tmp_path / "not" / "yet") == pytest.approx(shutil.disk_usage(tmp_path).free / 2**30, rel=0.01)
    assert prereqs.free_gib is host.free_gib


def test_mem_available_and_shm_read_their_files(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:       32 kB\nMemAvailable:   2097152 kB\n")
    assert host.mem_available_gib(tmp_path / "meminfo") == 2.0
    assert host.mem_available_gib(tmp_path / "none") is None
    assert host.shm_free_gib(tmp_path / "no-shm") is None
    assert host.shm_free_gib(tmp_path) == pytest.approx(host.free_gib(tmp_path))
    soft, hard = host.open_file_limit()
    assert 0 < soft <= hard or hard == -1
