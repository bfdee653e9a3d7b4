"""rft.eval.merge on a real tiny Qwen2 model and a real PEFT LoRA adapter: merge, cache, atomicity, refusals."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from rft.eval import merge
from rft.eval.merge import MergeError, base_load_kwargs, resolve_base, resolve_model
from rft.fixtures.tiny_model import build_tiny_model, fabricate_lora_adapter
from rft.gptoss.mxfp4 import quant_method
from tests.support.processes import group


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    """(base model dir, adapter dir) built once for this module."""
    root = tmp_path_factory.mktemp("tiny-merge")
    base = build_tiny_model(root / "base")
    return base, fabricate_lora_adapter(base, root / "adapter")


def copy_adapter(adapter: Path, dest: Path) -> Path:
    shutil.copytree(adapter, dest)
    return dest


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_merged_logits_equal_base_plus_adapter(tiny, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base, adapter = tiny
    merged_dir, record = resolve_model(adapter, merged_dir=tmp_path / "cache", dtype="float32")
    assert record["kind"] == "adapter" and record["cache_hit"] is False
    ids = torch.tensor([[5, 17, 42, 99, 3, 150, 7, 64]])
    with_adapter = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter
    )
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32)
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    expected, got = logits(with_adapter.eval(), ids), logits(merged.eval(), ids)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert (logits(plain.eval(), ids) - expected).abs().max() > 1e-2  # the adapter really changes outputs
    assert not any("lora_" in k for k in merged.state_dict())


def test_merged_dir_carries_tokenizer_generation_config_and_manifest(tiny, tmp_path):
    base, adapter = tiny
    merged_dir, record = resolve_model(adapter, merged_dir=tmp_path, dtype="float32")
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "config.json",
        merge.MANIFEST,
    ):
        assert (merged_dir / name).is_file(), name
    assert (merged_dir / "generation_config.json").read_bytes() == (
        base / "generation_config.json"
    ).read_bytes()
    manifest = json.loads((merged_dir / merge.MANIFEST).read_text())
    assert manifest["adapter_sha256"] == merge.adapter_hash(adapter) == record["adapter_sha256"]
    assert quant_method(merged_dir) is None
    assert merged_dir.name == record["merge_key"][:24]


def test_cache_hit_then_miss_when_adapter_changes(tiny, tmp_path):
    base, adapter = tiny
    mine = copy_adapter(adapter, tmp_path / "adapter")
    first, rec1 = resolve_model(mine, merged_dir=tmp_path / "cache", dtype="float32")
    again, rec2 = resolve_model(mine, merged_dir=tmp_path / "cache", dtype="float32")
    assert (again, rec2["cache_hit"]) == (first, True)
    fabricate_lora_adapter(base, mine, seed=7)  # same path, new weights
    changed, rec3 = resolve_model(mine, merged_dir=tmp_path / "cache", dtype="float32")
    assert rec3["cache_hit"] is False and changed != first
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([first.name, changed.name])


def test_tokenizer_saved_with_the_adapter_is_part_of_the_cache_key(tiny, tmp_path):
    from transformers import AutoTokenizer

    base, adapter = tiny
    mine = copy_adapter(adapter, tmp_path / "adapter")
    first, _ = resolve_model(mine, merged_dir=tmp_path / "cache", dtype="float32")
    tok = AutoTokenizer.from_pretrained(base)
    tok.chat_template = "{{ messages[0]['content'] }}<|im_end|>"  # training saved its own template
    tok.save_pretrained(mine)
    second, record = resolve_model(mine, merged_dir=tmp_path / "cache", dtype="float32")
    assert record["cache_hit"] is False and second != first
    assert AutoTokenizer.from_pretrained(second).chat_template == tok.chat_template
    assert AutoTokenizer.from_pretrained(first).chat_template != tok.chat_template


def test_crash_mid_merge_leaves_nothing_a_later_run_trusts(tiny, tmp_path, monkeypatch):
    _, adapter = tiny
    cache = tmp_path / "cache"

    def crash(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(merge.shutil, "copyfile", crash)  # fails after the weights were written
    with pytest.raises(OSError, match="disk full"):
        resolve_model(adapter, merged_dir=cache, dtype="float32")
    assert list(cache.iterdir()) == []  # no half-merged dir, no temp dir
    assert merge.adapter_weights_file(adapter).is_file()  # the adapter is untouched
    monkeypatch.undo()
    merged_dir, record = resolve_model(adapter, merged_dir=cache, dtype="float32")
    assert record["cache_hit"] is False and (merged_dir / merge.MANIFEST).is_file()


def test_killed_merges_are_swept_live_and_foreign_ones_kept(tiny, tmp_path):
    import socket
    import subprocess
    import sys

    _, adapter = tiny
    cache = tmp_path / "cache"
    mine = merge.tmp_merge_dir(cache, "a" * 64).name
    assert mine.startswith(f"{merge.TMP_PREFIX}{'a' * 24}-{os.getpid()}-") and mine.endswith(
        socket.gethostname()
    )
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with group([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        host = socket.gethostname()
        stale, running, foreign = (
            cache / f"{merge.TMP_PREFIX}{'a' * 24}-{pid}-1-{h}"
            for pid, h in ((dead.pid, host), (live.pid, host), (dead.pid, "other-host"))
        )
        for d in (stale, running, foreign):
            d.mkdir(parents=True)
            (d / "model.safetensors").write_bytes(b"half a model")
        merged_dir, _ = resolve_model(adapter, merged_dir=cache, dtype="float32")
        assert sorted(p.name for p in cache.iterdir()) == sorted(
            [merged_dir.name, running.name, foreign.name]
        )


def test_full_model_dir_is_used_as_is(tiny):
    base, _ = tiny
    path, record = resolve_model(base)
    assert path == base.resolve() and record["kind"] == "model"


def test_hub_ids_resolve_from_the_local_cache_only(tiny, tmp_path, monkeypatch):
    import huggingface_hub

    base, adapter = tiny
    snapshot = tmp_path / "hub" / "models--openai--gpt-oss-tiny" / "snapshots" / ("c0ffee" * 6 + "0000")
    shutil.copytree(base, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(snapshot.name)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read per request, not the env
    path, record = resolve_model("openai/gpt-oss-tiny")
    assert path == snapshot.resolve() and record["kind"] == "model"
    moved = copy_adapter(adapter, tmp_path / "adapter")
    cfg = json.loads((moved / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "openai/gpt-oss-tiny"
    (moved / "adapter_config.json").write_text(json.dumps(cfg))
    assert resolve_base(moved) == snapshot
    with pytest.raises(MergeError, match=r"openai/gpt-oss-absent does not exist.*local Hugging Face cache") as e:
        resolve_model("openai/gpt-oss-absent")
    # Nothing is fetched unless asked; the refusal names the opt-in flag and the cache it would fill.
    assert "nothing is downloaded unless asked: pass --download" in str(e.value)
    assert str(tmp_path / "hub") in str(e.value)
    cfg["base_model_name_or_path"] = "openai/gpt-oss-absent"
    (moved / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(MergeError, match=r"'openai/gpt-oss-absent' .* not found.*pass --download"):
        resolve_base(moved)
    # With --download the fetch is attempted (offline here, so it fails and says so).
    with pytest.raises(MergeError, match=r"--download: fetching 'openai/gpt-oss-absent' into .*hub.* failed"):
        resolve_model("openai/gpt-oss-absent", download=True)
    with pytest.raises(MergeError, match=r"--download: fetching"):
        resolve_base(moved, download=True)
    assert resolve_model("openai/gpt-oss-tiny", download=True)[0] == snapshot.resolve()  # cached: no fetch


def test_missing_adapter_weights_is_named(tiny, tmp_path):
    _, adapter = tiny
    broken = copy_adapter(adapter, tmp_path / "broken")
    (broken / "adapter_model.safetensors").unlink()
    with pytest.raises(
        MergeError, match=r"broken: LoRA adapter has no weights file.*adapter_model\.safetensors"
    ):
        resolve_model(broken, merged_dir=tmp_path / "cache")


def test_base_not_found_is_named_and_base_flag_overrides(tiny, tmp_path):
    base, adapter = tiny
    moved = copy_adapter(adapter, tmp_path / "moved")
    cfg = json.loads((moved / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(tmp_path / "no-such-base")
    (moved / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(MergeError, match=r"no-such-base.*base_model_name_or_path.*not found.*--base"):
        resolve_model(moved, merged_dir=tmp_path / "cache")
    assert resolve_base(moved, str(base)) == base.resolve()
    with pytest.raises(MergeError, match="not found"):
        resolve_base(moved, "nobody/no-such-model-anywhere")


def test_not_a_model_at_all(tmp_path):
    with pytest.raises(MergeError, match="neither a model directory"):
        resolve_model(tmp_path)
    with pytest.raises(MergeError, match="does not exist"):
        resolve_model(tmp_path / "missing")


def write_config(path: Path, quant: dict | None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "gpt_oss"} | ({"quantization_config": quant} if quant else {})
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_mxfp4_base_is_dequantized_or_refused(tmp_path):
    from transformers import Mxfp4Config

    mx = write_config(tmp_path / "mx", {"quant_method": "mxfp4"})
    kwargs = base_load_kwargs(mx, "bfloat16", dequantize=True)
    assert isinstance(kwargs["quantization_config"], Mxfp4Config) and kwargs["quantization_config"].dequantize
    assert kwargs["dtype"] is torch.bfloat16
    with pytest.raises(MergeError, match=r"MXFP4-quantized and --no-dequantize"):
        base_load_kwargs(mx, "bfloat16", dequantize=False)
    other = write_config(tmp_path / "awq", {"quant_method": "awq"})
    with pytest.raises(MergeError, match=r"quantized \(awq\)"):
        base_load_kwargs(other, "bfloat16", dequantize=True)
    plain = write_config(tmp_path / "plain", None)
    assert "quantization_config" not in base_load_kwargs(plain, "float32", dequantize=False)


def test_mxfp4_base_is_dequantized_then_merged(tmp_path):
    """A real tiny MXFP4 gpt-oss checkpoint: experts come out exactly dequantized, the LoRA delta is added."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rft.fixtures.mxfp4_fixtures import build_mxfp4_checkpoint

    base = tmp_path / "gpt-oss-mxfp4"
    expected = build_mxfp4_checkpoint(base)
    dequantized = AutoModelForCausalLM.from_pretrained(base, **base_load_kwargs(base, "bfloat16", True))
    peft_model = get_peft_model(
        dequantized, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen).to(p.dtype) * 0.1)
    delta = {  # the adapter's weight delta per target module, in float32
        n.removeprefix("base_model.model.").removesuffix(".base_layer") + ".weight": m.get_delta_weight(
            "default"
        ).float()
        for n, m in peft_model.named_modules()
        if hasattr(m, "get_delta_weight") and "default" in getattr(m, "lora_A", {})
    }
    peft_model.save_pretrained(tmp_path / "adapter")
    with pytest.raises(MergeError, match="MXFP4-quantized and --no-dequantize"):
        resolve_model(tmp_path / "adapter", merged_dir=tmp_path / "cache", dequantize=False)
    merged_dir, record = resolve_model(tmp_path / "adapter", merged_dir=tmp_path / "cache", dtype="bfloat16")
    assert quant_method(merged_dir) is None and record["base"] == str(base.resolve())
    got = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.bfloat16).state_dict()
    assert delta and all(k in expected for k in delta)
    for key, value in expected.items():
        if key in delta:  # base + B@A*scale, rounded once to bf16
            torch.testing.assert_close(got[key].float(), value.float() + delta[key], atol=2e-2, rtol=1e-2)
            assert not torch.equal(got[key], value)
        else:  # experts (dequantized MXFP4) and everything else: bit-exact
            assert torch.equal(got[key], value), key


def test_mxfp4_refusal_happens_before_any_merge_work(tiny, tmp_path):
    base, adapter = tiny
    mx_base = tmp_path / "mx-base"
    shutil.copytree(base, mx_base)
    cfg = json.loads((mx_base / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4"}
    (mx_base / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(MergeError, match="MXFP4"):
        resolve_model(adapter, base=str(mx_base), merged_dir=tmp_path / "cache", dequantize=False)
    assert not (tmp_path / "cache").exists()


def test_tokenizer_prefers_the_one_saved_with_the_adapter(tiny, tmp_path):
    base, adapter = tiny
    assert merge.tokenizer_source(adapter, base) == base
    with_tok = copy_adapter(adapter, tmp_path / "with-tok")
    shutil.copy(base / "tokenizer_config.json", with_tok / "tokenizer_config.json")
    assert merge.tokenizer_source(with_tok, base) == with_tok


def test_default_merged_dir_from_env(monkeypatch):
    monkeypatch.setenv("RFT_MERGED_DIR", "/somewhere/merged")
    assert merge.default_merged_dir() == Path("/somewhere/merged")
    monkeypatch.delenv("RFT_MERGED_DIR")
    assert merge.default_merged_dir() == Path(merge.DEFAULT_MERGED_DIR)


def test_model_identity_is_cheap_and_tracks_adapter_content(tiny, tmp_path):
    base, adapter = tiny
    mine = copy_adapter(adapter, tmp_path / "adapter")
    first = merge.model_identity(mine)
    assert first == merge.model_identity(mine) and first["base"] == str(base.resolve())
    fabricate_lora_adapter(base, mine, seed=5)
    assert merge.model_identity(mine)["adapter_sha256"] != first["adapter_sha256"]
    full = merge.model_identity(base)
    assert full["model_dir"] == str(base.resolve()) and full["weights"][0][0] == "model.safetensors"
    assert not (tmp_path / "cache").exists()  # identity never merges
    with pytest.raises(MergeError, match="does not exist"):
        merge.model_identity(tmp_path / "nope")
