"""Shared fixtures: the pristine OpenRLHF 0.9.3 source, unpacked from the real wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WHEEL_DIR = ROOT / ".cache" / "wheels"


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


@pytest.fixture(scope="session")
def pristine_openrlhf_root(tmp_path_factory) -> Path:
    """A read-only-by-convention directory holding the pristine `openrlhf/` package from the wheel."""
    out = tmp_path_factory.mktemp("openrlhf-pristine")
    prefix = "openrlhf-0.9.3.data/purelib/"
    with zipfile.ZipFile(openrlhf_wheel()) as z:
        for name in z.namelist():
            if name.startswith(prefix + "openrlhf/") and not name.endswith("/"):
                dest = out / name[len(prefix):]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(name))
    return out


@pytest.fixture
def openrlhf_copy(pristine_openrlhf_root, tmp_path) -> Path:
    """A fresh writable copy of the pristine source: `<dir>/openrlhf/...`; returns `<dir>`."""
    dest = tmp_path / "site"
    shutil.copytree(pristine_openrlhf_root, dest)
    return dest
