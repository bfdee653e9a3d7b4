"""The patch series as a git branch of OpenRLHF: one commit per patch on the v0.9.3 tag.

  import  patches/series -> branch (default rft-series): one commit per patch, mail-format patches through
          `git am`, plain diffs through `git apply` with the patch's name as subject
  export  branch -> patches/*.patch + patches/series through `git format-patch`, byte-stable (zero commit id,
          no signature, fixed author and date, git's user configuration ignored)

A commit's subject is `<name>: <what>`; its patch is patches/<name>.patch. Without --repo the repository is
.cache/openrlhf-git, built from the pristine wheel in .cache/wheels on first use (see docs/patches.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE_TAG = "v0.9.3"
DEFAULT_REPO = ROOT / ".cache" / "openrlhf-git"
DEFAULT_BRANCH = "rft-series"
NAME = re.compile(r"[a-z0-9_]+")
AUTHOR = "rft <rft@localhost>"
EPOCH = "Thu, 1 Jan 1970 00:00:00 +0000"
# git with a fixed identity and date, and without the user's or the system's configuration (diff prefixes,
# signatures, renames, colours: anything that would change the exported bytes)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "rft", "GIT_AUTHOR_EMAIL": "rft@localhost", "GIT_AUTHOR_DATE": "1970-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "rft", "GIT_COMMITTER_EMAIL": "rft@localhost",
    "GIT_COMMITTER_DATE": "1970-01-01T00:00:00+0000",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}
FORMAT_PATCH = ["format-patch", "-1", "--stdout", "--keep-subject", "--zero-commit", "--no-signature",
                "--abbrev=12", "--stat=72", "--no-renames", "--diff-algorithm=myers", "--no-color"]


class SeriesError(RuntimeError):
    """The series, a patch or the branch cannot be used as asked; the message names which and why."""


def git(repo: Path, *args: str, stdin: str | None = None) -> str:
    """Run git in `repo` with GIT_ENV; its stdout, or SeriesError with git's message."""
    res = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True,
                         env={**os.environ, **GIT_ENV})
    if res.returncode != 0:
        raise SeriesError(f"git {' '.join(args[:2])} in {repo} failed:\n{res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def base_repo(repo: Path) -> Path:
    """`repo` as a git repository with the tag v0.9.3; built from the pristine wheel when it does not exist."""
    if (repo / ".git").exists():
        if not git(repo, "tag", "--list", BASE_TAG).strip():
            raise SeriesError(f"{repo}: no tag {BASE_TAG}; give an OpenRLHF checkout that has it")
        return repo
    if repo.exists() and any(repo.iterdir()):
        raise SeriesError(f"{repo} exists and is not a git repository")
    from rft.fixtures.openrlhf_wheel import unpack_pristine_openrlhf

    repo.mkdir(parents=True, exist_ok=True)
    unpack_pristine_openrlhf(repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "OpenRLHF 0.9.3 (wheel source)")
    git(repo, "tag", BASE_TAG)
    return repo


def read_series(patch_dir: Path) -> list[str]:
    """The patch file names patches/series lists, in order (blank lines and # comments skipped)."""
    series = patch_dir / "series"
    if not series.is_file():
        raise SeriesError(f"missing {series}")
    names = [ln.split("#", 1)[0].strip() for ln in series.read_text().splitlines()]
    names = [n for n in names if n]
    for n in names:
        if not (patch_dir / n).is_file():
            raise SeriesError(f"{series} names {n}, but {patch_dir / n} does not exist")
    return names


def import_series(repo: Path, branch: str, patch_dir: Path, force: bool = False) -> list[str]:
    """Build `branch` on v0.9.3 with one commit per patch of the series; the names committed."""
    base_repo(repo)
    if git(repo, "status", "--porcelain", "--untracked-files=no").strip():
        raise SeriesError(f"{repo} has uncommitted changes; commit or discard them first")
    exists = bool(git(repo, "branch", "--list", branch).strip())
    if exists and not force:
        raise SeriesError(f"{repo} already has branch {branch}; export it, or import again with --force")
    git(repo, "checkout", "-q", "-B", branch, BASE_TAG)
    names = read_series(patch_dir)
    for name in names:
        path = (patch_dir / name).resolve()
        text = path.read_text()
        try:
            if text.startswith("From "):
                git(repo, "am", "-q", "--keep", "--committer-date-is-author-date", str(path))
            else:
                git(repo, "apply", "--index", str(path))
                git(repo, "commit", "-q", "-m", Path(name).stem)
        except SeriesError as e:
            if text.startswith("From "):
                subprocess.run(["git", "-C", str(repo), "am", "--abort"], capture_output=True)
            raise SeriesError(f"{name} does not apply on {branch}:\n{e}") from None
    return names


def normalise(mail: str) -> str:
    """The patch with its From: and Date: headers fixed, so the branch's commit metadata never shows."""
    head, sep, body = mail.partition("\n\n")
    lines = [f"From: {AUTHOR}" if ln.startswith("From: ") else f"Date: {EPOCH}" if ln.startswith("Date: ")
             else ln for ln in head.split("\n")]
    return "\n".join(lines) + sep + body


def export_series(repo: Path, branch: str, patch_dir: Path) -> list[str]:
    """Write one patch per commit of `branch` since v0.9.3 and the series; stale patch files are removed."""
    base_repo(repo)
    commits = git(repo, "rev-list", "--reverse", f"{BASE_TAG}..{branch}").split()
    if not commits:
        raise SeriesError(f"{repo}: branch {branch} has no commits on {BASE_TAG}")
    patches: dict[str, str] = {}
    for commit in commits:
        subject = git(repo, "log", "-1", "--format=%s", commit).strip()
        name = subject.split(":", 1)[0].strip()
        if not NAME.fullmatch(name):
            raise SeriesError(f"commit {commit[:12]} '{subject}': the subject must start with '<name>:' "
                              "(lower case, digits, _), the patch's file name")
        if f"{name}.patch" in patches:
            raise SeriesError(f"two commits on {branch} are named {name}; squash them (git rebase -i)")
        patches[f"{name}.patch"] = normalise(git(repo, *FORMAT_PATCH, commit))
    patch_dir.mkdir(parents=True, exist_ok=True)
    for old in patch_dir.glob("*.patch"):
        if old.name not in patches:
            old.unlink()
    for name, text in patches.items():
        (patch_dir / name).write_text(text)
    (patch_dir / "series").write_text("".join(f"{name}\n" for name in patches))
    return list(patches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("import", "export"))
    parser.add_argument("--repo", type=Path, default=DEFAULT_REPO,
                        help=f"OpenRLHF git repository with tag {BASE_TAG} (default: {DEFAULT_REPO}, built from "
                             "the wheel when missing)")
    parser.add_argument("--branch", default=DEFAULT_BRANCH, help=f"the series' branch (default: {DEFAULT_BRANCH})")
    parser.add_argument("--patches", type=Path, default=ROOT / "patches", help="patch directory (default: patches/)")
    parser.add_argument("--force", action="store_true", help="import: rebuild an existing branch")
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        print("patch_branch.py: git is not installed", file=sys.stderr)
        return 2
    try:
        if args.command == "import":
            names = import_series(args.repo.resolve(), args.branch, args.patches.resolve(), args.force)
            print(f"{args.repo}: branch {args.branch} = {BASE_TAG} + {len(names)} commits")
        else:
            names = export_series(args.repo.resolve(), args.branch, args.patches.resolve())
            print(f"{args.patches}: {len(names)} patches from {args.repo} branch {args.branch}")
    except SeriesError as e:
        print(f"patch_branch.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
