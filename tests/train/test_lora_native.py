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
