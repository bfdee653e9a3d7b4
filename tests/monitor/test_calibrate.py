"""`python -m rft.monitor RUN --calibrate FILE`: a run's measured phases into the step-time model's figures, which the
next prediction of the same command then reproduces."""

from __future__ import annotations

import json

import pytest

from rft.monitor.calibrate import measured, openrlhf_argv
from rft.monitor.cli import main
from rft.monitor.logs import read_metrics
from rft.plan.memory_plan import config_shape
from rft.plan.step_time import CALIBRATED, load_figures, predict
from tests.monitor.metric_logs import write_scenario

TINY_GPT_OSS = {"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 512,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 32, "tie_word_embeddings": False}


def run_dir(tmp_path, config: dict):
    """A scenario's metrics, the model's config.json and a run record whose command trains that model."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    metrics = write_scenario("healthy", tmp_path / "metrics")
    folder = metrics.parent if metrics.is_file() else metrics
    command = ["python", "-m", "openrlhf.cli.train_ppo_ray", "--pretrain", str(model), "--zero_stage", "3",
               "--actor_num_gpus_per_node", "2", "--vllm_num_engines", "1", "--rollout_batch_size", "4",
               "--n_samples_per_prompt", "4", "--micro_rollout_batch_size", "2", "--micro_train_batch_size", "2",
               "--generate_max_len", "64", "--prompt_max_len", "32", "--lora_rank", "4", "--save_steps", "4",
               "--init_kl_coef", "0.01", "--gradient_checkpointing"]
    (folder / "run_record_20261127T000000Z.json").write_text(json.dumps({"command": command}))
    return folder, command


@pytest.mark.parametrize("config", [TINY_GPT_OSS, {**TINY_GPT_OSS, "model_type": "qwen2", "num_local_experts": None,
                                                   "num_experts_per_tok": None, "tie_word_embeddings": True}])
def test_calibrated_figures_reproduce_the_measured_phases(tmp_path, config, capsys):
    folder, command = run_dir(tmp_path, config)
    out = tmp_path / "calibrated.toml"
    assert main([str(folder), "--calibrate", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    means, steps = measured(read_metrics(str(folder)))
    assert steps[0] == 2  # the first timed step (start-up) is left out
    figures = load_figures(out)
    assert set(CALIBRATED.values()) <= set(figures)
    pr = predict(openrlhf_argv({"command": command}), figures, any_model=True)
    for phase in CALIBRATED:
        if means.get(phase, 0) > 0:
            assert pr.phases[phase] == pytest.approx(means[phase], rel=1e-3), phase
    assert pr.phases["step"] == pytest.approx(means["step"], rel=0.05)  # eval (0 here) is the only free phase
    assert predict(openrlhf_argv({"command": command}), figures) is None  # without any_model: gpt-oss only


def test_without_a_record_or_a_model_it_says_so(tmp_path, capsys):
    folder, _ = run_dir(tmp_path, TINY_GPT_OSS)
    (folder / "run_record_20261127T000000Z.json").write_text(json.dumps({"command": ["x", "--pretrain", "nowhere"]}))
    assert main([str(folder), "--calibrate", str(tmp_path / "f.toml")]) == 2
    assert "neither a known gpt-oss nor a local checkpoint" in capsys.readouterr().err
    (folder / "run_record_20261127T000000Z.json").unlink()
    assert main([str(folder), "--calibrate", str(tmp_path / "f.toml")]) == 2
    assert "no run_record" in capsys.readouterr().err
    assert not (tmp_path / "f.toml").exists()


def test_config_shape_counts_a_dense_mlp_as_one_expert(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**TINY_GPT_OSS, "num_local_experts": None,
                                                      "num_experts_per_tok": None}))
    s = config_shape(str(tmp_path))
    assert (s.experts, s.top_k, s.layers, s.q_dim, s.kv_dim) == (1, 1, 2, 64, 32)
    assert s.params == 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 64 + 64) + 2 * 512 * 64
    assert config_shape(str(tmp_path / "missing")) is None
