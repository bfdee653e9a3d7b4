"""rft/provision/train_env.py and `make train`: the environment found by what it can import, the install recipe's order and
pins, the build beside and rename, and a dry run that runs nothing (a fake nvidia-smi stands in for the GPUs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rft.provenance import REPO_ROOT as ROOT
from rft.provision import train_env
from rft.provision.caches import CACHE_DIRS, cache_env
from rft.provision.train_env import STACK, describe, find_env, install_steps, judge, relocate
from tests.support.wheelhouse import build_wheelhouse

PINNED = {mod: [version, True] for mod, (_, version) in STACK.items()}

FAKE_SMI = """#!/usr/bin/env bash
for i in 0 1 2 3 4 5 6 7; do
    if [[ "$1" == --query-gpu=driver_version ]]; then echo 570.133.20; else echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-$i)"; fi
done
"""


def fake_env(root: Path, versions: dict[str, str | None]) -> Path:
    """An interpreter whose sys.path holds a stand-in of each package at `versions` (None: absent)."""
    site = root / "site"
    for mod, (dist, _) in STACK.items():
        version = versions.get(mod)
        if version is None:
            continue
        (site / mod).mkdir(parents=True)
        (site / mod / "__init__.py").write_text("")
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/usr/bin/env bash\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    return python


def test_judge_wants_every_package_importable_at_its_pin():
    assert judge("py", PINNED).ok
    assert judge("py", {**PINNED, "torch": ["2.9.1+cu128", True]}).ok  # local build tags are the same release
    rep = judge("py", {**PINNED, "vllm": ["0.15.0", True], "flash_attn": [None, False],
                       "openrlhf": ["0.9.3", False]})
    assert rep.problems == ["vllm 0.15.0, pinned 0.15.1", "openrlhf missing", "flash-attn missing"]


def test_the_active_env_with_the_stack_wins_over_a_half_built_venv(tmp_path):
    pinned = {mod: version for mod, (_, version) in STACK.items()}
    conda = fake_env(tmp_path / "conda", pinned)
    half = fake_env(tmp_path / "repo" / ".venv-train", {"torch": "2.9.1"})  # an interrupted build
    env = {"CONDA_PREFIX": str(tmp_path / "conda"), "PATH": "/nonexistent"}
    found, reports = find_env(env, tmp_path / "repo" / ".venv-train")
    assert [r.python for r in reports] == [str(half), str(conda)]
    assert found is not None and found.python == str(conda)
    assert "vllm missing" in reports[0].problems
    text = describe(found, reports, tmp_path / "repo" / ".venv-train", "python3")
    assert f"environment found: {conda} (nothing to install)" in text


def test_the_install_order_and_its_pins(tmp_path):
    steps = install_steps("python3.12", tmp_path / ".venv-train.building")
    whats = [w for w, _ in steps]
    argv = {w: a for w, a in steps}
    torch_step = next(w for w in whats if w.startswith("torch=="))
    flash_step = next(w for w in whats if w.startswith("flash-attn 2.8.3+rft.standin"))
    rest_step = next(w for w in whats if w.startswith("the rest"))
    assert whats.index(torch_step) < whats.index(flash_step) < whats.index(rest_step) < whats.index("pip check")
    assert argv[torch_step][-3:] == ["torch==2.9.1", "torchvision==0.24.1", "torchaudio==2.9.1"]
    assert argv[flash_step][-1] == str(tmp_path / ".venv-train.building" / train_env.standin_wheel_name())
    assert not any("flash-attn==" in a for _, argv_ in steps for a in argv_)  # nothing builds flash-attn
    assert argv[rest_step][-2:] == ["-e", f"{train_env.REPO}[train]"] and "-c" in argv[rest_step]
    held = train_env.constraints_text().split()
    assert "torch==2.9.1" in held and "flash-attn==2.8.3+rft.standin" in held  # the rest cannot move them
    assert all(a[0] == str(tmp_path / ".venv-train.building" / "bin" / "python") for _, a in steps[1:])


def test_the_stack_matches_the_train_extra():
    """STACK and pyproject's `train` extra name the same versions (one place to bump is not enough)."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    pins = {r.split("==")[0].split("[")[0]: r.split("==")[1].split()[0] for r in extra if "==" in r}
    for dist, version in STACK.values():
        if dist in pins:
            assert pins[dist] == version, dist
    assert {"openrlhf", "vllm", "deepspeed", "ray", "transformers", "peft"} <= set(pins)


def test_relocate_renames_a_finished_venv_and_its_scripts(tmp_path):
    building = tmp_path / ".venv-train.building"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(building)], check=True)
    (building / "bin" / "tool").write_text(f"#!{building}/bin/python\nprint('ok')\n")
    relocate(building, tmp_path / ".venv-train")
    assert not building.exists()
    assert (tmp_path / ".venv-train" / "bin" / "tool").read_text().startswith(f"#!{tmp_path / '.venv-train'}/bin/")
    assert str(building) not in (tmp_path / ".venv-train" / "bin" / "activate").read_text()
    res = subprocess.run([str(tmp_path / ".venv-train" / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
                         capture_output=True, text=True, check=True)
    assert res.stdout.strip() == str(tmp_path / ".venv-train")


def fake_tools(bin_dir: Path, *, python: str | None = None, nvcc: str | None = None) -> dict[str, str]:
    """An environment whose PATH starts with a fake 8-GPU nvidia-smi (driver 570.133.20) and, if given, a python3
    answering `--version` with `python` and an nvcc of release `nvcc`; no other nvcc is reachable."""
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    if python:
        (bin_dir / "python3").write_text(f'#!/usr/bin/env bash\n[ "$1" = --version ] && {{ echo "Python {python}"; '
                                         f'exit 0; }}\nexec "{sys.executable}" "$@"\n')
    if nvcc:
        (bin_dir / "nvcc").write_text(f"#!/usr/bin/env bash\necho 'Cuda compilation tools, release {nvcc}, V{nvcc}.1'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHON", "CUDA_HOME",
                                                               "CUDA_PATH", "MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    # (the make variables: the suite runs under `make test`; a user's `make train` starts from a shell)
    keep = [d for d in env["PATH"].split(":") if d and not (Path(d) / "nvcc").exists()]
    env["PATH"] = ":".join([str(bin_dir), *keep])
    return env


def make_train_dry_run(env: dict[str, str], venv: Path, python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "train", "DRY_RUN=1",
                           f"PYTHON={python}", f"TRAIN_VENV={venv}"],
                          capture_output=True, text=True, env=env, timeout=300)


def test_make_train_dry_run_on_a_gpu_node_runs_nothing_and_prints_the_plan(tmp_path):
    venv = tmp_path / ".venv-train"
    res = make_train_dry_run(fake_tools(tmp_path / "bin", nvcc="12.8"), venv)
    assert "make train: 8 GPU(s) (nvidia-smi -L)" in res.stderr
    out = res.stdout
    assert "ERROR nvcc" not in out and "ERROR driver" not in out and "ERROR python" not in out
    assert f"would build {venv}.building, verify it, rename it to {venv}" in out
    order = [line.split(":")[0].strip() for line in out.splitlines() if line.startswith("  ") and ". " in line]
    assert [o.split(". ", 1)[1] for o in order][:5] == [
        "venv", "pip, setuptools, wheel", "torch==2.9.1 (vLLM 0.15.1's pin) first",
        "flash-attn 2.8.3+rft.standin", "the rest"]
    assert not venv.exists() and not Path(f"{venv}.building").exists()  # nothing ran


@pytest.mark.parametrize("extra", [[], ["DRY_RUN=1"]])
def test_make_train_without_a_gpu_points_at_make_demo_in_one_line(tmp_path, extra):
    """No GPU (an nvidia-smi that lists none): make train runs nothing, exits non-zero and says, in one line, that
    the CPU loop is make demo."""
    env = fake_tools(tmp_path / "bin")
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/usr/bin/env bash\nexit 0\n")
    res = subprocess.run(["make", "--no-print-directory", "-s", "-C", str(ROOT), "train", *extra,
                          f"TRAIN_VENV={tmp_path / 'venv'}", f"VLLM_VENV={tmp_path / 'vllm'}"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode != 0 and res.stdout == ""
    said = [ln for ln in res.stderr.splitlines() if not ln.startswith("make: ***")]
    assert said == ["make train: no GPU here (nvidia-smi -L lists none): training needs the 8-GPU node; make demo "
                    "runs the whole loop on CPU"]
    assert not (tmp_path / "venv").exists() and not (tmp_path / "vllm").exists()


def test_make_demo_is_the_cpu_loop_and_old_make_names_are_refused(tmp_path):
    """make demo: the patched .venv-vllm, then train_grpo_cpu.sh in it; MODULES / GPU_CHECK_ARGS / REHEARSE_ARGS
    on the command line are refused naming ARGS."""
    plan = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(ROOT), "demo",
                           f"VLLM_VENV={tmp_path / 'vllm'}"], capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert f"PYTHON={tmp_path / 'vllm'}/bin/python bash train_grpo_cpu.sh" in plan.stdout
    assert "install_vllm_venv.sh" in plan.stdout and "apply_patches.sh" in plan.stdout
    old = subprocess.run(["make", "-n", "-C", str(ROOT), "mutate", "MODULES=answer passk"], capture_output=True,
                         text=True, timeout=60)
    assert old.returncode != 0 and 'MODULES is not read: give ARGS="answer passk" instead' in old.stderr


def test_make_train_dry_run_names_a_missing_nvcc_before_the_install_plan(tmp_path):
    venv = tmp_path / ".venv-train"
    res = make_train_dry_run(fake_tools(tmp_path / "bin"), venv)
    assert res.returncode != 0
    nvcc = [line for line in res.stdout.splitlines() if line.startswith("  ERROR nvcc: no CUDA compiler")]
    assert len(nvcc) == 1 and "cuda-toolkit-12-8" in nvcc[0]
    assert res.stdout.index("ERROR nvcc") < res.stdout.index("1. venv")  # named before any install step
    assert not venv.exists() and not Path(f"{venv}.building").exists()


def test_make_train_dry_run_names_an_old_python3(tmp_path):
    env = fake_tools(tmp_path / "bin", python="3.10.12", nvcc="12.8")
    python3 = tmp_path / "bin" / "python3"
    res = make_train_dry_run(env, tmp_path / ".venv-train", python=str(python3))
    assert res.returncode != 0
    assert f"  ERROR python: {python3} is 3.10.12; rft needs >= 3.11" in res.stdout, res.stdout + res.stderr


def test_launch_scripts_pick_the_interpreter_that_imports_openrlhf(tmp_path):
    """A .venv-train without OpenRLHF (an interrupted build) never shadows a working .venv."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "launch_lib.sh").write_text((ROOT / "scripts" / "launch_lib.sh").read_text())
    broken = tmp_path / ".venv-train" / "bin" / "python"
    broken.parent.mkdir(parents=True)
    broken.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" -S -I "$@"\n')  # no site-packages
    broken.chmod(0o755)
    working = tmp_path / ".venv" / "bin" / "python"
    working.parent.mkdir(parents=True)
    working.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "$@"\n')
    working.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHON")}
    res = subprocess.run(["bash", "-c", f'source "{tmp_path}/scripts/launch_lib.sh"; echo "$PYTHON"'],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.stdout.strip() == str(working), res.stderr
    res = subprocess.run(["bash", "-c", f'source "{tmp_path}/scripts/launch_lib.sh"; echo "$PYTHON"'],
                         capture_output=True, text=True, env={**env, "PYTHON": "/x/python"}, timeout=60)
    assert res.stdout.strip() == "/x/python"  # an explicit PYTHON wins



def test_verify_reads_only_its_marked_line_and_names_each_failure(tmp_path):
    """DeepSpeed logs to stdout before the result: only the RFT_VERIFY line counts; every failure is one
    `verify failed: ...` RuntimeError naming what failed, never a JSONDecodeError."""
    noise = "print('[WARNING] Setting accelerator to CPU'); "
    py = Path(sys.executable)
    env = dict(os.environ)
    train_env.run_check(py, noise + "import sys; print(sys.argv[1] + '[]')", [], env, "imports")  # passes
    cases = {
        noise + "import sys; print(sys.argv[1] + '[\"torch.cuda.is_available() is False\"]')":
            "verify failed: imports: torch.cuda.is_available() is False",
        noise: "verify failed: imports: no RFT_VERIFY line in",
        noise + "import sys; print(sys.argv[1] + '[oops')": "verify failed: imports: its RFT_VERIFY line is not JSON",
        "import sys; sys.stderr.write('ImportError: no vllm\\n'); sys.exit(3)":
            "verify failed: imports: " + sys.executable + " exited 3: ImportError: no vllm",
    }
    for script, start in cases.items():
        with pytest.raises(RuntimeError) as err:
            train_env.run_check(py, script, [], env, "imports")
        assert str(err.value).startswith(start), str(err.value)


def test_ensure_without_a_gpu_says_so_in_one_line_before_any_download(tmp_path, capfd, monkeypatch):
    env = fake_tools(tmp_path / "bin", nvcc="12.8")
    (tmp_path / "bin" / "nvidia-smi").unlink()
    monkeypatch.setenv("PATH", env["PATH"])
    venv = tmp_path / ".venv-train"
    assert train_env.main(["ensure", "--venv", str(venv), "--base-python", sys.executable]) == 1
    out, err = capfd.readouterr()
    gpu = [line for line in err.splitlines() if "GPU" in line and "ERROR" in line]
    assert out == "" and len(gpu) == 1 and gpu[0].startswith("  ERROR gpu: no GPU here"), err
    assert "nothing was downloaded" in err
    assert not venv.exists() and not Path(f"{venv}.building").exists()


ROOMY_PYTHON = """#!/usr/bin/env bash
# PYTHON for `make train-env`: the real interpreter; `-m rft.provision.train_env` runs its main() with this machine's
# host RAM, open-file limit and disk sizes read as an 8-GPU node's (every other prerequisite is checked for real).
if [[ "$1 $2" == "-m rft.provision.train_env" ]]; then
    shift 2
    exec "{python}" -c '
import sys
from dataclasses import replace
from rft.provision import train_env
read = train_env.read_host
train_env.read_host = lambda *a: replace(read(*a), mem_available_gib=2000.0, nofile=(1048576, 1048576),
                                         cache_free_gib=3000.0, venv_free_gib=3000.0, shm_gib=64.0)
sys.exit(train_env.main())' "$@"
fi
exec "{python}" "$@"
"""


@pytest.mark.slow
def test_make_train_env_end_to_end_from_a_local_wheelhouse(tmp_path, pristine_openrlhf_root):
    """`make train-env`: the real pip installs stand-in wheels through install_steps, build(), VERIFY, the rename
    and apply_patches.sh, with a fake 8-GPU nvidia-smi and nvcc. stdout is the interpreter alone; a failed verify
    is one line and keeps the build for a retry that downloads nothing; FusedAdam is built once, at the final path,
    where the launch looks; the venv leaves `git status` clean."""
    wheels = build_wheelhouse(tmp_path / "wheelhouse", pristine_openrlhf_root / "openrlhf")
    env = fake_tools(tmp_path / "bin", nvcc="12.8")
    python = tmp_path / "bin" / "python3.11"
    python.write_text(ROOMY_PYTHON.format(python=sys.executable))
    (tmp_path / "bin" / "c++").write_text("#!/usr/bin/env bash\nexit 0\n")  # the stand-in FusedAdam compiles nothing
    for tool in (python, tmp_path / "bin" / "c++"):
        tool.chmod(0o755)
    home, data_root = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    env = {k: v for k, v in env.items() if not k.startswith(("PIP_", "MAKE")) and k not in CACHE_DIRS}
    env.update(HOME=str(home), DATA_ROOT=str(data_root), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
               PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", RFT_STANDIN_CUDA="1")
    checkout = tmp_path / "checkout"  # a clone's view: the repo's .gitignore, the venv where make puts it
    checkout.mkdir()
    shutil.copy(ROOT / ".gitignore", checkout / ".gitignore")
    for args in (["init", "-q"], ["add", ".gitignore"], ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "i"]):
        subprocess.run(["git", "-C", str(checkout), *args], check=True)
    venv, building = checkout / ".venv-train", checkout / ".venv-train.building"

    def make_train_env() -> subprocess.CompletedProcess:
        return subprocess.run(["make", "--no-print-directory", "-s", "-C", str(ROOT), "train-env", f"PYTHON={python}",
                               f"TRAIN_VENV={venv}"], capture_output=True, text=True, env=env, timeout=600)

    res = make_train_env()
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"{venv}/bin/python\n", res.stdout  # only the interpreter: what PY=$(make -s train-env) gets
    assert "[1] venv" in res.stderr and "Successfully installed" in res.stderr  # pip's output went to stderr
    assert not building.exists() and not Path(f"{venv}.old").exists()
    extensions = data_root / "cache" / "torch_extensions" / "py311_cu128" / "fused_adam"
    assert (extensions / "builds.log").read_text() == f"{venv}\n"  # once, at the final path, where actors look
    assert not (home / ".cache" / "torch_extensions").exists()
    actor = subprocess.run([f"{venv}/bin/python", "-c", "from deepspeed.ops.op_builder import FusedAdamBuilder as F; "
                            "F().load()"], capture_output=True, text=True, env={**env, **cache_env(env)})
    assert actor.returncode == 0 and (extensions / "builds.log").read_text() == f"{venv}\n"  # no rebuild
    check = subprocess.run(["bash", str(ROOT / "apply_patches.sh"), "--check"], capture_output=True, text=True,
                           env={**env, "PYTHON": res.stdout.strip()})
    assert check.returncode == 0, check.stdout + check.stderr  # make train-env applied the series
    assert subprocess.run(["git", "-C", str(checkout), "status", "--porcelain"], capture_output=True, text=True,
                          check=True).stdout == ""

    # A build whose verify failed: the state build() keeps (the finished install back in .building, marked).
    train_env.relocate(venv, building)
    (building / train_env.INSTALLED_MARK).write_text("")
    env["RFT_STANDIN_CUDA"] = "0"
    res = make_train_env()
    assert res.returncode != 0 and res.stdout == "" and "Traceback" not in res.stderr, res.stderr
    (last,) = [line for line in res.stderr.splitlines() if line.startswith("train env: ")]
    assert last.startswith("train env: verify failed: imports and versions: torch.cuda.is_available() is False;")
    assert f"{building} kept" in last and not venv.exists() and (building / train_env.INSTALLED_MARK).exists()
    env["RFT_STANDIN_CUDA"] = "1"
    res = make_train_env()
    assert res.returncode == 0 and res.stdout == f"{venv}/bin/python\n", res.stderr
    assert "verifying it again, nothing downloaded" in res.stderr and "[1] venv" not in res.stderr
    assert (extensions / "builds.log").read_text() == f"{venv}\n"  # the same path: nothing rebuilt


def test_a_failed_fused_adam_build_puts_both_venvs_back(tmp_path):
    """FusedAdam is built after the rename; when it fails, the new venv goes back to .building (its scripts
    pointed there again) and the old .venv-train returns."""
    building, venv = tmp_path / ".venv-train.building", tmp_path / ".venv-train"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(building)], check=True)
    (building / train_env.INSTALLED_MARK).write_text("")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "old").write_text("the working environment\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DATA_ROOT": str(tmp_path / "data")}
    with pytest.raises(RuntimeError, match=r"^verify failed: FusedAdam at its final path: DeepSpeed FusedAdam build: "
                                           r"ModuleNotFoundError"):
        train_env.swap_in(building, venv, train_env.child_env(env))
    assert (venv / "bin" / "old").exists() and not Path(f"{venv}.old").exists()
    activate = (building / "bin" / "activate").read_text()
    assert (building / train_env.INSTALLED_MARK).exists() and activate.count(str(venv)) == activate.count(str(building)) > 0
    assert f"{building}.building" not in activate


def test_the_probe_reads_its_last_line_and_never_raises(tmp_path):
    """A startup hook that prints (a .pth, a sitecustomize) neither hides the result nor raises."""
    noisy = tmp_path / "noisy"
    noisy.write_text(f'#!/usr/bin/env bash\necho "conda hook says hello"\nexec "{sys.executable}" "$@"\n')
    noisy.chmod(0o755)
    rep = train_env.probe_env(str(noisy))
    assert rep.python == str(noisy) and "torch" in rep.found and rep.problems
    mute = tmp_path / "mute"
    mute.write_text("#!/usr/bin/env bash\necho 'not json'\n")
    mute.chmod(0o755)
    assert train_env.probe_env(str(mute)).problems == ["probe printed no result line: 'not json'"]
