"""rft/launch/run_pointer.py: the launch's runs/RUN_NAME/run.json, and a run found by name or as the latest."""

from __future__ import annotations

import os

import pytest

from rft.launch.run_pointer import find_run, latest_run, resolve, write_pointer


def test_a_pointer_holds_the_runs_folders(tmp_path):
    env = {"METRICS_LOG_DIR": "/scratch/rft_metrics/a28a", "CKPT_PATH": "/ignored"}
    path = write_pointer(tmp_path, "a28a", env, ["--ckpt_path", "/data/ckpt/a28a", "--save_path", "/data/out/a28a"])
    assert path == tmp_path / "runs" / "a28a" / "run.json"
    run = find_run(tmp_path, "a28a")
    assert (run.name, str(run.metrics_dir), str(run.ckpt_path), str(run.save_path)) == (
        "a28a", "/scratch/rft_metrics/a28a", "/data/ckpt/a28a", "/data/out/a28a")
    bare = find_run(tmp_path, write_pointer(tmp_path, "b", env, []).parent.name)
    assert bare.ckpt_path is None and bare.save_path is None


def test_the_latest_run_is_the_one_that_wrote_last(tmp_path):
    assert latest_run(tmp_path) is None
    with pytest.raises(FileNotFoundError, match="no run launched from this checkout yet"):
        resolve(tmp_path, None)
    old, new = tmp_path / "old", tmp_path / "new"
    for name, metrics, age in (("old", old, 10), ("new", new, 100)):
        metrics.mkdir()
        pointer = write_pointer(tmp_path, name, {"METRICS_LOG_DIR": str(metrics)}, [])
        os.utime(pointer, (0, os.path.getmtime(pointer) - age))
    assert resolve(tmp_path, None).name == "old"  # launched later; "new" has not logged yet
    (new / "training_metrics.jsonl").write_text("{}\n")  # now it has
    assert latest_run(tmp_path).name == "new"
    assert resolve(tmp_path, "old").metrics_dir == old


def test_a_missing_or_broken_pointer_is_named(tmp_path):
    write_pointer(tmp_path, "a1", {"METRICS_LOG_DIR": "/m"}, [])
    with pytest.raises(FileNotFoundError, match=r"no run 'a2': .*runs/a2/run.json not found .*runs of this "
                                                r"checkout: a1\)"):
        find_run(tmp_path, "a2")
    broken = tmp_path / "runs" / "a3" / "run.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{}")
    with pytest.raises(ValueError, match=r"runs/a3/run.json: not a run pointer \(no metrics_dir\)"):
        find_run(tmp_path, "a3")
    assert [r.name for r in [latest_run(tmp_path)]] == ["a1"]  # a broken pointer is skipped when looking
