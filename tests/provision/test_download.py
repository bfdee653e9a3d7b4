"""rft/provision/download.py against a local Hub (tests/support/hub_server.py, HF_ENDPOINT) with the real
huggingface_hub: sizes asked first, a download that would not fit refused before any file is fetched, gpt-oss's
extra weight copies left out, the cache on $DATA_ROOT by default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rft.provenance import REPO_ROOT as ROOT
from rft.provision.download import Plan, room_problem
from tests.support.hub_server import HubRepo, HubServer

REPO = "openai/gpt-oss-tiny"
FILES = {"config.json": b'{"model_type": "gpt_oss"}', "model.safetensors": b"w" * 4096,
         "original/model.safetensors": b"o" * 4096, "metal/model.bin": b"m" * 4096}


@pytest.fixture
def hub():
    server = HubServer(HubRepo(REPO, dict(FILES)))
    yield server
    server.close()


def download(hub: HubServer, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_ENDPOINT=hub.url, DATA_ROOT=str(tmp_path / "data"), HF_HUB_DISABLE_TELEMETRY="1",
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "rft.provision.download", REPO, *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)


def resolved(hub: HubServer) -> list[str]:
    return [path for method, path in hub.repo.requests if "/resolve/" in path and method == "GET"]


def test_downloads_once_into_the_data_disk_without_the_extra_copies(hub, tmp_path):
    res = download(hub, tmp_path)
    assert res.returncode == 0, res.stderr
    snapshot = Path(res.stdout.strip().splitlines()[-1])
    assert snapshot.is_relative_to(tmp_path / "data" / "cache" / "hf" / "hub")
    assert sorted(p.name for p in snapshot.rglob("*") if p.is_file()) == ["config.json", "model.safetensors"]
    assert (snapshot / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert not any("original/" in p or "metal/" in p for p in resolved(hub))
    assert "(2 files)" in res.stderr
    again = download(hub, tmp_path, "--check")  # everything cached: nothing left to fetch
    assert again.returncode == 0 and "0.0 GiB to fetch (0 files)" in again.stderr, again.stderr


def test_refuses_before_fetching_when_the_disk_lacks_room(hub, tmp_path):
    hub.repo.claimed["model.safetensors"] = 2**60  # the listing says 1 EiB; the disk has less
    res = download(hub, tmp_path)
    assert res.returncode == 1
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith(f"download: {REPO} needs 1073741824.0 GiB (2 of 2 files not yet cached) at ")
    assert "GiB free: free space there or set DATA_ROOT" in line
    assert resolved(hub) == []  # nothing was fetched
    assert any(p.startswith("/api/models/") and "blobs=" in p for _, p in hub.repo.requests)  # sizes asked


def test_room_problem_boundary(tmp_path):
    p = Plan(REPO, "s", {"a": 3 * 2**30}, {"a": 3 * 2**30}, tmp_path)
    assert room_problem(p, 3.0) is None and room_problem(p, None) is None
    assert room_problem(p, 2.9).startswith(f"download: {REPO} needs 3.0 GiB (1 of 1 files not yet cached)")
