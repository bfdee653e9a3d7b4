"""rft/spare/cli.py: `--run RUN_NAME` (or the latest run) for watch, sync and verify, from the launch's pointer."""

from __future__ import annotations

import pytest

from rft.launch.run_pointer import write_pointer
from rft.spare import cli
from rft.spare.node import SpareError


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A checkout whose launches wrote two pointers: a28a (checkpoints under /data) and cpu (none given)."""
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    write_pointer(tmp_path, "a28a", {"METRICS_LOG_DIR": "/scratch/m/a28a"}, ["--ckpt_path", "/data/ckpt/a28a"])
    write_pointer(tmp_path, "cpu", {"METRICS_LOG_DIR": str(tmp_path / "runs" / "cpu" / "metrics")}, [])
    return tmp_path


def test_a_relative_adapter_is_taken_in_the_runs_checkpoints(checkout):
    specs = ["global_step130_hf", "/abs/adapter", "global_step10_hf=/spare/a"]
    assert cli.in_run(specs, "a28a") == ["/data/ckpt/a28a/global_step130_hf", "/abs/adapter",
                                         "/data/ckpt/a28a/global_step10_hf=/spare/a"]
    assert cli.in_run(specs, None) == specs


def test_a_run_without_checkpoints_or_pointer_is_named(checkout):
    with pytest.raises(SpareError, match=r"run cpu: its launch gave no --ckpt_path \(.*runs/cpu/run.json\)"):
        cli.run_checkpoints("cpu")
    with pytest.raises(SpareError, match=r"no run 'a29': .* runs of this checkout: a28a, cpu\)"):
        cli.in_run(["global_step1_hf"], "a29")


def test_watch_finds_the_named_run_or_refuses_two_answers(checkout, tmp_path, capsys):
    opts = ["--", "--model", "base=/m"]
    assert cli.main(["--host", "local", "watch", "--run", "a29", *opts]) == 2
    assert "spare.py: error: no run 'a29'" in capsys.readouterr().err
    assert cli.main(["--host", "local", "watch", str(tmp_path), "--run", "a28a", *opts]) == 2
    assert "watch: give RUN_DIR or --run RUN_NAME, not both" in capsys.readouterr().err
