"""The GPU transport a launch will get: `nvidia-smi topo -m` parsed, and the NCCL_* variables that turn transports off.

The step-time model assumes the ZeRO-3 gathers run over NVLink (`allgather_bytes_s`, docs/step-time.md); a pair of
actor GPUs joined only through PCIe or the CPU (PIX/PXB/PHB/NODE/SYS), or a leftover `NCCL_P2P_DISABLE=1`, makes
them an order of magnitude slower. Stdlib only: prereqs run before any environment exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NVLINK = re.compile(r"^NV\d+$")
NON_NVLINK = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")  # SOC: older drivers' name for SYS
# variable -> (the values that disable a transport, what is lost)
DISABLING = {
    "NCCL_P2P_DISABLE": ({"1"}, "GPU peer-to-peer (NVLink and PCIe P2P): every intra-node collective goes through "
                               "host shared memory"),
    "NCCL_SHM_DISABLE": ({"1"}, "the shared-memory transport: without P2P, intra-node traffic falls to sockets"),
    "NCCL_P2P_LEVEL": ({"LOC", "0"}, "peer-to-peer between any two GPUs (P2P only within one GPU)"),
    "NCCL_NVLS_ENABLE": ({"0"}, "NVLink SHARP (NVSwitch in-network all-reduce and all-gather)"),
    "NCCL_IB_DISABLE": ({"1"}, "InfiniBand/RoCE between nodes: a two-node run's collectives go over TCP sockets"),
    "NCCL_NET": ({"socket"}, "every network transport but TCP sockets between nodes"),
}


@dataclass(frozen=True)
class Topology:
    """The GPU x GPU block of `nvidia-smi topo -m`: gpus[i] and link[i][j] as printed (X on the diagonal)."""

    gpus: list[str]
    link: list[list[str]]

    def pairs(self) -> list[tuple[str, str, str]]:
        """(gpu a, gpu b, link) of every pair, a before b."""
        n = len(self.gpus)
        return [(self.gpus[i], self.gpus[j], self.link[i][j]) for i in range(n) for j in range(i + 1, n)]


def parse_topology(text: str) -> Topology | None:
    """The GPU block of `nvidia-smi topo -m` output; None when there is no GPU header in it."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).split() for ln in text.splitlines()]
    at = next((i for i, words in enumerate(lines) if words[:1] == ["GPU0"]), None)
    if at is None:
        return None
    gpus = [h for h in lines[at] if re.fullmatch(r"GPU\d+", h)]
    link = []
    for gpu in gpus:
        row = next((words for words in lines[at + 1:] if words[:1] == [gpu]), None)
        if row is None or len(row) < len(gpus) + 1:
            return None
        link.append(row[1:len(gpus) + 1])
    return Topology(gpus, link)



def nccl_env(env: dict[str, str]) -> dict[str, str]:
    """Every NCCL_* variable of `env` (the run record keeps them)."""
    return {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}


def topology_warnings(text: str | None, gpus: int = 0) -> list[str]:
    """One line per problem of the topology text: GPU pairs with no NVLink, or a topology that does not parse."""
    if text is None:
        return [f"GPU topology: `nvidia-smi topo -m` gave nothing on a node with {gpus} GPU(s): the transport of "
                "the ZeRO-3 gathers is unknown"] if gpus > 1 else []
    topo = parse_topology(text)
    if topo is None:
        return ["GPU topology: `nvidia-smi topo -m` printed no GPU matrix: the transport of the ZeRO-3 gathers is "
                "unknown"]
    slow = [(a, b, link) for a, b, link in topo.pairs() if not NVLINK.match(link)]
    if not slow:
        return []
    kinds = sorted({link for _, _, link in slow})
    shown = ", ".join(f"{a}-{b} {link}" for a, b, link in slow[:4]) + (" ..." if len(slow) > 4 else "")
    return [f"GPU topology: {len(slow)} of {len(topo.pairs())} GPU pairs have no NVLink ({'/'.join(kinds)}: {shown}): "
            "ZeRO-3's all-gathers go over PCIe or through the CPU, an order of magnitude below the step-time "
            "model's NVLink figure; put the actor ranks on NVLink-joined GPUs (docs/step-time.md#the-transport)"]


def env_warnings(env: dict[str, str], nodes: int = 1) -> list[str]:
    """One line per NCCL_* variable that turns a transport off (the network ones only for a multi-node run)."""
    out = []
    for name, (values, lost) in DISABLING.items():
        value = env.get(name)
        if value is None or value.strip().lower() not in {v.lower() for v in values}:
            continue
        if name in ("NCCL_IB_DISABLE", "NCCL_NET") and nodes < 2:
            continue
        out.append(f"{name}={value}: turns off {lost}; unset it unless this node needs it "
                   "(docs/step-time.md#the-transport)")
    return out
