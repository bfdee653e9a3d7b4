"""Shared fixtures: the pristine OpenRLHF 0.9.3 source, unpacked from the real wheel; the two suites.

`make test` runs two suites: `-m "not vllm"` in .venv, and `-m vllm` in .venv-vllm with RFT_VLLM_SUITE=1. In the
vLLM suite a missing or stand-in vLLM is an error, never a skip; elsewhere `vllm` tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WHEEL_DIR = ROOT / ".cache" / "wheels"
VLLM_SUITE_ENV = "RFT_VLLM_SUITE"


def real_vllm_problem() -> str | None:
    """Why the real vLLM cannot be used here (None when `import vllm` gives the real engine)."""
    try:
        import vllm
    except Exception as e:  # noqa: BLE001  (any import failure is the answer)
        return f"import vllm failed: {e!r}"
    origin = Path(vllm.__file__).resolve()
    if origin.is_relative_to(ROOT / "tests" / "stubs"):
        return f"import vllm gave the test stand-in {origin}, not the real engine"
    return None


def pytest_configure(config) -> None:
    """The vLLM suite refuses to start without the real engine."""
    if os.environ.get(VLLM_SUITE_ENV) == "1":
        problem = real_vllm_problem()
        if problem:
            raise pytest.UsageError(f"{VLLM_SUITE_ENV}=1 but {problem}: build .venv-vllm (make test)")


def pytest_collection_modifyitems(config, items) -> None:
    """Outside the vLLM suite, `vllm` tests skip (with the reason) when the real engine is missing."""
    marked = [item for item in items if item.get_closest_marker("vllm")]
    if os.environ.get(VLLM_SUITE_ENV) == "1" or not marked:
        return
    problem = real_vllm_problem()
    if problem:
        skip = pytest.mark.skip(reason=f"needs the real vLLM ({problem}); run `make test`")
        for item in marked:
            item.add_marker(skip)


def openrlhf_wheel() -> Path:
    """The openrlhf 0.9.3 wheel (downloaded by `make venv`; fetched from PyPI here if missing)."""
    found = sorted(WHEEL_DIR.glob("openrlhf-0.9.3-*.whl"))
    if not found:
        WHEEL_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "openrlhf==0.9.3", "-d", str(WHEEL_DIR)],
            check=True,
        )
        found = sorted(WHEEL_DIR.glob("openrlhf-0.9.3-*.whl"))
    return found[0]


def unpack_pristine_openrlhf(out: Path) -> Path:
    """Unpack the wheel's pristine `openrlhf/` package into `out` (returned)."""
    prefix = "openrlhf-0.9.3.data/purelib/"
    with zipfile.ZipFile(openrlhf_wheel()) as z:
        for name in z.namelist():
            if name.startswith(prefix + "openrlhf/") and not name.endswith("/"):
                dest = out / name[len(prefix):]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(name))
    return out


@pytest.fixture(scope="session")
def pristine_openrlhf_root(tmp_path_factory) -> Path:
    """A read-only-by-convention directory holding the pristine `openrlhf/` package from the wheel."""
    return unpack_pristine_openrlhf(tmp_path_factory.mktemp("openrlhf-pristine"))


@pytest.fixture
def openrlhf_copy(pristine_openrlhf_root, tmp_path) -> Path:
    """A fresh writable copy of the pristine source: `<dir>/openrlhf/...`; returns `<dir>`."""
    dest = tmp_path / "site"
    shutil.copytree(pristine_openrlhf_root, dest)
    return dest
