"""scripts/patch_branch.py: patches/ -> a git branch on v0.9.3 (built from the real wheel) -> patches/, byte for byte."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rft.fixtures.patched_openrlhf import ROOT, run_apply

SCRIPT = ROOT / "scripts" / "patch_branch.py"
PATCHES = ROOT / "patches"
spec = importlib.util.spec_from_file_location("patch_branch", SCRIPT)
patch_branch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(patch_branch)


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


def git(repo: Path, *args: str) -> str:
    return patch_branch.git(repo, *args)


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name == "series" or p.suffix == ".patch"}


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    """A repository built from the pristine wheel with this tree's series imported as branch rft-series."""
    repo = tmp_path_factory.mktemp("branch") / "openrlhf-git"
    res = cli("import", "--repo", str(repo))
    assert res.returncode == 0, res.stderr
    assert f"{len(patch_branch.read_series(PATCHES))} commits" in res.stdout
    return repo


def test_import_then_export_reproduces_the_patches_byte_for_byte(imported, tmp_path):
    subjects = git(imported, "log", "--reverse", "--format=%s", "v0.9.3..rft-series").splitlines()
    assert [s.split(":")[0] + ".patch" for s in subjects] == patch_branch.read_series(PATCHES)
    out = tmp_path / "out"
    res = cli("export", "--repo", str(imported), "--patches", str(out))
    assert res.returncode == 0, res.stderr
    assert files(out) == files(PATCHES)
    again = tmp_path / "again"  # a second export of the same branch: the same bytes, whatever the clock says
    assert patch_branch.export_series(imported, "rft-series", again) == patch_branch.read_series(PATCHES)
    assert files(again) == files(PATCHES)


def test_an_edit_on_the_branch_shows_up_in_its_patch_only(imported, tmp_path, pristine_openrlhf_root):
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--branch", "rft-series", str(imported), str(repo)], check=True)
    loss = repo / "openrlhf/models/loss.py"
    marker = "# rft: an edit made on the branch\n"
    loss.write_text(marker + loss.read_text())
    git(repo, "commit", "-q", "-a", "--fixup=:/^loss:")
    subprocess.run(["git", "-C", str(repo), "rebase", "-q", "-i", "--autosquash", "v0.9.3"], check=True,
                   env={**os.environ, **patch_branch.GIT_ENV, "GIT_SEQUENCE_EDITOR": ":"}, capture_output=True)
    out = tmp_path / "out"
    assert patch_branch.export_series(repo, "rft-series", out) == patch_branch.read_series(PATCHES)
    before, after = files(PATCHES), files(out)
    assert [n for n in before if before[n] != after[n]] == ["loss.patch"]
    assert f"+{marker}".encode() in after["loss.patch"]
    site = tmp_path / "site"
    shutil.copytree(pristine_openrlhf_root, site)
    res = run_apply(target=site, env={"PATCH_DIR": str(out)})
    assert res.returncode == 0, res.stderr
    assert (site / "openrlhf/models/loss.py").read_text().startswith(marker)


def test_a_plain_diff_imports_and_exports_in_mail_form(tmp_path, pristine_openrlhf_root):
    plain = tmp_path / "plain"
    plain.mkdir()
    text = (pristine_openrlhf_root / "openrlhf/utils/agent.py").read_text().splitlines(keepends=True)
    diff = ["--- a/openrlhf/utils/agent.py\n", "+++ b/openrlhf/utils/agent.py\n", "@@ -1,3 +1,4 @@\n",
            "+# rft: a plain diff\n", *(" " + ln for ln in text[:3])]
    (plain / "agent.patch").write_text("".join(diff))
    (plain / "series").write_text("agent.patch\n")
    repo = tmp_path / "repo"
    assert patch_branch.import_series(repo, "rft-series", plain) == ["agent.patch"]
    out = tmp_path / "out"
    assert patch_branch.export_series(repo, "rft-series", out) == ["agent.patch"]
    mail = (out / "agent.patch").read_text()
    assert mail.startswith("From 0000000000000000000000000000000000000000 ") and "\nSubject: agent\n" in mail
    assert "+# rft: a plain diff\n" in mail
    with pytest.raises(patch_branch.SeriesError, match="already has branch rft-series"):
        patch_branch.import_series(repo, "rft-series", plain)
    assert patch_branch.import_series(repo, "rft-series", plain, force=True) == ["agent.patch"]


def test_a_commit_without_a_patch_name_is_refused(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "series").write_text("")
    repo = patch_branch.base_repo(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "rft-series", "v0.9.3")
    (repo / "openrlhf/utils/agent.py").write_text("# edited\n")
    git(repo, "commit", "-q", "-a", "-m", "Fix the agent")
    with pytest.raises(patch_branch.SeriesError, match=r"'Fix the agent': the subject must start with '<name>:'"):
        patch_branch.export_series(repo, "rft-series", tmp_path / "out")
    res = cli("export", "--repo", str(repo), "--patches", str(tmp_path / "out"))
    assert res.returncode == 1 and "patch_branch.py: commit" in res.stderr
    assert cli("--help").returncode == 0
