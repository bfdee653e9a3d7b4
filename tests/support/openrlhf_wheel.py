"""The pristine OpenRLHF 0.9.3 source, unpacked from the real wheel (the base every patched copy starts from)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
