"""The CPU profile's hook: NODES, the GPU-node refusal, the stand-in environment, the dry run's plan, the outputs."""

from __future__ import annotations

import os

import pytest

from rft.launch import cpu_profile
from rft.launch.choices import ChoiceError
from rft.provenance import REPO_ROOT as ROOT

FAKE_SMI = """#!/usr/bin/env bash
# stand-in for a GPU node's nvidia-smi -L (the hardware this machine lacks)
for i in 0 1; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-fake-$i)"; done
"""


def test_nodes_is_one_or_two():
    assert cpu_profile.nodes({}) == "1" and cpu_profile.nodes({"NODES": "2"}) == "2"
    with pytest.raises(ChoiceError, match="NODES=3: expected 1 or 2"):
        cpu_profile.nodes({"NODES": "3"})
    assert cpu_profile.NODE_FLAGS["2"] == ["--colocate_actor_ref", "--ref_num_gpus_per_node", "2"]


def test_a_gpu_node_is_refused(tmp_path, monkeypatch):
    (tmp_path / "nvidia-smi").write_text(FAKE_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with pytest.raises(cpu_profile.GpuNode, match=r"CPU profile: refused: nvidia-smi lists 2 GPU\(s\)"):
        cpu_profile.refuse_gpu_node()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi at all: a CPU machine
    cpu_profile.refuse_gpu_node()


def test_the_standin_environment_keeps_the_callers_settings():
    env = cpu_profile.standin_env({"PYTHONPATH": "/repo", "TORCH_EXTENSIONS_DIR": "/x", "SAMPLES_LOG_EVERY": "1"})
    assert env["PYTHONPATH"] == f"{cpu_profile.SITE}{os.pathsep}/repo" and env["RFT_CPU_STANDINS"] == "1"
    assert env["TORCH_EXTENSIONS_DIR"] == "/x" and env["SAMPLES_LOG_EVERY"] == "1"
    fresh = cpu_profile.standin_env({"XDG_CACHE_HOME": "/c"})
    assert fresh["TORCH_EXTENSIONS_DIR"] == "/c/rft/torch_extensions" and fresh["SAMPLES_LOG_EVERY"] == "4"
    assert fresh["PYTHONPATH"] == str(cpu_profile.SITE)


def test_the_plan_names_the_inputs_and_the_cluster(tmp_path):
    argv = ["--pretrain", str(tmp_path / "inputs" / "model")]
    (line,) = cpu_profile.plan_lines(argv, {"ARCH": "gpt_oss", "NODES": "2"})
    assert f"inputs {tmp_path / 'inputs'} built once (--arch gpt_oss)" in line
    assert "2 logical GPUs, 6 CPUs) and a second node (1 GPU, 2 CPUs)" in line
    (tmp_path / "inputs" / "model").mkdir(parents=True)
    (tmp_path / "inputs" / "model" / "config.json").write_text("{}")
    (line,) = cpu_profile.plan_lines(argv, {"RAY_ADDRESS": "127.0.0.1:1"})
    assert "inputs " + str(tmp_path / "inputs") + " exists" in line and "joins RAY_ADDRESS=127.0.0.1:1" in line


def test_a_given_cluster_is_used_and_left_running():
    with cpu_profile.private_ray({"RAY_ADDRESS": "127.0.0.1:6390"}) as address:
        assert address == "127.0.0.1:6390"


def test_prepare_and_finish_without_a_record(tmp_path, capsys):
    env = {**os.environ, "METRICS_LOG_DIR": str(tmp_path / "run" / "metrics"), "PYTHONPATH": str(ROOT)}
    env.pop("SPIKE_LOG_PATH", None)
    cpu_profile.prepare_dirs(tmp_path / "run", env)
    assert (tmp_path / "run" / "metrics" / "spike_log.jsonl").read_text() == ""
    cpu_profile.finish(3, tmp_path / "run", "127.0.0.1:1", env)  # the launch was refused: nothing to record
    out = capsys.readouterr().out
    assert "exit status 3" in out and f"run dir: {tmp_path / 'run'}" in out
