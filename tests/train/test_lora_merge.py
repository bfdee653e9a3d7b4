"""LoRA merge sync (rft.train.lora_merge): a real PEFT model vs a tiny Llama in vLLM's fused, tensor-parallel layout.

The vLLM-layout model (tests/train/vllm_layout.py) mirrors vLLM's Llama loaders: ``stacked_params_mapping`` into
fused ``qkv_proj`` / ``gate_up_proj``, ``QKVParallelLinear`` narrowing (k/v shard = tp_rank // kv_replicas),
``MergedColumnParallelLinear`` and ``RowParallelLinear`` (input dim), unknown names silently skipped,
``load_weights`` returning the loaded parameter names. Each TP rank has its own ``LoraMergeApplier``,
exactly as each vLLM worker would.
"""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from torch import nn

from rft.train.lora_merge import LoraMergeApplier, bf16_rounding_report
from rft.train.lora_payload import (
    PAYLOAD_FORMAT,
    LoraSyncError,
    build_payload,
    check_apply_results,
    encode_tensor,
    lora_parameters,
)
from tests.train.vllm_layout import VllmLayoutLlama, param_holder, tp_logits

FP32_TOL = 1e-5  # max |logit difference|, fp32 (logits have std ~0.1-1 here)
BF16_TOL = 0.05  # max |logit difference| relative to max |logit|, bf16 merged vs bf16 PEFT (unmerged)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


# ----------------------------------------------------------------------------------------------------------
# fixtures


def _tiny(num_kv_heads=2, targets=ALL, tp_size=2, dtype=torch.float32, seed=0):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=num_kv_heads, head_dim=8,
                      max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      attn_implementation="eager")
    hf = LlamaForCausalLM(cfg).to(dtype).eval()
    base = {k: v.clone() for k, v in hf.state_dict().items()}
    shards = [VllmLayoutLlama(cfg, r, tp_size, dtype) for r in range(tp_size)]
    for s in shards:
        loaded = set()
        for name, w in base.items():
            loaded |= s.load_weights([(name, w)])
        assert loaded == set(dict(s.named_parameters())), "fixture: vLLM-layout model not fully loaded"
    lcfg = LoraConfig(r=4, lora_alpha=8, target_modules=list(targets), lora_dropout=0.0, bias="none")
    peft_model = get_peft_model(hf, lcfg).eval()
    return peft_model, lcfg, shards


def _train_step(peft_model, scale=0.1):
    """Move every LoRA weight like a (large) optimizer step would."""
    with torch.no_grad():
        for _, p in lora_parameters(peft_model):
            p.add_(torch.randn(p.shape).to(p.dtype) * scale)


def _payload(peft_model, lcfg, version=0):
    named = {n: p.data for n, p in lora_parameters(peft_model)}
    return build_payload(named, lcfg, version=version)


def _snapshot(shards):
    return [{n: p.detach().clone() for n, p in s.named_parameters()} for s in shards]


def _assert_same(shards, snap):
    for s, ref in zip(shards, snap, strict=True):
        for n, p in s.named_parameters():
            assert torch.equal(p, ref[n]), n


IDS = torch.tensor([[1, 5, 9, 33, 2, 70, 11], [4, 4, 90, 17, 60, 3, 8]])


# ----------------------------------------------------------------------------------------------------------
# equivalence


@pytest.mark.parametrize(
    "num_kv_heads,targets,tp_size",
    [(2, ALL, 2), (1, ["q_proj", "v_proj"], 2), (2, ["q_proj", "k_proj", "v_proj", "o_proj"], 1)],
    ids=["gqa-all-tp2", "kv-replicated-qv-only-tp2", "attn-tp1"],
)
def test_successive_syncs_match_peft_fp32(num_kv_heads, targets, tp_size):
    peft_model, lcfg, shards = _tiny(num_kv_heads, targets, tp_size)
    appliers = [LoraMergeApplier(s, tp_size=s.tp_size) for s in shards]
    with torch.no_grad():
        base_logits = tp_logits(shards, IDS)
        with peft_model.disable_adapter():
            assert (tp_logits(shards, IDS) - peft_model(IDS).logits).abs().max() < FP32_TOL
    prev = base_logits
    for step in range(4):
        _train_step(peft_model)
        payload = _payload(peft_model, lcfg, version=step)
        reports = [a.apply(payload) for a in appliers]
        check_apply_results([reports], payload)
        assert reports[0]["modules"] == payload["num_modules"] == len(targets) * 2
        with torch.no_grad():
            got, want = tp_logits(shards, IDS), peft_model(IDS).logits
        assert (got - want).abs().max() < FP32_TOL, f"step {step}: {(got - want).abs().max()}"
        assert (got - prev).abs().max() > 100 * FP32_TOL, "sync did not change the policy"
        prev = got


def _merged_reference(peft_model, shards):
    """Fresh vLLM-layout shards loaded with round_once(W0 + scaling * B @ A) computed from PEFT's modules."""
    from peft.tuners.lora import LoraLayer

    s0 = shards[0]
    merged = {}
    for name, mod in peft_model.base_model.model.named_modules():
        if isinstance(mod, LoraLayer):
            w0 = mod.base_layer.weight
            d = mod.scaling["default"] * (mod.lora_B["default"].weight.float() @ mod.lora_A["default"].weight.float())
            merged[name + ".weight"] = (w0.float() + d).to(w0.dtype)
    ref = [VllmLayoutLlama(s0.cfg, r, s0.tp_size, s0.model.norm.weight.dtype) for r in range(s0.tp_size)]
    for s in ref:
        for name, w in peft_model.base_model.model.state_dict().items():
            if ".lora_" not in name:
                s.load_weights([(name.replace(".base_layer", ""), merged.get(name.replace(".base_layer", ""), w))])
    return ref


def test_bf16_syncs_match_peft_within_tolerance():
    peft_model, lcfg, shards = _tiny(dtype=torch.bfloat16)
    appliers = [LoraMergeApplier(s, tp_size=s.tp_size) for s in shards]
    for step in range(3):
        _train_step(peft_model)
        payload = _payload(peft_model, lcfg, version=step)
        for a in appliers:
            a.apply(payload)
        # weights: bit-identical to W0 + ΔW formed in fp32 and rounded once to bf16
        _assert_same(shards, _snapshot(_merged_reference(peft_model, shards)))
        with torch.no_grad():
            got, want = tp_logits(shards, IDS).float(), peft_model(IDS).logits.float()
        err = float((got - want).abs().max() / want.abs().max())
        assert err < BF16_TOL, f"step {step}: relative max error {err}"


def test_no_accumulation_and_exact_restore():
    peft_model, lcfg, shards = _tiny()
    appliers = [LoraMergeApplier(s, tp_size=s.tp_size) for s in shards]
    w0 = _snapshot(shards)
    _train_step(peft_model)
    payload = _payload(peft_model, lcfg)
    for a in appliers:
        a.apply(payload)
    once = _snapshot(shards)
    for a in appliers:
        a.apply(payload)
    _assert_same(shards, once)  # same adapter twice -> identical weights
    with torch.no_grad():
        for n, p in lora_parameters(peft_model):
            if ".lora_B." in n:
                p.zero_()
    zero = _payload(peft_model, lcfg, version=1)
    for a in appliers:
        a.apply(zero)
    _assert_same(shards, w0)  # ΔW = 0 -> exactly the pristine base again


def test_wrong_name_raises_and_leaves_weights_untouched():
    peft_model, lcfg, shards = _tiny()
    _train_step(peft_model)
    payload = _payload(peft_model, lcfg)
    bad = pickle.loads(pickle.dumps(payload))
    w0 = _snapshot(shards)
    applier = LoraMergeApplier(shards[0], tp_size=2)
    bad["modules"][-1]["name"] = bad["modules"][-1]["name"].replace("v_proj", "vv_proj")
    with pytest.raises(LoraSyncError, match="did not load"):
        applier.apply(bad)  # first sync: vLLM's loader skips the name silently, the probe notices
    _assert_same(shards, w0)
    bad["modules"][0]["name"] = bad["modules"][0]["name"].replace("layers.0", "layers.7")
    with pytest.raises(LoraSyncError, match="could hold"):
        applier.apply(bad)  # a layer the model does not have
    _assert_same(shards, w0)
    applier.apply(payload)
    good = _snapshot(shards)
    bad2 = pickle.loads(pickle.dumps(payload))
    bad2["modules"][3]["name"] = "model.layers.0.self_attn.qq_proj.weight"
    with pytest.raises(LoraSyncError, match="unknown"):
        applier.apply(bad2)  # later sync: validated before anything is written
    _assert_same(shards, good)


def test_count_mismatch_raises():
    peft_model, lcfg, shards = _tiny()
    _train_step(peft_model)
    payload = _payload(peft_model, lcfg)
    applier = LoraMergeApplier(shards[1], tp_size=2)
    tampered = dict(payload, num_modules=payload["num_modules"] + 1)
    with pytest.raises(LoraSyncError, match="declares"):
        applier.apply(tampered)
    applier.apply(payload)
    fewer = dict(payload, modules=payload["modules"][1:], num_modules=payload["num_modules"] - 1)
    with pytest.raises(LoraSyncError, match="missing"):
        applier.apply(fewer)
    report = applier.apply(payload)
    check_apply_results([[report, report]], payload)  # the worker's report is what the trainer checks


# ----------------------------------------------------------------------------------------------------------
# bf16 rounding, index placements


def test_bf16_rounding_report():
    torch.manual_seed(0)
    w0 = (torch.randn(256, 256) * 0.02).to(torch.bfloat16)
    tiny = bf16_rounding_report(w0, torch.full((256, 256), 1e-7))
    assert tiny["swallowed"] > 0.99 and tiny["realized_norm_ratio"] < 0.1
    big = bf16_rounding_report(w0, torch.randn(256, 256) * 0.02)
    assert big["swallowed"] < 0.05 and big["rel_error"] < 0.05


def test_bf16_rounding_report_on_a_case_worked_by_hand():
    w0 = torch.tensor([1.0, 1.0, 2.0, 0.5], dtype=torch.bfloat16)
    # 0 is left out; 2^-9 is under half a bf16 step at 1.0 (2^-8): swallowed; 2^-6 and 0.25 land exactly
    delta = torch.tensor([0.0, 2.0**-9, 2.0**-6, 0.25])
    dn = math.sqrt(2.0**-18 + 2.0**-12 + 0.0625)
    got = bf16_rounding_report(w0, delta)
    assert got == pytest.approx({"swallowed": 1 / 3, "realized_norm_ratio": math.sqrt(2.0**-12 + 0.0625) / dn,
                                 "rel_error": 2.0**-9 / dn, "elements": 3}, rel=1e-6)
    empty = bf16_rounding_report(w0, torch.zeros(4))
    assert set(empty) == {"swallowed", "realized_norm_ratio", "rel_error", "elements"} and empty["elements"] == 0
    assert all(math.isnan(empty[k]) for k in ("swallowed", "realized_norm_ratio", "rel_error"))


class _StridedModel(nn.Module):
    """A loader that scatters permuted source rows into every other row (exercises index placements)."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        torch.manual_seed(1)
        self.perm = torch.randperm(6)
        self.scale = scale
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([nn.Module()])
        self.model.layers[0].proj = param_holder(weight=torch.randn(12, 5))

    def load_weights(self, weights):
        loaded = set()
        for name, w in weights:
            if name == "model.layers.0.proj.weight":
                self.model.layers[0].proj.weight.data[::2] = w[self.perm] * self.scale
                loaded.add(name)
        return loaded


def _single_payload(a, b, scaling=2.0):
    return {"format": PAYLOAD_FORMAT, "version": 0, "adapter": "default", "num_modules": 1,
            "modules": [{"name": "model.layers.0.proj.weight", "scaling": scaling,
                         "A": encode_tensor(a), "B": encode_tensor(b)}]}


def test_non_contiguous_placement_and_non_narrowing_loader():
    m = _StridedModel()
    w0 = m.model.layers[0].proj.weight.detach().clone()
    a, b = torch.randn(3, 5), torch.randn(6, 3)
    LoraMergeApplier(m).apply(_single_payload(a, b))
    want = w0.clone()
    want[::2] = w0[::2] + 2.0 * (b @ a)[m.perm]
    assert torch.equal(m.model.layers[0].proj.weight, want)
    scaled = _StridedModel(scale=0.5)
    w0 = scaled.model.layers[0].proj.weight.detach().clone()
    with pytest.raises(LoraSyncError, match="narrowing"):
        LoraMergeApplier(scaled).apply(_single_payload(a, b))
    assert torch.equal(scaled.model.layers[0].proj.weight, w0)


def test_targets_landing_on_the_same_rows_of_a_parameter_are_refused():
    from rft.train.lora_merge import _Placement

    def at(rows, param="qkv"):
        return _Placement(param, rows, slice(0, 4), rows, slice(0, 4), (8, 4))

    apart = {"q": at(slice(0, 4)), "k": at(torch.tensor([4, 5])), "other": at(slice(0, 4), param="o")}
    LoraMergeApplier._check_disjoint(apart)  # disjoint rows, or another parameter: fine
    with pytest.raises(LoraSyncError) as err:  # overlaps the first target, not the one just before it
        LoraMergeApplier._check_disjoint({**apart, "v": at(torch.tensor([6, 2]))})
    assert str(err.value) == "v: overlaps another target in qkv"


def test_a_loader_that_refuses_a_tensor_is_named_with_its_shape_and_error():
    class Refusing(nn.Module):
        def load_weights(self, weights):
            raise ValueError("size mismatch for qkv_proj")

    with pytest.raises(LoraSyncError) as err:
        LoraMergeApplier(Refusing())._load("model.layers.0.self_attn.q_proj.weight", torch.zeros(6, 4))
    assert str(err.value) == (
        "model.layers.0.self_attn.q_proj.weight: vLLM's load_weights refused a (6, 4) tensor "
        "(ValueError: size mismatch for qkv_proj); the adapter does not fit the served model"
    )
