"""pyproject.toml's packaging: the wheel holds every rft package and the device figures, never rft/fixtures."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from rft.provenance import REPO_ROOT as ROOT


def test_the_wheel_ships_the_stages_and_the_figures_but_not_the_fixtures(tmp_path):
    """Built by pip from a copy of the tree (setuptools writes build/ beside its sources)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "rft", src / "rft", ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    (wheel,) = (tmp_path / "dist").glob("rft-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not [n for n in names if n.startswith("rft/fixtures/")]
    for stage in ("provision", "plan", "launch", "gptoss", "train", "cpu", "spare"):
        assert f"rft/{stage}/__init__.py" in names, stage
    assert {"rft/plan/device_figures.toml", "rft/provision/host.py", "rft/spare/job.sh"} <= names
    assert (ROOT / "rft" / "fixtures" / "__init__.py").is_file()  # tests and benchmarks still import it from the tree
