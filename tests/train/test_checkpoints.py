"""LoRA checkpoints without the frozen base on a real ZeRO-3 engine (gloo, world size 1, CPU), exact restore,
LoRA model saves that gather only the adapter, the complete checkpoints a run has, and the guarded shard clean-up."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from rft.fixtures.lora_ckpt import (
    ckpt_bytes,
    cpu_barrier,
    lora_state,
    param_bytes,
    saved_frozen_names,
    strategy_and_engine,
    train_one_step,
)
from rft.train.checkpoints import Checkpoint, find_checkpoints, remove_full_weight_shards


@pytest.fixture
def cpu_barrier_in_openrlhf(patched_openrlhf, monkeypatch):
    import openrlhf.utils.deepspeed.deepspeed as dsmod

    monkeypatch.setattr(dsmod, "torch_dist_barrier_and_cuda_sync", cpu_barrier)


@pytest.mark.slow
def test_lora_ckpt_excludes_frozen_base_and_restores_exactly(dist_world, cpu_barrier_in_openrlhf, tmp_path):
    sizes = {}
    for lora_rank in (0, 4):  # lora_rank 0 = 0.9.3 behaviour (frozen fragments saved)
        strategy, engine = strategy_and_engine(lora_rank)
        train_one_step(engine)
        out = tmp_path / f"r{lora_rank}"
        strategy.save_ckpt(engine, str(out), tag="global_step1", client_state={"global_step": 1})
        sizes[lora_rank] = ckpt_bytes(out / "global_step1")["total"]
        frozen_saved = saved_frozen_names(out / "global_step1", engine)
        if not lora_rank:
            assert frozen_saved  # 0.9.3 writes every frozen base tensor into model_states
        else:
            assert frozen_saved == set()  # the base comes from --pretrain at resume, never from the checkpoint
            saved = lora_state(engine)
            assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)  # the step moved B
            fresh_strategy, fresh = strategy_and_engine(lora_rank)
            assert not all(torch.equal(v, lora_state(fresh)[k]) for k, v in saved.items())
            _, states = fresh_strategy.load_ckpt(fresh, str(out))  # strict load would raise missing keys
            assert states["global_step"] == 1
            restored = lora_state(fresh)
            assert saved.keys() == restored.keys()
            for k, v in saved.items():
                assert torch.equal(v, restored[k]), k
    assert sizes[4] * 4 < sizes[0], sizes  # measured: frozen fragments dominate the 0.9.3 checkpoint


@pytest.fixture
def gathered_bytes(monkeypatch) -> list[int]:
    """Bytes each ZeRO-3 GatheredParameters block brings to full size, in order (the consolidation uses it too)."""
    from deepspeed.runtime.zero.partition_parameters import GatheredParameters

    record: list[int] = []
    enter = GatheredParameters.__enter__

    def tracked(self):
        if self.enabled:
            record.append(sum(p.ds_numel * p.element_size() for p in self.params))
        return enter(self)

    monkeypatch.setattr(GatheredParameters, "__enter__", tracked)
    return record


def peft_loads(config, adapter_dir) -> dict[str, torch.Tensor]:
    """The LoRA tensors PEFT's own loader reads from `adapter_dir` into a fresh base of `config`, by saved name."""
    from peft import PeftModel
    from transformers import Qwen2ForCausalLM

    model = PeftModel.from_pretrained(Qwen2ForCausalLM(config), str(adapter_dir))
    return {n.replace(".default", ""): p.detach() for n, p in model.named_parameters() if "lora_" in n}


@pytest.mark.slow
def test_lora_save_gathers_only_the_adapter(dist_world, cpu_barrier_in_openrlhf, gathered_bytes, tmp_path):
    from rft.fixtures.tiny_model import build_tokenizer

    tok = build_tokenizer()
    saved, gathered = {}, {}
    for lora_rank in (0, 4):  # lora_rank 0 = 0.9.3's save_model: the full 16-bit consolidation
        strategy, engine = strategy_and_engine(lora_rank)
        train_one_step(engine)
        gathered_bytes.clear()
        strategy.save_model(engine, tok, str(tmp_path / f"r{lora_rank}"))
        gathered[lora_rank] = sum(gathered_bytes)
        saved[lora_rank] = {f.name: f.read_bytes() for f in (tmp_path / f"r{lora_rank}").iterdir()}
        sizes = param_bytes(engine)
        if not lora_rank:
            assert gathered[0] == sizes["frozen"] + sizes["trainable"]  # the whole model, frozen base included
        else:
            assert gathered[4] == sizes["trainable"] > 0  # the adapter and nothing else
            state = torch.load(tmp_path / "r4" / "adapter_model.bin", weights_only=True)
            assert sum(v.numel() * v.element_size() for v in state.values()) == sizes["trainable"]
            assert any(v.abs().sum() > 0 for k, v in state.items() if "lora_B" in k)  # the trained values
            loaded = peft_loads(engine.module.config, tmp_path / "r4")
            assert {k: v for k, v in loaded.items() if k in state}.keys() == state.keys()
            assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert saved[4].keys() == saved[0].keys() and "adapter_model.bin" in saved[4]
    for name in saved[0]:
        assert saved[4][name] == saved[0][name], name  # byte for byte what 0.9.3 writes


def test_shard_cleanup_is_guarded(tmp_path):
    d = tmp_path / "save"
    d.mkdir()
    for name in ("model-00001-of-00002.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "config.json", "adapter_config.json"):
        (d / name).write_text("x")
    assert remove_full_weight_shards(d, lora_rank=8) == []  # no adapter weights yet: never delete
    (d / "adapter_model.safetensors").write_bytes(b"")
    assert remove_full_weight_shards(d, lora_rank=8) == []  # empty adapter does not count
    (d / "adapter_model.safetensors").write_bytes(b"weights")
    assert remove_full_weight_shards(d, lora_rank=0) == []  # full fine-tune: shards are the model
    removed = remove_full_weight_shards(d, lora_rank=8)
    assert removed == ["model-00001-of-00002.safetensors", "model.safetensors.index.json", "pytorch_model.bin"]
    assert sorted(p.name for p in d.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "config.json"]


def adapter_files(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text("{}")
    (path / "adapter_model.safetensors").write_bytes(b"0")
    return path


def test_checkpoints_are_found_when_complete_and_settled(tmp_path):
    run = tmp_path / "run"
    adapter_files(run / "ckpt" / "global_step8_hf")
    adapter_files(run / "ckpt" / "global_step12_hf")
    (run / "ckpt" / "global_step16_hf").mkdir()  # being written: no weights yet
    (run / "ckpt" / "_actor").mkdir()
    old = time.time() - 100
    for f in (run / "ckpt" / "global_step8_hf").iterdir():
        os.utime(f, (old, old))
    assert [c.step for c in find_checkpoints(run)] == [8, 12]
    assert [c.step for c in find_checkpoints(run, settle_s=30)] == [8]  # step 12 was just written
    assert find_checkpoints(run)[0] == Checkpoint(8, (run / "ckpt" / "global_step8_hf").resolve())
