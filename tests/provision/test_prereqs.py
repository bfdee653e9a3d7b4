"""rft/provision/prereqs.py: each gap of the node named with its fix, read from fake tools; and the flash_attn
stand-in wheel train_env installs: pip takes it for OpenRLHF's flash-attn==2.8.3, its kernels raise, and the
launch refuses what would call them."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from rft.launch.rules import flash_attn_rule
from rft.provenance import REPO_ROOT as ROOT
from rft.provision import host as host_facts
from rft.provision import prereqs
from rft.provision.prereqs import MIN_PYTHON, Host, problems, read_host
from rft.provision.train_env import STANDIN_VERSION, build_standin_wheel

GOOD = Host(python_version=(3, 12, 3), python="python3", gpus=8, driver=(570, 133, 20), nvcc_release=(12, 8),
            shm_gib=64.0, nofile=(1048576, 1048576), mem_available_gib=1900.0, cache_dir=Path("/mnt/data/hf"),
            cache_free_gib=3000.0, venv_free_gib=3000.0, cxx="/usr/bin/c++",
            python_include="/usr/include/python3.12", python_h=True,
            topology=(Path(__file__).resolve().parent / "topo" / "h100_sxm_nv18.txt").read_text())


def test_a_good_node_has_nothing_to_fix():
    assert problems(GOOD, "20b") == ([], []) and problems(GOOD, "120b") == ([], [])


@pytest.mark.parametrize(("change", "start"), [
    ({"python_version": (3, 10, 12)}, "python: python3 is 3.10.12; rft needs >= 3.11"),
    ({"python_version": None}, "python: python3 did not answer --version"),
    ({"python_h": False}, "Python.h: not in /usr/include/python3.12, python3's headers"),
    ({"gpus": 0, "topology": None}, "gpu: no GPU here (`nvidia-smi -L` lists none"),
    ({"cxx": None}, "c++: no C++ compiler ($CXX, or c++ on PATH)"),
    ({"driver": (525, 60, 12)}, "driver: 525.60.12 is below 525.60.13"),
    ({"driver": None}, "driver: nvidia-smi lists GPUs but no driver version"),
    ({"nvcc_release": None}, "nvcc: no CUDA compiler on PATH or under $CUDA_HOME/bin"),
    ({"nvcc_release": (13, 0)}, "nvcc: CUDA 13.0, torch is built for CUDA 12"),
    ({"shm_gib": 0.06}, "/dev/shm: 0.06 GiB free"),
    ({"nofile": (1024, 4096)}, "ulimit -n: hard limit 4096 < 65536"),
    ({"mem_available_gib": 80.0}, "host RAM: 80 GiB available, the 20b recipe needs ~86 GiB"),
    ({"cache_free_gib": 11.0}, "disk: 11 GiB free at /mnt/data/hf for a 12 GiB checkpoint"),
    ({"venv_free_gib": 20.0}, "disk: 20 GiB free for the venv"),
])
def test_each_gap_is_one_blocking_line_with_its_fix(change, start):
    bad, warn = problems(replace(GOOD, **change), "20b")
    assert len(bad) == 1 and bad[0].startswith(start) and ": " in bad[0][len(start):] and not warn


def test_boundaries_and_warnings():
    assert problems(replace(GOOD, driver=(525, 60, 13)), "20b")[0] == []
    assert problems(replace(GOOD, driver=(565, 57, 1)), "20b")[1][0].startswith("driver: 565.57.1 runs CUDA 12.8")
    assert problems(replace(GOOD, nofile=(1024, 1048576)), "20b") == ([], [
        "ulimit -n: 1024 < 65536: run `ulimit -n 1048576` before launching"])
    assert problems(replace(GOOD, python_version=MIN_PYTHON), "20b") == ([], [])
    assert problems(replace(GOOD, mem_available_gib=90.0), "20b")[0] == []
    assert problems(replace(GOOD, mem_available_gib=90.0), "120b")[0][0].startswith("host RAM: 90 GiB available, the 120b")
    # an environment already built: its own interpreter runs, and the venv needs no disk
    assert problems(replace(GOOD, python_version=(3, 10, 0), venv_free_gib=1.0), "20b", building=False) == ([], [])


def test_min_python_is_pyprojects():
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert spec == ">=" + ".".join(map(str, MIN_PYTHON))


def fake_bin(tmp_path: Path, **scripts: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        (bin_dir / name.replace("_", "-")).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name.replace("_", "-")).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path)}


def test_read_host_parses_the_tools_output(tmp_path):
    env = fake_bin(
        tmp_path,
        nvidia_smi='if [[ "$1" == --query-gpu=driver_version ]]; then echo 550.54.15; echo 550.54.15; '
                   'else echo "GPU 0: NVIDIA H100"; echo "GPU 1: NVIDIA H100"; fi',
        nvcc="echo 'nvcc: NVIDIA (R) Cuda compiler driver'; echo 'Cuda compilation tools, release 12.4, V12.4.131'",
        python3='echo "Python 3.11.9"')
    host = read_host(env, "python3", tmp_path / ".venv-train")
    assert (host.gpus, host.driver, host.nvcc_release, host.python_version) == (2, (550, 54, 15), (12, 4), (3, 11, 9))
    assert host.cache_dir == tmp_path / "hf" and host.cache_free_gib is not None and host.cache_free_gib > 0


def test_read_host_without_tools_or_gpus(tmp_path):
    env = fake_bin(tmp_path)
    host = read_host({**env, "CUDA_HOME": str(tmp_path / "nowhere")}, str(tmp_path / "missing-python"), tmp_path)
    assert (host.gpus, host.driver, host.nvcc_release, host.python_version) == (0, None, None, None)
    assert prereqs.cache_dir({"HOME": "/home/u"}) == Path("/mnt/data/cache/hf")  # the data disk, not ~/.cache
    assert prereqs.cache_dir({"DATA_ROOT": "/d"}) == Path("/d/cache/hf")


def test_the_standin_wheel_satisfies_openrlhfs_pin_and_refuses_calls(tmp_path):
    """Installed by the real pip into a fresh venv: `flash-attn==2.8.3` is met, imports work, a kernel raises."""
    wheel = build_standin_wheel(tmp_path / "wheels")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    subprocess.run([*pip, "install", "--no-index", "--no-deps", str(wheel)], check=True, capture_output=True)
    res = subprocess.run([*pip, "install", "--no-index", "--no-deps", "flash-attn==2.8.3"], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr  # nothing to fetch: the pin is met by 2.8.3+rft.standin
    (site,) = venv.glob("lib/python*/site-packages")
    code = ("import importlib.metadata as md, flash_attn.bert_padding as b\n"
            "from flash_attn.utils.distributed import all_gather\n"
            "print(md.version('flash-attn'))\n"
            "try:\n    b.pad_input(None)\nexcept RuntimeError as e:\n    print(e)\n")
    # this interpreter (einops, the stand-in's one requirement) with the venv's site-packages first
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}).stdout
    assert out.splitlines()[0] == STANDIN_VERSION == "2.8.3+rft.standin"
    assert "import-only stand-in" in out.splitlines()[1]


def test_the_launch_refuses_flash_attn_kernels_with_the_standin():
    flash = SimpleNamespace(attn_implementation="flash_attention_2", packing_samples=False)
    eager = SimpleNamespace(attn_implementation="eager", packing_samples=False)
    packed = SimpleNamespace(attn_implementation="eager", packing_samples=True)
    assert flash_attn_rule(eager, STANDIN_VERSION) == []
    assert flash_attn_rule(flash, "2.8.3") == [] and flash_attn_rule(flash, None) == []
    (err,) = flash_attn_rule(flash, STANDIN_VERSION)
    assert err.startswith("--attn_implementation flash_attention_2 call flash-attn kernels")
    assert flash_attn_rule(packed, STANDIN_VERSION)[0].startswith("--packing_samples call")


def test_host_ram_counts_no_consolidated_model():
    # 20b: two rank-0 dequantizations of 21B params to bf16, the rest 8 GiB
    assert prereqs.host_ram_need("20b")[0] == pytest.approx(2 * 42e9 / 2**30 + 8)
    # 120b on one node (offload, the default): the offloaded parameters and 4 streamed shards; on two nodes 8
    # shards and no parameters on the host; no term is the 234 GB consolidation a LoRA save used to need
    one, two = prereqs.host_ram_need("120b"), prereqs.host_ram_need("120b", offload=False)
    assert one[0] == pytest.approx(234e9 / 2**30 + 4 * 5 + 16) and prereqs.host_ram_need("120b", True) == one
    assert two[0] == pytest.approx(8 * 5 + 16) and "--offload" not in two[1]
    assert not any("consolidat" in what for p in ("20b", "120b") for _, what in prereqs.host_ram_terms(p))
    with pytest.raises(ValueError, match="profile 'small'"):
        prereqs.host_ram_terms("small")


def test_host_ram_counts_zero2_full_loads_per_rank():
    # ZeRO-2 (no zero.Init): each of the 4 actor ranks loads the whole bf16 model, and each of the 4 reference
    # ranks (stage 0 then) too; with the reference from the actor only the actor's 4 loads
    gib = 42e9 / 2**30
    assert prereqs.host_ram_need("20b", zero_stage=2)[0] == pytest.approx(8 * gib + 8)
    assert prereqs.host_ram_need("20b", zero_stage=2, ref_from_actor=True)[0] == pytest.approx(4 * gib + 8)
    assert "4 actor ranks each load the whole bf16 model" in prereqs.host_ram_need("20b", None, 2, True)[1]
    # ZeRO-3: rank 0 of each model dequantizes; without the reference model one load
    assert prereqs.host_ram_need("20b", ref_from_actor=True)[0] == pytest.approx(gib + 8)
    assert prereqs.host_ram_need("120b", offload=False, zero_stage=2)[0] == pytest.approx(8 * 234e9 / 2**30 + 16)
    with pytest.raises(ValueError, match="profile 'small'"):
        prereqs.host_ram_terms("small", zero_stage=2)


def test_the_launch_rule_counts_the_commands_zero_stage(monkeypatch):
    from rft.launch.rules import PROFILES, host_ram_rule

    monkeypatch.setattr(host_facts, "mem_available_gib", lambda: 200.0)
    lora = dict(offload=False, init_kl_coef=0.001)
    assert host_ram_rule(PROFILES["20b"], SimpleNamespace(zero_stage=3, **lora)) == []
    line = host_ram_rule(PROFILES["20b"], SimpleNamespace(zero_stage=2, **lora))
    assert line[0].startswith("host RAM: 200 GiB available, the 20b recipe needs ~321 GiB at once (ZeRO-2: 8 actor "
                              "and reference ranks")
    assert host_ram_rule(PROFILES["20b"], SimpleNamespace(zero_stage=2, ref_from_actor=True, **lora)) == []


def test_the_launch_rule_reads_the_same_figures(monkeypatch):
    from rft.launch.rules import PROFILES, host_ram_rule

    monkeypatch.setattr(host_facts, "mem_available_gib", lambda: 100.0)
    host = replace(GOOD, mem_available_gib=100.0)
    assert host_ram_rule(PROFILES["20b"], SimpleNamespace(offload=False)) == []
    assert host_ram_rule(PROFILES["120b"], SimpleNamespace(offload=False)) == []  # two nodes: 56 GiB
    line = host_ram_rule(PROFILES["120b"], SimpleNamespace(offload=True))
    assert line == problems(host, "120b", offload=True)[0] == problems(host, "120b")[0]
    assert line[0].startswith("host RAM: 100 GiB available, the 120b recipe needs ~254 GiB at once (4 actor ranks each")
    assert host_ram_rule(PROFILES["cpu"], SimpleNamespace(offload=True)) == []
    monkeypatch.setattr(host_facts, "mem_available_gib", lambda: 50.0)
    assert host_ram_rule(PROFILES["120b"], SimpleNamespace(offload=False))[0].startswith(
        "host RAM: 50 GiB available, the 120b recipe needs ~56 GiB")


def test_the_fixes_name_make_train_env():
    """`make train-env` is what builds the venv: its errors name its own fix, and the headers' package."""
    (py,) = problems(replace(GOOD, python_version=(3, 10, 12)), "20b")[0]
    assert py.endswith("run make train-env PYTHON=python3.11")
    (headers,) = problems(replace(GOOD, python_h=False), "20b")[0]
    assert "apt install python3.12-dev" in headers
    assert problems(replace(GOOD, python_h=False, cxx="/usr/bin/c++"), "20b", building=False) == ([], [])


def test_read_host_finds_the_compiler_and_the_headers(tmp_path):
    env = fake_bin(tmp_path, cxx_wrapper="true")
    host = read_host({**env, "CXX": str(tmp_path / "bin" / "cxx-wrapper")}, sys.executable, tmp_path)
    assert host.cxx == str(tmp_path / "bin" / "cxx-wrapper")
    assert host.python_h == (Path(host.python_include) / "Python.h").exists()
    (tmp_path / "empty").mkdir()
    bare = read_host({**fake_bin(tmp_path / "empty"), "CXX": "no-such-c++"}, str(tmp_path / "missing"), tmp_path)
    assert (bare.cxx, bare.python_include, bare.python_h) == (None, None, False)
    assert problems(bare, "20b")[0][0].startswith("gpu: no GPU here")
