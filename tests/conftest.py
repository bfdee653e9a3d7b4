"""Shared fixtures: the pristine and the patched OpenRLHF 0.9.3 (and a copy patched by apply_patches.sh), a gloo world,
the local judge server, tiny launch data files, a git repository; the two suites.

`make test` runs two suites: `-m "not vllm"` in .venv, and `-m vllm` in .venv-vllm with RFT_VLLM_SUITE=1. In the
vLLM suite a missing or stand-in vLLM is an error, never a skip; elsewhere `vllm` tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rft.fixtures.judge_server import JudgeServer
from rft.fixtures.openrlhf_wheel import unpack_pristine_openrlhf
from tests.support.git import git
from tests.support.processes import restore_default_sigint
from tests.support.rows import write_launch_data

ROOT = Path(__file__).resolve().parent.parent
VLLM_SUITE_ENV = "RFT_VLLM_SUITE"


def real_vllm_problem() -> str | None:
    """Why the real vLLM cannot be used here (None when `import vllm` gives the real engine)."""
    try:
        import vllm
    except Exception as e:  # noqa: BLE001  (any import failure is the answer)
        return f"import vllm failed: {e!r}"
    origin = Path(vllm.__file__).resolve()
    if origin.is_relative_to(ROOT / "rft" / "fixtures" / "stubs"):  # patched_openrlhf.STUBS (not imported: it sets env)
        return f"import vllm gave the test stand-in {origin}, not the real engine"
    return None


def pytest_configure(config) -> None:
    """SIGINT's default for the suite and its children, however it was started; the vLLM suite needs the real engine."""
    restore_default_sigint()
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


@pytest.fixture(scope="session")
def patched_openrlhf(pristine_openrlhf_root, tmp_path_factory) -> Path:
    """Directory whose `openrlhf/` is the patched 0.9.3 that `import openrlhf` now resolves to."""
    from rft.fixtures.patched_openrlhf import install_patched  # sets the CPU DeepSpeed env on import

    return install_patched(pristine_openrlhf_root, tmp_path_factory)


@pytest.fixture(scope="module")
def dist_world() -> None:
    """torch.distributed on gloo through DeepSpeed (world size 1), for ZeRO-3 engines in this process."""
    from rft.fixtures.cpu_trainer import init_gloo

    init_gloo()


@pytest.fixture
def judge_score() -> float:
    """The score `judge_server` answers by default; a module overrides this fixture to change it."""
    return JudgeServer.default_score


@pytest.fixture
def judge_server(judge_score):
    """A local Gemini generateContent server (rft/fixtures/judge_server.py), shut down at teardown."""
    with JudgeServer(default_score=judge_score) as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def _no_run_pointers_left_in_the_checkout():
    """Launches the tests make through the real scripts write runs/NAME/run.json in this checkout (the pointer
    monitor.sh and spare.py find a run by): the ones this session wrote for a run under the temp dir are removed
    at its end (a real run's pointer written meanwhile stays)."""
    import tempfile

    from rft.launch.run_pointer import POINTER, RUNS, read_pointer

    before = set((ROOT / RUNS).glob(f"*/{POINTER}"))
    yield
    tmp = Path(tempfile.gettempdir()).resolve()
    for path in set((ROOT / RUNS).glob(f"*/{POINTER}")) - before:
        try:
            if not read_pointer(path).metrics_dir.resolve().is_relative_to(tmp):
                continue
        except ValueError:
            continue
        path.unlink(missing_ok=True)
        if path.parent.is_dir() and not any(path.parent.iterdir()):
            path.parent.rmdir()


@pytest.fixture(scope="session")
def patched_root(pristine_openrlhf_root, tmp_path_factory) -> Path:
    """A copy of the pristine 0.9.3 package with our whole patch series applied by apply_patches.sh."""
    dest = tmp_path_factory.mktemp("openrlhf-patched")
    shutil.copytree(pristine_openrlhf_root / "openrlhf", dest / "openrlhf")
    res = subprocess.run(["bash", str(ROOT / "apply_patches.sh"), "--target", str(dest)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    return dest


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """Tiny data files with the names the scripts expect; train and eval disjoint."""
    return write_launch_data(tmp_path_factory.mktemp("data"))


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository on branch attempt-07-tight-clip with one commit."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    (r / "train.sh").write_text("echo hi\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "init")
    git(r, "checkout", "-q", "-b", "attempt-07-tight-clip")
    return r
