"""rft/launch/placement.py: the run record's ray_placement (the Ray query itself runs in the CPU end-to-end tests)."""

from __future__ import annotations

import json

from rft.launch import placement


def test_no_run_record_is_reported_without_asking_ray(tmp_path, capsys):
    # a refused launch leaves no record; the address is never contacted (nothing listens on port 1)
    assert placement.main(["--address", "127.0.0.1:1", "--record-dir", str(tmp_path)]) == 0
    assert f"no run_record_*.json in {tmp_path}" in capsys.readouterr().err


def test_write_placement_adds_its_key_and_keeps_the_others(tmp_path):
    record = tmp_path / "run_record_1.json"
    record.write_text(json.dumps({"flags": ["--a"], "ray_placement": {"old": 1}}))
    placement.write_placement(record, {"nodes": 2, "roles": {"actor": ["n1"]}})
    assert json.loads(record.read_text()) == {"flags": ["--a"], "ray_placement": {"nodes": 2, "roles": {"actor": ["n1"]}}}
