"""README.md's two command blocks (`## The first hour on the GPU node`, `## The workflow`) executed line by line,
in order, with bash, in a fresh clone of this working tree, on a fake 8-GPU node.

The node: PATH starts with a fake `nvidia-smi` (8 H100s, driver 570, NVLink topology) and `nvcc` (12.8), `c++` (the
stand-in FusedAdam compiles nothing) and `python3` (this interpreter); a sitecustomize on PYTHONPATH makes every
Python on it read the node's host (2000 GiB MemAvailable, 3000 GiB free on every disk, /dev/shm, ulimit -n
1048576; everything else it checks is real). The stack: the real `make -s train-env` (install steps, pip, verify,
rename, FusedAdam, apply_patches.sh) from a linked wheelhouse (tests/support/wheelhouse.py): every pinned
distribution under its pinned name and version, metadata only, and a .pth to this interpreter's site-packages,
so `import numpy`, `huggingface_hub`, `transformers` load the real CPU packages while pip, `pip check` and the
version checks see the pins; torch (CUDA), DeepSpeed (its CUDA build), vLLM (no CPU build there) and openrlhf
(the pristine 0.9.3 files the series patches) stay stand-ins. The model: the real `rft.provision.download` and
huggingface_hub against a local Hub (tests/support/hub_server.py, HF_ENDPOINT). DATA_ROOT and SCRATCH in tmp.
A real launch ends in the exec of OpenRLHF's driver; here RFT_LAUNCH_WRAPPER (docs/configuration.md) names a
stand-in driver that records the command and writes the metrics a run would, then exits.

A line is either executed literally or matched by a NOT_RUN prefix, whose row says why and what runs instead; a
NOT_RUN row that matches no README line fails, so does any executed line that fails: a README edit that breaks the
sequence fails here. The workflow runs in the same clone after the first hour, in the activated .venv-train (its
`python`); its commands find the run from the pointer the launch writes (`runs/RUN_NAME/run.json`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rft.attempt import BEGIN, row_marker
from rft.provenance import REPO_ROOT as ROOT
from rft.provision.caches import CACHE_DIRS
from tests.support.git import git
from tests.support.hub_server import HubRepo, HubServer
from tests.support.rows import write_launch_data
from tests.support.watch_state import write_watch_state
from tests.support.wheelhouse import build_wheelhouse

FIRST_HOUR = "## The first hour on the GPU node"
WORKFLOW = "## The workflow"
RUN_NAME = "gpt-oss-20b-grpo-a28a"  # train_grpo_20b_a28a.sh's default


@dataclass
class Node:
    """The fake node's state while the blocks run: the clone, its environment, every line's output."""

    clone: Path
    env: dict[str, str] = field(repr=False)
    driver_log: Path
    outputs: list[tuple[str, subprocess.CompletedProcess]] = field(default_factory=list, repr=False)

    def output(self, line: str) -> str:
        """stdout and stderr of the one executed line that starts with `line`."""
        (res,) = [r for ln, r in self.outputs if ln.startswith(line)]
        return res.stdout + res.stderr


def write_data(node: Node) -> None:
    """The data files the scripts read, as prepare_sft_data.py names them (tests/support/rows.py)."""
    write_launch_data(node.clone / "data")


def write_watch(node: Node) -> None:
    """What `spare.py watch` leaves in the run's checkpoint folder: checkpoint_eval.json."""
    write_watch_state(Path(node.env["DATA_ROOT"]) / "rft_checkpoints" / RUN_NAME)  # the recipe's CKPT_PATH


# README line prefix -> (why it cannot run on a fake node, what runs instead: a bash line, a step, or nothing).
NOT_RUN: dict[str, tuple[str, str | Callable[[Node], None] | None]] = {
    "make rehearse": ("network and an 11 GB download (scripts/rehearse.py; its table is docs/verified.md)", None),
    "$PY prepare_sft_data.py": ("reads the public datasets over the network", write_data),
    "SMOKE=1 bash train_grpo_20b_a28a.sh": ("the GPUs and the real engine: SMOKE PASS is the LoRA sync landing",
                                            "SMOKE=1 bash train_grpo_20b_a28a.sh --dry-run"),
    "bash monitor.sh --follow": ("--follow never ends", "bash monitor.sh --table"),
    "python spare.py watch": ("the spare node (ssh, GPUs) and it never ends; tests/spare run it over ssh to "
                              "127.0.0.1", write_watch),
}


def strip_comment(line: str) -> str:
    """`line` without its shell comment (a # at the start or after a blank, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def block_commands(readme: str, heading: str) -> list[str]:
    """The commands of the ```bash block under `heading`: comments stripped, continuation lines joined."""
    lines = readme.splitlines()
    assert heading in lines, f"README.md has no line {heading!r}"
    start = lines.index(heading)
    open_ = next(i for i in range(start, len(lines)) if lines[i].strip() == "```bash")
    close = next(i for i in range(open_ + 1, len(lines)) if lines[i].strip() == "```")
    commands, pending = [], ""
    for raw in lines[open_ + 1:close]:
        text = strip_comment(raw).strip()
        if text.endswith("\\"):
            pending += text[:-1].rstrip() + " "
            continue
        text = (pending + text.strip()).strip()
        pending = ""
        if text:
            commands.append(text)
    assert not pending, f"{heading}: the block ends in a continuation line"
    return commands


def not_run_row(command: str) -> str | None:
    """The NOT_RUN prefix `command` starts with, if any."""
    return next((p for p in NOT_RUN if command.startswith(p)), None)


ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\$\([^()]*\)|\S*)")


def run_line(node: Node, line: str) -> subprocess.CompletedProcess:
    """One line with bash (`set -euo pipefail`) in the clone; a bare `NAME=VALUE` line sets NAME for the lines
    after it, as in the user's shell."""
    assign = ASSIGNMENT.fullmatch(line)
    script = f'{line}\nprintf "%s" "${assign.group(1)}"' if assign else line
    res = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=node.clone, env=node.env,
                         capture_output=True, text=True, timeout=180)
    node.outputs.append((line, res))
    flagged = [ln for ln in (res.stdout + res.stderr).splitlines() if re.search(r"\b(ERROR|NEEDS)\b", ln)]
    assert res.returncode == 0, (f"README line failed on the fake node: {line}\n" + "\n".join(flagged)
                                 + f"\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}")
    if assign:
        node.env[assign.group(1)] = res.stdout
    return res


def run_block(node: Node, commands: list[str], used: set[str]) -> None:
    """Each command in order: executed, or its NOT_RUN row's stand-in (the row added to `used`)."""
    for command in commands:
        row = not_run_row(command)
        if row is None:
            run_line(node, command)
            continue
        used.add(row)
        instead = NOT_RUN[row][1]
        if isinstance(instead, str):
            run_line(node, instead)
        elif instead is not None:
            instead(node)


FAKE_SMI = """#!/usr/bin/env bash
# the 8xH100 node's nvidia-smi: -L, the driver, the GPU table, the NVLink topology
case "$*" in
    -L) for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-$i)"; done ;;
    *driver_version*) for i in 0 1 2 3 4 5 6 7; do echo 570.133.20; done ;;
    topo*) cat "{topo}" ;;
    *--query-gpu=index,name,memory.total*) for i in 0 1 2 3 4 5 6 7; do echo "$i, NVIDIA H100 80GB HBM3, 81559"; done ;;
    *--query-compute-apps*) ;;
    *) echo "fake nvidia-smi: $*" >&2; exit 2 ;;
esac
"""

NODE_HOST = '''"""The fake 8-GPU node's host as every Python on it reads it: MemAvailable, free disk, ulimit -n."""
import os
import pathlib
import resource

_statvfs, _getrlimit, _read_text = os.statvfs, resource.getrlimit, pathlib.Path.read_text
GIB_BLOCKS = 3000 * 2**30 // 4096


def statvfs(path):
    real = _statvfs(path)
    return os.statvfs_result((4096, 4096, GIB_BLOCKS, GIB_BLOCKS, GIB_BLOCKS, real.f_files, real.f_ffree,
                              real.f_favail, real.f_flag, real.f_namemax))


def getrlimit(which):
    return (1048576, 1048576) if which == resource.RLIMIT_NOFILE else _getrlimit(which)


def read_text(self, *args, **kwargs):
    if str(self) == "/proc/meminfo":
        return "MemTotal: 2113929216 kB\\nMemAvailable: 2097152000 kB\\n"
    return _read_text(self, *args, **kwargs)


os.statvfs, resource.getrlimit, pathlib.Path.read_text = statvfs, getrlimit, read_text
'''

DRIVER = """#!{python}
# The stand-in for OpenRLHF's driver (RFT_LAUNCH_WRAPPER): records the command, writes the metrics a run would.
import json, os, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.monitor.metric_logs import write_scenario
with open({log!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd()}}) + "\\n")
write_scenario("healthy", Path(os.environ["METRICS_LOG_DIR"]))
print("stand-in driver: command recorded", flush=True)
"""


def fake_node(tmp: Path, wheels: Path, hub_url: str) -> dict[str, str]:
    """The node's environment: fake tools first on PATH, the host sitecustomize, the local wheelhouse and Hub."""
    bin_dir, site = tmp / "bin", tmp / "node-site"
    bin_dir.mkdir()
    site.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI.format(topo=ROOT / "tests" / "provision" / "topo" / "h100_sxm_nv18.txt"))
    (bin_dir / "nvcc").write_text("#!/usr/bin/env bash\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    (bin_dir / "c++").write_text("#!/usr/bin/env bash\nexit 0\n")
    (bin_dir / "python3").write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "rft-standin-driver").write_text(DRIVER.format(python=sys.executable, root=str(ROOT),
                                                              log=str(tmp / "driver.jsonl")))
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    (site / "sitecustomize.py").write_text(NODE_HOST)
    drop = ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHON", "PYTHONPATH", "CUDA_HOME", "CUDA_PATH", "ATTEMPT", "RAY_ADDRESS",
            "METRICS_LOG_DIR", "SAMPLES_LOG_DIR", "SPIKE_LOG_PATH", "CKPT_PATH", "SAVE_PATH", "RUN_NAME", "DATA_DIR",
            "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "DS_ACCELERATOR",
            *CACHE_DIRS)  # what this session's other tests may have set: a user's shell on the node has none of it
    env = {k: v for k, v in os.environ.items()
           if k not in drop and not k.startswith(("PIP_", "MAKE", "RFT_", "HF_", "SMOKE", "GIT_"))}
    keep = [d for d in env["PATH"].split(":") if d and not any((Path(d) / t).exists() for t in ("nvcc", "nvidia-smi"))]
    home = tmp / "home"
    home.mkdir()
    env.update(PATH=":".join([str(bin_dir), *keep]), PYTHONPATH=str(site), HOME=str(home),
               DATA_ROOT=str(tmp / "data-disk"), SCRATCH=str(tmp / "scratch"), HF_ENDPOINT=hub_url,
               HF_HUB_DISABLE_TELEMETRY="1", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
               PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", RFT_STANDIN_CUDA="1",
               RFT_LAUNCH_WRAPPER=str(bin_dir / "rft-standin-driver"), GOOGLE_API_KEY="")
    env.pop("GOOGLE_API_KEY")
    return env


def fresh_clone(dest: Path) -> Path:
    """This working tree as a new user's clone: every file git would commit (tracked or not ignored), one commit."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "clone")
    return dest


def test_every_not_run_row_names_a_readme_line():
    """A row of NOT_RUN that matches no README command is stale: the README changed under it."""
    readme = (ROOT / "README.md").read_text()
    commands = block_commands(readme, FIRST_HOUR) + block_commands(readme, WORKFLOW)
    assert {p for p in NOT_RUN if any(c.startswith(p) for c in commands)} == set(NOT_RUN)
    assert block_commands("## h\n```bash\na # x\nb \\\n  'c#d' \\\n  e  # y\n```\n", "## h") == ["a", "b 'c#d' e"]


@pytest.mark.slow
def test_readme_first_hour_and_workflow_on_a_fake_node(tmp_path, pristine_openrlhf_root):
    readme = (ROOT / "README.md").read_text()
    first_hour, workflow = block_commands(readme, FIRST_HOUR), block_commands(readme, WORKFLOW)
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    wheels = build_wheelhouse(tmp_path / "wheelhouse", pristine_openrlhf_root / "openrlhf", real_site=site)
    hub = HubServer(HubRepo("openai/gpt-oss-20b", {"config.json": b'{"model_type": "gpt_oss"}',
                                                   "model.safetensors": b"w" * 4096}))
    try:
        clone = fresh_clone(tmp_path / "clone")
        node = Node(clone, fake_node(tmp_path, wheels, hub.url), tmp_path / "driver.jsonl")
        used: set[str] = set()
        run_block(node, first_hour, used)
        hub_files = [p for _, p in hub.repo.requests if "/resolve/" in p]
    finally:
        hub.close()
    py = node.env["PY"]
    assert py == str(clone / ".venv-train" / "bin" / "python")
    plan = node.output("make train DRY_RUN=1")
    assert "# prerequisites (rft/provision/prereqs.py)\n  all met" in plan and "would build" in plan  # the node is whole
    assert "dry run: configuration OK" in node.output("bash train_grpo_20b_a28a.sh --dry-run")
    assert any(p.endswith("/model.safetensors") for p in hub_files)  # the model came through the download
    (launch,) = [json.loads(x) for x in node.driver_log.read_text().splitlines()]
    dry = next(res for line, res in node.outputs if line.endswith("--dry-run") and "SMOKE" not in line)
    dry_command = shlex.split(dry.stdout.replace("\\\n", " "))
    assert launch["argv"][:3] == [py, "-m", "openrlhf.cli.train_ppo_ray"] and launch["argv"] == dry_command
    flags = launch["argv"][3:]
    assert flags[flags.index("--eps_clip") + 1] == "0.2" and flags[flags.index("--num_episodes") + 1] == "1"
    assert flags[flags.index("--prompt_data") + 1] == str(clone / "data" / "sft_rl_pool_400.jsonl")
    log = (clone / "train.log").read_text()
    assert "tag attempt-28-start created" in log and log.rstrip().endswith("stand-in driver: command recorded")
    assert git(clone, "status", "--porcelain") == ""  # the venv, the data and train.log leave the tree clean

    node.env.update(VIRTUAL_ENV=str(clone / ".venv-train"), PATH=f"{clone / '.venv-train' / 'bin'}:{node.env['PATH']}")
    run_block(node, workflow, used)
    assert used == set(NOT_RUN)
    assert git(clone, "branch", "--show-current") == "attempt-29-lr-1e-6"
    assert git(clone, "tag", "--list").split() == ["attempt-28-start", "attempt-29-start"]
    assert len(node.driver_log.read_text().splitlines()) == 2
    note = (clone / "notes" / "attempt-29-lr-1e-6.md").read_text()
    assert BEGIN in note and "best: global_step10_hf" in note
    assert f"commit `{git(clone, 'rev-parse', 'attempt-29-start')[:12]}`" in note  # the record of the launch
    assert row_marker("29") in (clone / "rl_grpo_research.md").read_text()
