"""The one-time model download, refused before it starts when the cache's disk lacks room.

`python -m rft.provision.download MODEL` asks the Hub for the repo's file list with sizes (`model_info` with
`files_metadata`), keeps what a download would fetch (without `rft.gptoss.mxfp4.SKIPPED_WEIGHT_COPIES`: gpt-oss's
original/ and metal/ weight copies), subtracts what the cache already holds, and compares the rest with the free
space at the cache (HF_HOME, defaulting to the data disk: rft/provision/caches.py). Short: one line naming both
figures, exit 1, nothing downloaded. Else `snapshot_download` of that revision, the same patterns. HF_ENDPOINT
and HF_TOKEN are honoured as by any huggingface_hub call.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rft.provision.caches import cache_env
from rft.provision.host import free_gib

GIB = 2**30


@dataclass(frozen=True)
class Plan:
    """What a download of `repo` at commit `sha` would fetch, and where."""

    repo: str
    sha: str
    files: dict[str, int]  # every file kept by the patterns -> size in bytes
    missing: dict[str, int]  # those not yet in the cache
    hub_cache: Path

    @property
    def missing_gib(self) -> float:
        return sum(self.missing.values()) / GIB


def plan(repo: str, revision: str | None = None) -> Plan:
    """Ask the Hub (HF_ENDPOINT) what a download of `repo` would fetch; raises SystemExit naming a size-less file."""
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.constants import HF_HUB_CACHE
    from huggingface_hub.utils import filter_repo_objects

    from rft.gptoss.mxfp4 import SKIPPED_WEIGHT_COPIES

    info = HfApi().model_info(repo, revision=revision, files_metadata=True)
    kept = list(filter_repo_objects(info.siblings or [], ignore_patterns=SKIPPED_WEIGHT_COPIES,
                                    key=lambda s: s.rfilename))
    unsized = [s.rfilename for s in kept if s.size is None]
    if unsized:
        raise SystemExit(f"download: the Hub gave no size for {repo} {unsized[0]}: cannot check the disk first")
    files = {s.rfilename: int(s.size) for s in kept}
    missing = {name: size for name, size in files.items()
               if not isinstance(try_to_load_from_cache(repo, name, revision=info.sha), str)}
    return Plan(repo, info.sha, files, missing, Path(HF_HUB_CACHE))


def room_problem(p: Plan, free: float | None) -> str | None:
    """One line when the cache's disk has less free space than the files still to fetch, else None."""
    if free is None or free >= p.missing_gib:
        return None
    return (f"download: {p.repo} needs {p.missing_gib:.1f} GiB ({len(p.missing)} of {len(p.files)} files not yet "
            f"cached) at {p.hub_cache}, which has {free:.1f} GiB free: free space there or set DATA_ROOT "
            "(or HF_HOME) to a disk with room")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rft.provision.download", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="Hub repo id, e.g. openai/gpt-oss-20b")
    ap.add_argument("--revision", default=None, help="branch, tag or commit (default: the repo's main)")
    ap.add_argument("--check", action="store_true", help="only size the download and check the disk")
    a = ap.parse_args(argv)
    for var, value in cache_env(os.environ).items():  # before huggingface_hub reads HF_HOME at import
        os.environ.setdefault(var, value)
    p = plan(a.model, a.revision)
    problem = room_problem(p, free_gib(p.hub_cache))
    if problem:
        print(problem, file=sys.stderr)
        return 1
    print(f"download: {p.repo}@{p.sha[:12]}: {p.missing_gib:.1f} GiB to fetch ({len(p.missing)} files) into "
          f"{p.hub_cache}", file=sys.stderr)
    if a.check:
        return 0
    from huggingface_hub import snapshot_download

    from rft.gptoss.mxfp4 import SKIPPED_WEIGHT_COPIES

    print(snapshot_download(repo_id=p.repo, revision=p.sha, ignore_patterns=SKIPPED_WEIGHT_COPIES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
