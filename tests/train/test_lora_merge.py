"""LoRA merge sync (rft.train.lora_merge): a real PEFT model vs a tiny Llama in vLLM's fused, tensor-parallel layout.

The vLLM-layout model (rft/fixtures/vllm_layout.py) mirrors vLLM's Llama loaders: ``stacked_params_mapping`` into
fused ``qkv_proj`` / ``gate_up_proj``, ``QKVParallelLinear`` narrowing (k/v shard = tp_rank // kv_replicas),
``MergedColumnParallelLinear`` and ``RowParallelLinear`` (input dim), unknown names silently skipped,
``load_weights`` returning the loaded parameter names. Each TP rank has its own ``LoraMergeApplier``,
exactly as each vLLM worker would.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable

import pytest
import torch
from torch import nn

from rft.fixtures.vllm_layout import VllmLayoutLlama, param_holder, tp_logits
from rft.train.lora_merge import LoraMergeApplier, bf16_rounding_report, kept_sums
from rft.train.lora_payload import (
    PAYLOAD_FORMAT,
    LoraSyncError,
    build_payload,
    check_apply_results,
    encode_tensor,
    lora_parameters,
)

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


# ----------------------------------------------------------------------------------------------------------
# stand-in loaders: plain gathers the merge must follow, and misbehaving ones the probe must refuse

Write = Callable[[dict[str, nn.Parameter], str, torch.Tensor], list[str]]
Ix = slice | list[int]
TARGET = "model.layers.0.proj.weight"
PA, PB, HEAD = "model.layers.0.a.weight", "model.layers.0.b.weight", "lm_head.weight"


class _Loader(nn.Module):
    """Layer 0 holds weights ``a`` and ``b``, plus an ``lm_head``; ``write(params, name, w)`` is the loader.

    ``write`` writes into ``params`` (name -> parameter) and returns the names it reports as loaded;
    every tensor handed to ``load_weights`` is kept in ``received``.
    """

    def __init__(self, write: Write, a: tuple[int, int] = (12, 5), b: tuple[int, int] = (12, 5),
                 head: tuple[int, int] = (4, 5), dtype: torch.dtype = torch.float32):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([nn.Module()])
        self.model.layers[0].a = param_holder(weight=torch.randn(a, generator=g).to(dtype))
        self.model.layers[0].b = param_holder(weight=torch.randn(b, generator=g).to(dtype))
        self.lm_head = param_holder(weight=torch.randn(head, generator=g).to(dtype))
        self.write = write
        self.received: list[torch.Tensor] = []

    def load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> set[str]:
        """Hand each (name, tensor) to ``write``; the names it reports."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, w in weights:
            self.received.append(w)
            loaded |= set(self.write(params, name, w))
        return loaded


def _copy_into(pname: str, target: str = TARGET) -> Write:
    """A loader that copies ``target`` whole into ``pname``."""

    def write(params: dict[str, nn.Parameter], name: str, w: torch.Tensor) -> list[str]:
        if name != target:
            return []
        params[pname].data.copy_(w)
        return [pname]

    return write


def _gather_into(pname: str, dst_rows: Ix, dst_cols: Ix, src_rows: Ix, src_cols: Ix, target: str = TARGET) -> Write:
    """A loader doing ``param[dst_rows, dst_cols] = w[src_rows][:, src_cols]`` (slices or index lists)."""

    def write(params: dict[str, nn.Parameter], name: str, w: torch.Tensor) -> list[str]:
        if name != target:
            return []
        param = params[pname].data
        rows, cols = _ix(dst_rows, param.shape[0]), _ix(dst_cols, param.shape[1])
        param[rows[:, None], cols[None, :]] = w[_ix(src_rows, w.shape[0])][:, _ix(src_cols, w.shape[1])]
        return [pname]

    return write


def _ix(idx: Ix, n: int) -> torch.Tensor:
    """A slice or index list over a dimension of length ``n`` as an index tensor."""
    return torch.arange(n)[idx] if isinstance(idx, slice) else torch.tensor(idx)


def _adapter(out_f: int, in_f: int, r: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """LoRA A (r x in_f) and B (out_f x r) for a weight of shape (out_f, in_f)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(r, in_f, generator=g), torch.randn(out_f, r, generator=g)


def _payload_for(a: torch.Tensor, b: torch.Tensor, name: str = TARGET, scaling: float = 2.0) -> dict:
    """A one-module payload for ``name``."""
    return {"format": PAYLOAD_FORMAT, "version": 0, "adapter": "default", "num_modules": 1,
            "modules": [{"name": name, "scaling": scaling, "A": encode_tensor(a), "B": encode_tensor(b)}]}


def _weights(m: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every parameter of ``m``."""
    return {n: p.detach().clone() for n, p in m.named_parameters()}


GATHERS = {
    # param shape, weight shape, dst rows, dst cols, src rows, src cols, target
    "columns-scattered": ((8, 6), (8, 3), slice(None), [0, 2, 4], slice(None), [2, 0, 1], TARGET),
    "rows-reversed": ((4, 3), (2, 3), [1, 2], slice(None), [1, 0], slice(None), TARGET),
    "a-source-row-twice": ((4, 3), (2, 3), [0, 1, 2], slice(None), [0, 1, 1], slice(None), TARGET),
    "lm-head-outside-the-layers": ((4, 5), (4, 5), slice(None), slice(None), slice(None), slice(None), HEAD),
}


@pytest.mark.parametrize("case", list(GATHERS))
def test_the_merge_follows_any_row_column_gather_of_the_loader(case):
    pshape, wshape, dr, dc, sr, sc, target = GATHERS[case]
    pname = HEAD if target == HEAD else PA
    m = _Loader(_gather_into(pname, dr, dc, sr, sc, target), a=pshape, head=pshape)
    before = _weights(m)
    a, b = _adapter(*wshape)
    LoraMergeApplier(m).apply(_payload_for(a, b, name=target))
    delta = 2.0 * (b @ a)
    want = before[pname].clone()
    dst = (_ix(dr, pshape[0])[:, None], _ix(dc, pshape[1])[None, :])
    want[dst] += delta[_ix(sr, wshape[0])][:, _ix(sc, wshape[1])]  # param[dst] = W0[dst] + ΔW[src]
    after = _weights(m)
    torch.testing.assert_close(after[pname], want, rtol=0, atol=1e-6)
    for n, w in before.items():
        if n != pname:
            assert torch.equal(after[n], w), n


@pytest.mark.parametrize(
    "rows,cols",
    [(slice(1, 5), torch.tensor([2, 0])), (torch.tensor([5, 0, 3]), slice(0, 3)),
     (torch.tensor([3, 1]), torch.tensor([0, 2])), (slice(4, 6), slice(1, 3))],
)
def test_a_region_selects_its_rows_and_columns_with_indices_on_the_weights_device(rows, cols):
    from rft.train.lora_merge import _region

    t = torch.arange(18.0).reshape(6, 3)
    want = t[torch.arange(6)[rows]][:, torch.arange(3)[cols]]
    assert torch.equal(t[_region(t, rows, cols)], want)
    if isinstance(rows, slice) and isinstance(cols, slice):
        return
    on_meta = _region(torch.empty(6, 3, device="meta"), rows, cols)
    assert [i.device.type for i in on_meta] == ["meta", "meta"]


REFUSALS = {
    # loader, weight shape, the refusal (after the target's name)
    "writes-into-two-weights": (
        lambda p, n, w: (p[PA].data.copy_(w), p[PB].data.copy_(w), [PA, PB])[-1], (12, 5),
        f" loaded into {[PA, PB]}, expected one weight of its layer; "
        "weights outside that layer may now be corrupt: restart the engine"),
    "shifts-every-value": (
        lambda p, n, w: (p[PA].data.copy_(w - 1), [PA])[-1], (12, 5),
        ": vLLM loader wrote different regions for different probes"),
    "writes-a-triangle": (
        lambda p, n, w: (p[PA].data.copy_(w.tril()), [PA])[-1], (12, 5),
        f": vLLM loader did not write a row x column block of {PA}"),
    "writes-nothing": (lambda p, n, w: [PA], (12, 5), f": vLLM loader did not write a row x column block of {PA}"),
    "skews-the-columns": (
        lambda p, n, w: (p[PA].data.copy_(torch.stack([w[i].roll(i) for i in range(12)])), [PA])[-1], (12, 5),
        ": vLLM loader is not a plain row/column narrowing (cannot merge)"),
    "rounds-every-value": (
        lambda p, n, w: (p[PA].data.copy_(w.round()), [PA])[-1], (12, 5),
        ": vLLM loader is not a plain row/column narrowing (cannot merge)"),
    "raises-values-above-1-rows": (
        lambda p, n, w: (p[PA].data.copy_(w + (w > 1)), [PA])[-1], (2, 1),
        ": vLLM loader is not a plain row/column narrowing (index out of range)"),
    "raises-values-above-1-columns": (
        lambda p, n, w: (p[PA].data.copy_(w + (w > 1)), [PA])[-1], (1, 2),
        ": vLLM loader is not a plain row/column narrowing (index out of range)"),
    "negates-values-above-1": (
        lambda p, n, w: (p[PA].data.copy_(torch.where(w > 1, -w, w)), [PA])[-1], (2, 1),
        ": vLLM loader is not a plain row/column narrowing (index out of range)"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_loader_that_does_not_write_one_plain_copy_is_refused_and_undone(case):
    write, shape, refusal = REFUSALS[case]
    m = _Loader(write, a=shape, b=shape)
    before = _weights(m)
    with pytest.raises(LoraSyncError) as err:
        LoraMergeApplier(m).apply(_payload_for(*_adapter(*shape)))
    name = repr(TARGET) if case == "writes-into-two-weights" else TARGET
    assert str(err.value) == name + refusal
    after = _weights(m)
    assert all(torch.equal(after[n], w) for n, w in before.items())


@pytest.mark.parametrize("shape", [(65536, 1), (1, 65536)], ids=["65536-rows", "65536-columns"])
def test_the_largest_probed_dimension_merges_and_one_more_is_refused(shape):
    m = _Loader(_copy_into(PA), a=shape, b=(1, 1), head=(1, 1))
    w0 = m.model.layers[0].a.weight.detach().clone()
    a, b = _adapter(*shape)
    LoraMergeApplier(m).apply(_payload_for(a, b))
    torch.testing.assert_close(m.model.layers[0].a.weight, w0 + 2.0 * (b @ a), rtol=0, atol=1e-6)
    big = tuple(d + 1 if d > 1 else d for d in shape)
    with pytest.raises(LoraSyncError) as err:
        LoraMergeApplier(_Loader(_copy_into(PA), a=big, b=(1, 1), head=(1, 1))).apply(_payload_for(*_adapter(*big)))
    assert str(err.value) == f"{TARGET}: dimension 65537 too large to probe"


@pytest.mark.parametrize(
    "wshape,keep,what",
    [((6, 4), (slice(0, 3), slice(None)), "3 of the adapter weight's 6 rows"),
     ((4, 4), (slice(None), slice(0, 2)), "2 of the adapter weight's 4 columns")],
)
def test_a_rank_keeping_less_than_its_share_of_a_dimension_is_refused_by_name(wshape, keep, what):
    def write(params: dict[str, nn.Parameter], name: str, w: torch.Tensor) -> list[str]:
        params[PA].data.copy_(w[keep])
        return [PA]

    kept = torch.zeros(wshape)[keep].shape
    a, b = _adapter(*wshape)
    m = _Loader(write, a=kept)
    with pytest.raises(LoraSyncError) as err:
        LoraMergeApplier(m).apply(_payload_for(a, b))  # tensor parallel 1 unless told otherwise
    assert str(err.value) == (f"{TARGET}: vLLM's loader keeps {what} (tensor parallel 1): "
                              "the adapter does not fit the served model")
    w0 = m.model.layers[0].a.weight.detach().clone()
    LoraMergeApplier(m, tp_size=2).apply(_payload_for(a, b))  # half of it is this rank's share at TP 2
    torch.testing.assert_close(m.model.layers[0].a.weight, w0 + 2.0 * (b @ a)[keep], rtol=0, atol=1e-6)


def test_the_probe_hands_the_loader_weights_of_the_served_dtype_and_leaves_the_global_rng_alone():
    m = _Loader(_copy_into(PA), dtype=torch.bfloat16)
    w0 = m.model.layers[0].a.weight.detach().clone()
    a, b = _adapter(12, 5)
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    LoraMergeApplier(m).apply(_payload_for(a, b))
    assert torch.equal(torch.get_rng_state(), rng)
    assert m.received and {(w.dtype, tuple(w.shape)) for w in m.received} == {(torch.bfloat16, (12, 5))}
    assert torch.equal(m.model.layers[0].a.weight, (w0.float() + 2.0 * (b @ a)).to(torch.bfloat16))


def test_the_pristine_weights_are_kept_on_the_snapshot_device():
    m = _Loader(_copy_into(PA))
    before = _weights(m)
    for device, want in ((None, "cpu"), ("meta", "meta")):
        applier = LoraMergeApplier(m, snapshot_device=device)
        applier._discover({TARGET: (12, 5)})
        assert list(applier.pristine) == [PA] and applier.pristine[PA].device.type == want
        assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())


def test_a_swap_within_one_row_is_refused_even_where_the_random_probe_holds_equal_values():
    shape = (2, 512)
    plain = _Loader(_copy_into(PA), a=shape, b=shape, dtype=torch.bfloat16)
    LoraMergeApplier(plain).apply(_payload_for(*_adapter(*shape)))
    rnd = next(w for w in plain.received if not torch.equal(w, w.round()))  # the one probe of random values
    values, order = rnd[1].float().sort()
    k = int((values[1:] == values[:-1]).nonzero()[0])  # two equal values in row 1 (bf16 has few near 1)
    i, j = int(order[k]), int(order[k + 1])

    def swap_in_row_1(params: dict[str, nn.Parameter], name: str, w: torch.Tensor) -> list[str]:
        x = w.clone()
        x[1, [i, j]] = w[1, [j, i]]
        params[PA].data.copy_(x)
        return [PA]

    assert i != j and rnd[1, i] == rnd[1, j]  # so the random probe alone cannot see the swap
    m = _Loader(swap_in_row_1, a=shape, b=shape, dtype=torch.bfloat16)
    before = _weights(m)
    with pytest.raises(LoraSyncError, match=r"not a plain row/column narrowing \(cannot merge\)"):
        LoraMergeApplier(m).apply(_payload_for(*_adapter(*shape)))
    assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())


def test_kept_sums_measure_what_survives_bf16_and_add_over_shards():
    w0 = torch.full((4, 8), 0.02, dtype=torch.bfloat16)  # ulp 2^-13 at 0.02: half an ulp is 6.1e-5
    small = w0.float() + 1e-5  # below half an ulp: all lost
    num, den = kept_sums(w0, small)
    assert num == 0.0 and den == pytest.approx(32 * 1e-10)
    large = w0.float() + 1e-2  # far above: kept to within rounding
    num, den = kept_sums(w0, large)
    assert num / den == pytest.approx(1.0, abs=0.01)
    # scale c: the same update c times smaller, rounded again (the recipe LR's share)
    assert kept_sums(w0, large, 1e-3)[0] == 0.0
    # two shards add: their ratio is the share of the whole
    n1, d1 = kept_sums(w0, small)
    n2, d2 = kept_sums(w0, large)
    assert (n1 + n2) / (d1 + d2) == pytest.approx(n2 / (d1 + d2))


def test_apply_reports_the_kept_sums_only_when_asked():
    m = _Loader(_copy_into(PA), dtype=torch.bfloat16)
    a, b = _adapter(12, 5)
    rep = LoraMergeApplier(m).apply(_payload_for(a, b))
    assert "kept" not in rep
    rep = LoraMergeApplier(m).apply({**_payload_for(a, b), "kept_scales": [1.0, 1e-6]})
    (num, den), (num_small, _) = rep["kept"]
    assert 0.9 < num / den <= 1.1 and num_small == 0.0
