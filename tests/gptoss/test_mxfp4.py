"""MXFP4 gpt-oss checkpoints: detection, dequantized loading through the real patched Actor under ZeRO-3 (gloo,
world size 1, CPU), offline bf16 conversion, convert_mxfp4.py, and --vllm_pretrain through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rft.fixtures.mxfp4_fixtures import build_mxfp4_checkpoint, zero3_strategy
from rft.gptoss import mxfp4
from rft.plan.openrlhf_cli import OPENRLHF_DIR_ENV, FlagError, parse_args
from rft.provenance import REPO_ROOT as ROOT


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    """(directory of a tiny MXFP4 gpt-oss checkpoint, its expected dequantized bf16 state dict)."""
    path = tmp_path_factory.mktemp("mxfp4") / "tiny-gpt-oss-mxfp4"
    return path, build_mxfp4_checkpoint(path)


def gathered(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    import deepspeed

    params = dict(model.named_parameters())
    with deepspeed.zero.GatheredParameters(list(params.values())):
        return {n: p.detach().clone() for n, p in params.items()}


def test_detection(ckpt, tmp_path):
    from transformers import AutoConfig

    path, _ = ckpt
    assert mxfp4.is_mxfp4_checkpoint(path) and mxfp4.is_mxfp4_checkpoint(str(path))
    assert mxfp4.is_mxfp4_checkpoint(AutoConfig.from_pretrained(path))
    assert mxfp4.is_mxfp4_checkpoint(json.loads((path / "config.json").read_text()))
    assert not mxfp4.is_mxfp4_checkpoint({"model_type": "gpt_oss"})
    assert mxfp4.quant_method({"quantization_config": {"quant_method": "bitsandbytes"}}) == "bitsandbytes"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    assert not mxfp4.is_mxfp4_checkpoint(plain)


def test_dequantize_blocks_packing():
    # byte 0x21: low nibble code 1 (0.5) first, high nibble code 2 (1.0); scale 128 = x2
    blocks = torch.zeros(1, 16, dtype=torch.uint8)
    blocks[0, 0], blocks[0, 15] = 0x21, 0xF8
    out = mxfp4.dequantize_blocks(blocks, torch.tensor([128], dtype=torch.uint8))
    assert out.shape == (32,)
    assert out[:2].tolist() == [1.0, 2.0] and out[30:].tolist() == [-0.0, -12.0] and out[2:30].eq(0).all()
    with pytest.raises(mxfp4.ConversionError, match="outside bf16"):
        mxfp4.dequantize_expert(torch.full((1, 1, 1, 16), 0x77, dtype=torch.uint8),
                                torch.full((1, 1, 1), 255, dtype=torch.uint8))  # 6 * 2^128 overflows bf16
    with pytest.raises(ValueError, match="do not match"):
        mxfp4.dequantize_blocks(blocks, torch.tensor([1, 2], dtype=torch.uint8))


@pytest.mark.slow
def test_patched_actor_loads_mxfp4_as_zero3_params(patched_openrlhf, dist_world, ckpt):
    """The real patched Actor (policy with LoRA, and the reference model's eval config) under ZeRO-3."""
    import deepspeed
    from openrlhf.models import Actor

    path, expected = ckpt
    s = zero3_strategy()
    train_cfg = s.get_ds_train_config(is_actor=True)
    actor = Actor(str(path), attn_implementation="eager", param_dtype="bf16", lora_rank=4, lora_alpha=8,
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], ds_config=train_cfg)
    base = actor.model.get_base_model()
    assert not hasattr(base.config, "quantization_config")
    named = dict(base.named_parameters())
    assert all(hasattr(p, "ds_id") for n, p in named.items() if "lora_" not in n)  # ZeRO params, not full tensors
    assert named["model.layers.0.mlp.experts.gate_up_proj"].numel() == 0  # partitioned away (ds_numel holds size)
    assert named["model.layers.0.mlp.experts.gate_up_proj"].ds_shape == expected[
        "model.layers.0.mlp.experts.gate_up_proj"].shape
    assert sum("lora_A" in n for n in named) == 4 * 2  # q/k/v/o in both layers; experts are not nn.Linear
    values = {n.replace(".base_layer", ""): v for n, v in gathered(base).items() if "lora_" not in n}
    assert values.keys() == expected.keys()
    for name, want in expected.items():
        assert values[name].dtype == torch.bfloat16 and torch.equal(values[name], want), name

    ref = Actor(str(path), attn_implementation="eager", param_dtype="bf16", ds_config=s.get_ds_eval_config())
    assert all(hasattr(p, "ds_id") for p in ref.model.parameters())
    engine, *_ = deepspeed.initialize(model=ref, config=s.get_ds_eval_config())
    ids = torch.randint(0, 200, (1, 9))
    with torch.no_grad():
        logits = engine(ids, attention_mask=torch.ones_like(ids), return_output=True)["logits"]

    from transformers import GptOssForCausalLM

    plain = GptOssForCausalLM(mxfp4.bf16_config(str(path)))
    plain.load_state_dict(expected)
    plain = plain.to(torch.bfloat16).eval()
    with torch.no_grad():
        want = plain(ids, attention_mask=torch.ones_like(ids)).logits.float()
    assert torch.allclose(logits.float(), want, atol=1e-2, rtol=1e-2), (logits.float() - want).abs().max()


def test_load_refuses_a_live_zero3_context(ckpt):
    from transformers.integrations.deepspeed import HfDeepSpeedConfig, is_deepspeed_zero3_enabled

    cfg = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}}
    dschf = HfDeepSpeedConfig(cfg)  # noqa: F841  (what unpatched Actor.__init__ creates before loading)
    try:
        with pytest.raises(RuntimeError, match="HfDeepSpeedConfig"):
            mxfp4.load_dequantized(str(ckpt[0]), ds_config=cfg)
    finally:
        del dschf
    assert not is_deepspeed_zero3_enabled()  # nothing leaks into later tests


def test_load_without_zero3_is_plain_dequantized(ckpt):
    path, expected = ckpt
    model = mxfp4.load_dequantized(str(path), ds_config=None)
    got = model.state_dict()
    assert all(torch.equal(got[k], v) for k, v in expected.items())
    assert model.model.layers[0].mlp.experts.gate_up_proj.requires_grad


def test_offline_conversion_is_lossless_and_atomic(ckpt, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, expected = ckpt
    out = tmp_path / "models" / "tiny-bf16"
    report = mxfp4.convert_checkpoint(path, out, max_shard_bytes=100_000, progress=False)
    assert len(report.dequantized) == 4 and report.tensors == len(expected)
    files = sorted(p.name for p in out.iterdir())
    shards = [f for f in files if f.endswith(".safetensors")]
    assert len(shards) > 1 and shards == [f"model-{i:05d}-of-{len(shards):05d}.safetensors"
                                          for i in range(1, len(shards) + 1)]
    index = json.loads((out / mxfp4.INDEX_NAME).read_text())
    assert sorted(index["weight_map"]) == sorted(expected) and set(index["weight_map"].values()) == set(shards)
    assert {"tokenizer.json", "chat_template.jinja", "generation_config.json", mxfp4.PROVENANCE_NAME} <= set(files)
    assert (out / "generation_config.json").read_bytes() == (path / "generation_config.json").read_bytes()
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16, attn_implementation="eager")
    assert getattr(reloaded, "hf_quantizer", None) is None
    got = reloaded.state_dict()
    assert got.keys() == expected.keys() and all(torch.equal(got[k], v) for k, v in expected.items())
    assert AutoTokenizer.from_pretrained(out)("1 + 2").input_ids == AutoTokenizer.from_pretrained(path)(
        "1 + 2").input_ids
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny-bf16"]  # no temporary directory left

    with pytest.raises(FileExistsError, match="already exists"):
        mxfp4.convert_checkpoint(path, out, progress=False)
    with pytest.raises(mxfp4.NotMxfp4Error, match="not 'mxfp4'"):
        mxfp4.convert_checkpoint(out, tmp_path / "models" / "again", progress=False)


def test_failed_conversion_leaves_nothing(ckpt, tmp_path):
    from safetensors.torch import load_file, save_file

    path, _ = ckpt
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in path.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    wmap = json.loads((broken / mxfp4.INDEX_NAME).read_text())["weight_map"]
    key = "model.layers.1.mlp.experts.down_proj_scales"
    shard = load_file(broken / wmap[key])
    shard[key] = torch.full_like(shard[key], 255)  # 2^128: not representable in bf16
    save_file(shard, str(broken / wmap[key]), metadata={"format": "pt"})
    out = tmp_path / "out" / "converted"
    with pytest.raises(mxfp4.ConversionError, match="outside bf16"):
        mxfp4.convert_checkpoint(broken, out, progress=False)
    assert list((tmp_path / "out").iterdir()) == []


def test_convert_script_cli(ckpt, tmp_path):
    path, expected = ckpt
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = [sys.executable, str(ROOT / "convert_mxfp4.py")]
    helptext = subprocess.run([*script, "--help"], capture_output=True, text=True, env=env)
    assert helptext.returncode == 0 and "--max-shard-gib" in helptext.stdout and "--no-verify" in helptext.stdout
    out = tmp_path / "bf16"
    res = subprocess.run([*script, str(path), str(out)], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert "4 expert tensors dequantized" in res.stdout and (out / "config.json").is_file()
    res = subprocess.run([*script, str(out), str(tmp_path / "again")], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "not 'mxfp4'" in res.stderr and not (tmp_path / "again").exists()
    res = subprocess.run([*script, str(path), str(out)], capture_output=True, text=True, env=env)
    assert res.returncode == 2 and "already exists" in res.stderr


GRPO = ["--actor_num_gpus_per_node", "1", "--remote_rm_url", "r.py", "--advantage_estimator", "dr_grpo", "--n_samples_per_prompt", "2",
        "--micro_rollout_batch_size", "1", "--rollout_batch_size", "1", "--prompt_data", "d.jsonl"]


def test_vllm_pretrain_flag_real_argparse_and_train_wiring(patched_openrlhf, monkeypatch):
    import openrlhf.cli.train_ppo_ray as cli

    monkeypatch.setenv(OPENRLHF_DIR_ENV, str(patched_openrlhf))
    lora = ["--lora_rank", "8", "--vllm_num_engines", "1", "--vllm_sync_lora_via_object_store"]
    args = parse_args(["--pretrain", "/m/bf16", "--vllm_pretrain", "/m/mxfp4", *lora, *GRPO]).args
    assert (args.pretrain, args.vllm_pretrain) == ("/m/bf16", "/m/mxfp4")
    assert parse_args(["--pretrain", "/m/bf16", *GRPO]).args.vllm_pretrain == "/m/bf16"  # default: --pretrain
    with pytest.raises(FlagError, match="--vllm_pretrain /m/mxfp4 differs from --pretrain"):
        parse_args(["--pretrain", "/m/bf16", "--vllm_pretrain", "/m/mxfp4", "--vllm_num_engines", "1", *GRPO])

    seen = {}

    class Stop(Exception):
        pass

    def fake_engines(num, tp, model, *rest, **kw):  # stand-in for GPU vLLM engines: record the model path
        seen["model"] = model
        raise Stop

    monkeypatch.setattr(cli.ray, "is_initialized", lambda: True)
    monkeypatch.setattr(cli, "get_strategy", lambda a: SimpleNamespace(print=lambda *x: None))
    monkeypatch.setattr(cli, "create_vllm_engines", fake_engines)
    with pytest.raises(Stop):
        cli.train(args)
    assert seen["model"] == "/m/mxfp4"


def test_copy_into_zero3_refuses_a_mismatched_checkpoint(dist_world, ckpt):
    import deepspeed
    from transformers import GptOssForCausalLM

    path, expected = ckpt
    with deepspeed.zero.Init(config_dict_or_path={"zero_optimization": {"stage": 3},
                                                  "train_micro_batch_size_per_gpu": 1}):
        model = GptOssForCausalLM(mxfp4.bf16_config(str(path)))
    partial = {k: v for k, v in expected.items() if "lm_head" not in k}
    with pytest.raises(ValueError, match=r"missing \['lm_head.weight'\]"):
        mxfp4.copy_into_zero3(model, partial)
    wrong = {**expected, "model.norm.weight": torch.ones(3)}
    with pytest.raises(ValueError, match=r"shape mismatch \['model.norm.weight'\]"):
        mxfp4.copy_into_zero3(model, wrong)


def test_launch_model_rule(ckpt, tmp_path):
    from rft.launch import rules

    path, _ = ckpt
    rep = rules.Report()
    rules.model_rule(SimpleNamespace(pretrain=str(path), vllm_pretrain=str(path)), rep)
    assert rep.warnings and "is MXFP4" in rep.warnings[0] and not rep.blocking
    missing = str(tmp_path / "bf16")
    rep = rules.Report()
    rules.model_rule(SimpleNamespace(pretrain=missing, vllm_pretrain=str(path)), rep)
    assert rep.blocking == [f"model: --pretrain {missing} has no config.json; make it with: python convert_mxfp4.py "
                            f"{path} {missing}"]
    mxfp4.convert_checkpoint(path, missing, progress=False)
    rep = rules.Report()
    rules.model_rule(SimpleNamespace(pretrain=missing, vllm_pretrain=str(path)), rep)
    assert not rep.blocking and not rep.warnings and "vLLM serves" in rep.notes[0]
