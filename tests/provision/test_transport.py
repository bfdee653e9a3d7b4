"""rft.provision.transport: `nvidia-smi topo -m` parsed, the NCCL_* variables that turn transports off, and both read
by the prerequisites through a fake `nvidia-smi` on PATH."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rft.provision import transport
from rft.provision.prereqs import problems, read_host
from tests.provision.test_prereqs import GOOD, fake_bin

TOPO = Path(__file__).resolve().parent / "topo"


def smi(topo_file: str | None, gpus: int) -> str:
    """A fake nvidia-smi: -L lists `gpus` GPUs, the driver query answers, `topo -m` prints the file."""
    topo = f'cat {TOPO / topo_file}' if topo_file else "exit 3"
    listing = "; ".join(f'echo "GPU {i}: NVIDIA H100 80GB HBM3"' for i in range(gpus))
    return (f'if [[ "$1" == topo ]]; then {topo}; elif [[ "$1" == --query-gpu=driver_version ]]; then '
            f'echo 570.133.20; else {listing}; fi')


def test_nvlink_matrix_parses_and_has_nothing_to_say():
    topo = transport.parse_topology((TOPO / "h100_sxm_nv18.txt").read_text())
    assert topo.gpus == [f"GPU{i}" for i in range(8)] and topo.link[0][1] == "NV18" and topo.link[3][3] == "X"
    assert len(topo.pairs()) == 28
    assert transport.topology_warnings((TOPO / "h100_sxm_nv18.txt").read_text(), 8) == []


@pytest.mark.parametrize(("name", "words"), [
    ("pcie_pix_sys.txt", "6 of 6 GPU pairs have no NVLink (PIX/SYS: GPU0-GPU1 PIX, GPU0-GPU2 SYS"),
    ("nvbridge_pairs_sys.txt", "4 of 6 GPU pairs have no NVLink (SYS: GPU0-GPU2 SYS, GPU0-GPU3 SYS"),
    ("pcie_phb_2gpu.txt", "1 of 1 GPU pairs have no NVLink (PHB: GPU0-GPU1 PHB)"),
])
def test_pcie_only_pairs_warn_naming_the_links(name, words):
    (line,) = transport.topology_warnings((TOPO / name).read_text(), 4)
    assert words in line and "docs/step-time.md#the-transport" in line


def test_no_matrix_or_no_answer_warns_on_a_multi_gpu_node():
    assert "printed no GPU matrix" in transport.topology_warnings("No devices were found", 8)[0]
    assert "gave nothing" in transport.topology_warnings(None, 8)[0]
    assert transport.topology_warnings(None, 1) == [] and transport.parse_topology("") is None


@pytest.mark.parametrize(("env", "nodes", "start"), [
    ({"NCCL_P2P_DISABLE": "1"}, 1, "NCCL_P2P_DISABLE=1: turns off GPU peer-to-peer"),
    ({"NCCL_SHM_DISABLE": "1"}, 1, "NCCL_SHM_DISABLE=1: turns off the shared-memory transport"),
    ({"NCCL_P2P_LEVEL": "LOC"}, 1, "NCCL_P2P_LEVEL=LOC: turns off peer-to-peer between any two GPUs"),
    ({"NCCL_NVLS_ENABLE": "0"}, 1, "NCCL_NVLS_ENABLE=0: turns off NVLink SHARP"),
    ({"NCCL_IB_DISABLE": "1"}, 2, "NCCL_IB_DISABLE=1: turns off InfiniBand"),
    ({"NCCL_NET": "Socket"}, 2, "NCCL_NET=Socket: turns off every network transport but TCP"),
])
def test_each_disabling_variable_is_one_warning(env, nodes, start):
    (line,) = transport.env_warnings(env, nodes)
    assert line.startswith(start)


def test_harmless_values_and_single_node_network_variables_say_nothing():
    assert transport.env_warnings({"NCCL_P2P_DISABLE": "0", "NCCL_DEBUG": "INFO", "NCCL_P2P_LEVEL": "NVL",
                                   "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}, nodes=1) == []
    assert transport.nccl_env({"NCCL_DEBUG": "INFO", "PATH": "/bin", "NCCL_P2P_DISABLE": "1"}) == {
        "NCCL_DEBUG": "INFO", "NCCL_P2P_DISABLE": "1"}


@pytest.mark.parametrize(("topo_file", "env", "expect"), [
    ("h100_sxm_nv18.txt", {}, []),
    ("pcie_pix_sys.txt", {}, ["GPU topology: 6 of 6 GPU pairs have no NVLink"]),
    ("h100_sxm_nv18.txt", {"NCCL_P2P_DISABLE": "1"}, ["NCCL_P2P_DISABLE=1"]),
    ("h100_sxm_nv18.txt", {"NCCL_IB_DISABLE": "1", "NODES": "2"}, ["NCCL_IB_DISABLE=1"]),
    (None, {}, ["GPU topology: `nvidia-smi topo -m` gave nothing"]),
])
def test_prereqs_read_the_topology_and_the_environment_through_nvidia_smi(tmp_path, topo_file, env, expect):
    base = fake_bin(tmp_path, nvidia_smi=smi(topo_file, 8))
    host = read_host({**base, **env}, "python3", tmp_path)
    assert host.gpus == 8 and host.nccl == {k: v for k, v in env.items() if k.startswith("NCCL_")}
    _, warn = problems(replace(GOOD, topology=host.topology, nccl=host.nccl, nodes=host.nodes), "20b")
    assert len(warn) == len(expect) and all(w.startswith(e) for w, e in zip(warn, expect, strict=True)), warn
