"""Role labels for the processes nvidia-smi lists: the per-role GPU memory a run's sampler records.

A role comes from the process title: Ray titles actors `ray::Class.method`; vLLM titles its multiprocess workers
`VLLM::Worker_TP<rank>` and, with the Ray executor (tensor parallel > 1 under OpenRLHF), its workers are Ray
actors `ray::RayWorkerWrapper`; both are one role, the vLLM worker. Inside a container nvidia-smi reports host
pids, which name other processes, or none, in the container's /proc. A pid is therefore trusted only when that
local process holds the GPU's device node (`/dev/nvidia<minor>`, read from /proc/<pid>/fd); otherwise the
memory is labelled by the GPU: the roles of the local processes that hold its device node. No pid translation
is needed (NSpid in a container's /proc lists container pids only, never the host's).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
VLLM_WORKER = "vLLM worker"
_DEVICE = re.compile(r"^/dev/nvidia(\d+)$")


def title_role(title: str) -> str:
    """The role a process title names: `ray::Class` for Ray actors, VLLM_WORKER for vLLM's workers, else the
    program's name."""
    word = title.split()[0] if title.strip() else ""
    if re.fullmatch(r"VLLM::Worker(_TP\d+)?(_\w+)?", word) or word.startswith("ray::RayWorkerWrapper"):
        return VLLM_WORKER
    if word.startswith("ray::"):
        return word.split(".")[0]
    return Path(word).name or "?"


def process_title(pid: int, proc: Path = PROC) -> str | None:
    """argv[0] and the rest of /proc/<pid>/cmdline as one line (Ray and vLLM set their titles there)."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return " ".join(p.decode(errors="replace") for p in raw.split(b"\0") if p) or None


def gpu_minors(pid: int, proc: Path = PROC) -> set[int]:
    """Minor numbers of the /dev/nvidia<N> nodes process `pid` holds open (empty when it holds none or its fds
    cannot be read)."""
    minors = set()
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return set()
    for fd in fds:
        try:
            m = _DEVICE.match(os.readlink(fd))
        except OSError:
            continue
        if m:
            minors.add(int(m.group(1)))
    return minors


def minor_by_bus(proc: Path = PROC) -> dict[str, int]:
    """PCI bus id (lower case, `dddd:bb:dd.f`) -> device minor, from /proc/driver/nvidia/gpus/*/information."""
    found = {}
    for info in sorted((proc / "driver" / "nvidia" / "gpus").glob("*/information")):
        m = re.search(r"^Device Minor:\s*(\d+)", info.read_text(errors="replace"), re.M)
        if m:
            found[bus_key(info.parent.name)] = int(m.group(1))
    return found


def bus_key(bus_id: str) -> str:
    """nvidia-smi's `00000000:17:00.0` and the driver's `0000:17:00.0` as one key."""
    return bus_id.strip().lower()[-12:]


def gpu_holders(proc: Path = PROC) -> dict[int, set[str]]:
    """Device minor -> roles of the local processes that hold it open."""
    holders: dict[int, set[str]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            minors = gpu_minors(int(entry.name), proc)
            title = process_title(int(entry.name), proc) if minors else None
            for minor in minors:
                holders.setdefault(minor, set()).add(title_role(title) if title else f"pid {entry.name}")
    return holders


def own_role(pid: int, minor: int | None, proc: Path = PROC) -> str | None:
    """The role of nvidia-smi's `pid` when it is a process of this pid namespace that holds the GPU with device
    minor `minor` (any title when the minor is unknown); None when the pid cannot be trusted."""
    title = process_title(pid, proc)
    if title and (minor is None or minor in gpu_minors(pid, proc)):
        return title_role(title)
    return None


def gpu_role(minor: int | None, holders: dict[int, set[str]]) -> str:
    """The role of memory on the GPU with device minor `minor`: the roles of its local holders, `+`-joined."""
    roles = holders.get(minor) if minor is not None else None
    return "+".join(sorted(roles)) if roles else f"GPU minor {minor}" if minor is not None else "unknown"


def peak_by_role(rows: Iterable[tuple[int, str, float]], peaks: dict[str, float],
                 proc: Path = PROC) -> dict[str, float]:
    """Fold nvidia-smi rows (pid, gpu_bus_id, used MiB; `--query-compute-apps=pid,gpu_bus_id,used_memory`) into
    `peaks` (role -> the most MiB one process of that role held); returns it."""
    minors = minor_by_bus(proc)
    holders: dict[int, set[str]] | None = None
    for pid, bus, mib in rows:
        minor = minors.get(bus_key(bus))
        role = own_role(pid, minor, proc)
        if role is None:
            holders = gpu_holders(proc) if holders is None else holders  # one walk of /proc per sample
            role = gpu_role(minor, holders)
        peaks[role] = max(peaks.get(role, 0.0), float(mib))
    return peaks
