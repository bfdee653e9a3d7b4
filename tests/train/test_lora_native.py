"""rft/train/lora_native.py without an engine: vLLM's LoRA rank ladder and the adapter slots the engine loads."""

from __future__ import annotations

import pytest
import torch

from rft.fixtures.tiny_model import VLLM_HIDDEN, build_tiny_model
from rft.fixtures.vllm_engine import payload_of, peft_model, randomize_lora
from rft.train.lora_payload import LoraSyncError


def test_native_lora_slot_checks(tmp_path):
    """The engine-side checks of the native mode, without an engine."""
    from rft.train.lora_native import NativeLoraSlot, vllm_max_lora_rank

    assert [vllm_max_lora_rank(r) for r in (1, 4, 8, 32, 33, 64)] == [1, 8, 8, 32, 64, 64]
    with pytest.raises(LoraSyncError):
        vllm_max_lora_rank(1024)
    with pytest.raises(LoraSyncError, match="lora_rank > 0"):
        vllm_max_lora_rank(0)
    model = peft_model(build_tiny_model(tmp_path / "m", hidden_size=VLLM_HIDDEN), "float32")
    randomize_lora(model, torch.Generator().manual_seed(5))
    payload = payload_of(model, 1)
    slot = NativeLoraSlot(tmp_path / "slots")
    first = slot.stage(payload)
    assert (first.lora_int_id, first.modules) == (1, len(payload["modules"]))
    a = payload["modules"][0]["A"]
    wide = dict(payload, modules=[dict(payload["modules"][0], A=dict(a, shape=[a["shape"][0], 1]))]
                + payload["modules"][1:])
    with pytest.raises(LoraSyncError, match=payload["modules"][0]["name"].replace(".", r"\.")):
        slot.stage(wide)
    slot.retire(first)
    assert not (slot.root / "v1").exists() and slot.stage(payload).lora_int_id == 2
    slot.close()


def test_native_engine_kwargs_piecewise_graphs_for_gpt_oss(tmp_path):
    from rft.train.lora_native import native_engine_kwargs

    lora = {"enable_lora": True, "max_lora_rank": 32, "max_loras": 1}
    assert native_engine_kwargs(32, "Qwen/Qwen2.5-0.5B") == lora  # vLLM's default graphs elsewhere
    piecewise = {**lora, "compilation_config": {"cudagraph_mode": "PIECEWISE"}}
    assert native_engine_kwargs(32, "openai/gpt-oss-20b") == piecewise
    (tmp_path / "config.json").write_text('{"model_type": "gpt_oss"}')  # a local copy, named anything
    assert native_engine_kwargs(20, str(tmp_path)) == piecewise
    with pytest.raises(LoraSyncError, match="lora_rank > 0"):
        native_engine_kwargs(0, "openai/gpt-oss-20b")


@pytest.mark.vllm
def test_vllm_takes_the_native_engine_kwargs():
    """vLLM 0.15.1's engine arguments parse the setting into the piecewise mode (no GPU needed to parse)."""
    import vllm
    from vllm.config import CUDAGraphMode

    from rft.train.lora_native import native_engine_kwargs

    args = vllm.AsyncEngineArgs(model="openai/gpt-oss-20b", **native_engine_kwargs(64, "openai/gpt-oss-120b"))
    assert args.enable_lora and args.max_lora_rank == 64 and args.max_loras == 1
    assert args.compilation_config.cudagraph_mode == CUDAGraphMode.PIECEWISE
