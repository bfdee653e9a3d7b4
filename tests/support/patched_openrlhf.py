"""Make `import openrlhf` give the real OpenRLHF 0.9.3 with our patch series applied, on CPU.

`install_patched` (behind the session fixture `patched_openrlhf` in tests/conftest.py) applies `patches/series`
with apply_patches.sh to a fresh copy of the pristine wheel and puts that copy first on sys.path, together with the
import-only stand-ins (`stub_paths()`: flash_attn always; vllm only where the real vLLM is not installed, so the
vLLM suite always imports the real engine). If another test already imported openrlhf, it checks that copy is
patched.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "tests" / "stubs"
KERNEL_STUBS = ROOT / "rft" / "cpu" / "site"  # flash_attn (CUDA only), shared with the CPU launch profile
ENGINE_STUBS = STUBS / "engine"  # vllm, for the main suite
APPLY = ROOT / "apply_patches.sh"

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")


def run_apply(*args: str, target: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run apply_patches.sh with the given arguments (and --target) and capture its output."""
    cmd = ["bash", str(APPLY), *args]
    if target is not None:
        cmd += ["--target", str(target)]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})


def real_vllm_installed() -> bool:
    """True when a vllm package other than our stand-in is importable (the vLLM suite's environment)."""
    spec = importlib.util.find_spec("vllm") if "vllm" not in sys.modules else sys.modules["vllm"].__spec__
    return spec is not None and spec.origin is not None and not Path(spec.origin).is_relative_to(STUBS)


def stub_paths() -> list[Path]:
    """The stand-in directories to import OpenRLHF with: flash_attn always, vllm only without the real one."""
    return [KERNEL_STUBS] if real_vllm_installed() else [KERNEL_STUBS, ENGINE_STUBS]


def stub_env(extra_path: Path | None = None) -> dict[str, str]:
    """Environment for a subprocess that imports (patched) OpenRLHF on CPU."""
    paths = [str(p) for p in (extra_path, *stub_paths()) if p is not None]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "DS_ACCELERATOR": "cpu",
        "TORCHDYNAMO_DISABLE": "1",
    }


def install_patched(pristine_root: Path, tmp_path_factory) -> Path:
    """Directory whose `openrlhf/` is the patched 0.9.3 that `import openrlhf` now resolves to."""
    for stub in reversed(stub_paths()):
        if str(stub) not in sys.path:
            sys.path.insert(0, str(stub))
    if "openrlhf" in sys.modules:
        site = Path(sys.modules["openrlhf"].__path__[0]).parent
        res = run_apply("--check", target=site)
        if res.returncode != 0:
            pytest.fail(f"openrlhf already imported from {site} and it is not patched:\n{res.stdout}{res.stderr}")
        return site
    site = tmp_path_factory.mktemp("openrlhf-patched")
    shutil.copytree(pristine_root / "openrlhf", site / "openrlhf")
    res = run_apply(target=site)
    if res.returncode != 0:
        pytest.fail(f"apply_patches.sh failed:\n{res.stdout}{res.stderr}")
    sys.path.insert(0, str(site))
    return site
