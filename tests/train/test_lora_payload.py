"""The LoRA sync payload (rft.train.lora_payload) from a real PEFT model: plain Python that survives pickle and
msgpack, PEFT's scaling, refusals of what the sync cannot carry, and the checks on the engines' side.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import msgpack
import pytest
import torch

from rft.cpu.local_ray import free_port
from rft.provenance import REPO_ROOT as ROOT
from rft.train.lora_payload import (
    LoraSyncError,
    build_payload,
    check_apply_results,
    check_same_targets,
    decode_payload,
    decode_tensor,
    encode_tensor,
    hf_base_name,
    lora_parameters,
    payload_nbytes,
    raise_if_failed_on_any_rank,
)
from tests.support.processes import groups


def _peft(targets, seed=0):
    """A 2-layer GQA Llama with a LoRA adapter (r=4, alpha=8) on ``targets``, every lora_B moved off zero."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      max_position_embeddings=64, tie_word_embeddings=False)
    lcfg = LoraConfig(r=4, lora_alpha=8, target_modules=list(targets), lora_dropout=0.0, bias="none")
    peft_model = get_peft_model(LlamaForCausalLM(cfg), lcfg)
    with torch.no_grad():
        for _, p in lora_parameters(peft_model):
            p.add_(torch.randn(p.shape) * 0.1)
    return peft_model, lcfg


def _payload(peft_model, lcfg, version=0):
    return build_payload({n: p.data for n, p in lora_parameters(peft_model)}, lcfg, version=version)


def test_payload_is_plain_python_and_roundtrips():
    peft_model, lcfg = _peft(targets=["q_proj", "v_proj"])
    payload = _payload(peft_model, lcfg, version=5)

    def plain(x):
        if isinstance(x, dict):
            return all(isinstance(k, str) and plain(v) for k, v in x.items())
        if isinstance(x, list):
            return all(plain(v) for v in x)
        return isinstance(x, str | bytes | int | float)

    assert plain(payload)
    assert {m["name"] for m in payload["modules"]} == {
        f"model.layers.{i}.self_attn.{p}.weight" for i in range(2) for p in ("q_proj", "v_proj")}
    assert {m["scaling"] for m in payload["modules"]} == {2.0}
    assert payload_nbytes(payload) == sum(p.numel() * 4 for _, p in lora_parameters(peft_model))
    for blob in (pickle.loads(pickle.dumps(payload)), msgpack.unpackb(msgpack.packb(payload, use_bin_type=True))):
        assert blob == payload
    named = dict(lora_parameters(peft_model))
    for m in msgpack.unpackb(msgpack.packb(payload, use_bin_type=True))["modules"]:
        key = "base_model.model." + m["name"].removesuffix(".weight")
        assert torch.equal(decode_tensor(m["A"]), named[key + ".lora_A.default.weight"])
        assert torch.equal(decode_tensor(m["B"]), named[key + ".lora_B.default.weight"])
    t = torch.randn(3, 5).to(torch.bfloat16)
    assert torch.equal(decode_tensor(pickle.loads(pickle.dumps(encode_tensor(t)))), t)
    small = build_payload({n: p.data for n, p in named.items()}, lcfg, wire_dtype=torch.bfloat16)
    assert payload_nbytes(small) * 2 == payload_nbytes(payload)


def test_payload_rejects_bad_input():
    peft_model, lcfg = _peft(targets=["q_proj"])
    named = {n: p.data for n, p in lora_parameters(peft_model)}
    a_name = next(n for n in named if ".lora_A." in n)
    with pytest.raises(LoraSyncError, match="ZeRO-3"):
        build_payload(dict(named, **{a_name: torch.empty(0)}), lcfg)  # ungathered ZeRO-3 param
    with pytest.raises(LoraSyncError, match="partner"):
        build_payload({k: v for k, v in named.items() if k != a_name}, lcfg)
    with pytest.raises(LoraSyncError, match="use_dora"):
        build_payload(named, dict(lcfg.to_dict(), use_dora=True))
    with pytest.raises(LoraSyncError, match="no lora_A"):
        build_payload({"model.embed_tokens.weight": torch.zeros(2, 2)}, lcfg)
    with pytest.raises(LoraSyncError, match="bytes"):
        decode_tensor({"dtype": "float32", "shape": [2], "data": [0.0, 1.0]})  # what a tensor in args becomes


def test_an_adapter_part_the_merge_cannot_carry_is_refused_not_skipped():
    """LoRA on the embedding: its lora_embedding_A/B are collected and refused, never silently left out."""
    peft_model, lcfg = _peft(targets=["q_proj", "embed_tokens"])
    names = [n for n, _ in lora_parameters(peft_model)]
    assert any("embed_tokens.lora_embedding_A" in n for n in names) and any(".lora_A." in n for n in names)
    with pytest.raises(LoraSyncError, match="embed_tokens.lora_embedding_A"):
        build_payload([(n, p.data) for n, p in lora_parameters(peft_model)], lcfg)


def test_scaling_follows_peft():
    peft_model, lcfg = _peft(targets=["q_proj", "v_proj"])
    named = {n: p.data for n, p in lora_parameters(peft_model)}
    cfg = dict(lcfg.to_dict(), alpha_pattern={"v_proj": 2})
    got = {m["name"]: m["scaling"] for m in build_payload(named, cfg)["modules"]}
    assert got["model.layers.1.self_attn.v_proj.weight"] == 0.5 and got["model.layers.1.self_attn.q_proj.weight"] == 2
    rs = build_payload(named, dict(lcfg.to_dict(), use_rslora=True))["modules"][0]["scaling"]
    assert rs == pytest.approx(8 / 2)
    # PEFT's own module scaling agrees with the payload
    lin = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    assert lin.scaling["default"] == build_payload(named, lcfg)["modules"][0]["scaling"]
    assert hf_base_name("base_model.model.model.layers.0.mlp.up_proj") == "model.layers.0.mlp.up_proj.weight"


def test_decode_payload_is_the_inverse_and_checks_the_envelope():
    peft_model, lcfg = _peft(targets=["q_proj", "v_proj"])
    payload = _payload(peft_model, lcfg)
    named = dict(lora_parameters(peft_model))
    decoded = decode_payload(msgpack.unpackb(msgpack.packb(payload, use_bin_type=True)))
    assert list(decoded) == [m["name"] for m in payload["modules"]]
    for name, (scaling, a, b) in decoded.items():
        key = "base_model.model." + name.removesuffix(".weight")
        assert scaling == 2.0
        assert torch.equal(a, named[key + ".lora_A.default.weight"])
        assert torch.equal(b, named[key + ".lora_B.default.weight"])
    with pytest.raises(LoraSyncError, match="format"):
        decode_payload(dict(payload, format="rft-lora-sync/0"))
    with pytest.raises(LoraSyncError, match="declares"):
        decode_payload(dict(payload, num_modules=payload["num_modules"] + 1))
    twice = [payload["modules"][0], payload["modules"][0]] + payload["modules"][2:]
    with pytest.raises(LoraSyncError, match="twice"):
        decode_payload(dict(payload, modules=twice))
    first = payload["modules"][0]
    unchained = dict(first, B=encode_tensor(decode_tensor(first["B"])[:, :-1]))
    with pytest.raises(LoraSyncError, match="do not chain"):
        decode_payload(dict(payload, modules=[unchained] + payload["modules"][1:]))


def test_apply_results_and_targets_are_checked():
    payload = _payload(*_peft(targets=["q_proj"]), version=3)
    good = {"version": 3, "modules": payload["num_modules"]}
    assert check_apply_results([[good, good], (good,)], payload) == [good] * 3  # engines x workers, flattened
    with pytest.raises(LoraSyncError, match="worker 1 applied 1 modules"):
        check_apply_results([[good, dict(good, modules=1)]], payload)
    with pytest.raises(LoraSyncError, match="version 2"):
        check_apply_results([[dict(good, version=2)]], payload)
    with pytest.raises(LoraSyncError, match="no vLLM worker"):
        check_apply_results([[]], payload)
    with pytest.raises(LoraSyncError, match="unexpected"):
        check_apply_results([None], payload)
    check_same_targets(["a", "b"], ["b", "a"])
    with pytest.raises(LoraSyncError, match=r"unknown \['c'\], missing \['a'\]"):
        check_same_targets(["a", "b"], ["b", "c"])


def test_a_failure_outside_torch_distributed_is_raised_as_a_sync_error():
    """Outside torch.distributed there is no one to tell: the failure is raised locally, None passes."""
    raise_if_failed_on_any_rank(None)
    with pytest.raises(LoraSyncError, match="failed on rank 0.*ValueError: engine 1 died") as err:
        raise_if_failed_on_any_rank(ValueError("engine 1 died"))
    assert isinstance(err.value.__cause__, ValueError)


@pytest.mark.parametrize(
    ("setting", "refusal"),
    [
        ({"use_dora": True}, "use_dora=True (magnitude vectors are not merged)"),
        ({"fan_in_fan_out": True}, "fan_in_fan_out=True (Conv1D layout)"),
        ({"bias": "lora_only"}, "bias='lora_only' (trained biases are not synced)"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save (full modules are not synced)"),
        ({"target_parameters": ["mlp.experts.gate_up_proj"]}, "target_parameters (parameter-level LoRA on experts)"),
    ],
)
def test_each_config_the_merge_cannot_carry_is_refused_by_name(setting, refusal):
    peft_model, lcfg = _peft(targets=["q_proj"])
    named = {n: p.data for n, p in lora_parameters(peft_model)}
    for config in (dict(lcfg.to_dict(), **setting), type("Cfg", (), dict(lcfg.to_dict(), **setting))()):
        with pytest.raises(LoraSyncError) as err:  # a dict and an object with attributes alike
            build_payload(named, config)
        assert str(err.value) == f"LoRA config not supported by the merge sync: {refusal}"
    both = dict(lcfg.to_dict(), use_dora=True, bias="all")
    with pytest.raises(LoraSyncError, match=r"sync: use_dora=True \(magnitude vectors are not merged\); bias='all'"):
        build_payload(named, both)
    # the defaults a minimal config leaves out are the supported ones
    minimal = {"r": 4, "lora_alpha": 8}
    assert build_payload(named, minimal)["num_modules"] == 2
    assert build_payload(named, type("Cfg", (), minimal)())["modules"][0]["scaling"] == 2.0


def test_rank_pattern_gives_each_module_its_rank():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
    lcfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], rank_pattern={"v_proj": 2})
    named = {n: p.data for n, p in lora_parameters(get_peft_model(LlamaForCausalLM(cfg), lcfg))}
    payload = build_payload(named, lcfg)
    ranks = {m["name"]: decode_tensor(m["A"]).shape[0] for m in payload["modules"]}
    assert ranks == {"model.layers.0.self_attn.q_proj.weight": 4, "model.layers.0.self_attn.v_proj.weight": 2}
    assert payload["version"] == 0 and payload["adapter"] == "default"
    assert {m["scaling"] for m in payload["modules"]} == {2.0, 4.0}  # alpha / r per module
    with pytest.raises(LoraSyncError, match=r"v_proj: lora_A \(2, 32\) / lora_B \(16, 2\) do not match r=4; under"):
        build_payload(named, dict(lcfg.to_dict(), rank_pattern={}))


SYNC_RANK_N = """
import sys, datetime, torch.distributed as dist
from rft.train.lora_payload import LoraSyncError, raise_if_failed_on_any_rank
from tests.train.test_lora_payload import FAILURES
rank, world = int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=30))
for failure in FAILURES[rank]:
    try:
        raise_if_failed_on_any_rank(failure)
        print("OK", flush=True)
    except LoraSyncError as e:
        print(e, flush=True)
dist.destroy_process_group()
"""
# each rank's outcome in three syncs: every rank fails, then rank 1 alone, then none
FAILURES = {0: (ValueError("rank 0 too"), None, None),
            1: (RuntimeError("rank 1 lost its shard"), RuntimeError("rank 1 again"), None),
            2: (RuntimeError("rank 2 lost it too"), None, None)}  # fmt: skip


@pytest.mark.parametrize("world", [2, 3])
def test_the_gathered_outcome_names_the_first_failing_rank_and_the_others(world):
    """Rank 0 in this process, the other ranks as subprocesses of a gloo group: each rank reads the same outcome.

    mutmut counts only the in-process calls. When the suite's shared world-1 group (conftest `dist_world`) holds
    the default group already, rank 0 runs as a subprocess too.
    """
    import datetime

    import torch.distributed as dist

    port = str(free_port())
    in_process = not dist.is_initialized()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmds = [[sys.executable, "-c", SYNC_RANK_N, port, str(r), str(world)] for r in range(1 if in_process else 0, world)]
    seen = []
    with groups(cmds, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT) as procs:
        if in_process:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=world,
                                    timeout=datetime.timedelta(seconds=30))
            try:
                for failure in FAILURES[0]:
                    try:
                        raise_if_failed_on_any_rank(failure)
                        seen.append("OK")
                    except LoraSyncError as e:
                        seen.append(str(e))
            finally:
                dist.destroy_process_group()
        outs = [p.communicate(timeout=60) for p in procs]
    also = ", ".join(str(r) for r in range(1, world))
    every = f"LoRA sync to vLLM failed on rank 0 (also rank(s) {also}), stopping every rank: ValueError: rank 0 too"
    alone = "LoRA sync to vLLM failed on rank 1, stopping every rank: RuntimeError: rank 1 again"
    assert seen == ([every, alone, "OK"] if in_process else [])
    for (out, err), proc in zip(outs, procs, strict=True):
        assert proc.returncode == 0 and out.splitlines() == [every, alone, "OK"], err[-2000:]


def _module_tensors(a_shape, b_shape) -> dict[str, torch.Tensor]:
    base = "base_model.model.model.layers.0.self_attn.q_proj"
    return {f"{base}.lora_A.default.weight": torch.zeros(a_shape), f"{base}.lora_B.default.weight": torch.zeros(b_shape)}


Q = "base_model.model.model.layers.0.self_attn.q_proj"
CFG = {"r": 4, "lora_alpha": 8}
ZERO3 = "under ZeRO-3 gather them first (deepspeed.zero.GatheredParameters)"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: build_payload({f"{Q}.lora_B.default.weight": torch.zeros(8, 4)}, CFG),
         f"{Q}: has lora_B but not its partner"),
        (lambda: build_payload({f"{Q}.lora_A.default.weight": torch.zeros(4, 8)}, CFG),
         f"{Q}: has lora_A but not its partner"),
        (lambda: build_payload(_module_tensors((3, 8), (8, 4)), CFG),
         f"{Q}: lora_A (3, 8) / lora_B (8, 4) do not match r=4; " + ZERO3),
        (lambda: build_payload(_module_tensors((4, 8), (8,)), CFG), f"{Q}: lora_A (4, 8) / lora_B (8,) do not match r=4; " + ZERO3),
        (lambda: build_payload(_module_tensors((4,), (8, 4)), CFG), f"{Q}: lora_A (4,) / lora_B (8, 4) do not match r=4; " + ZERO3),
        (lambda: decode_payload({"format": "other/1"}), "payload format 'other/1', expected 'rft-lora-sync/1'"),
        (lambda: decode_payload({"format": "rft-lora-sync/1", "modules": [], "num_modules": 2}),
         "payload carries 0 modules but declares 2"),
        (lambda: decode_payload({"format": "rft-lora-sync/1", "num_modules": 1, "modules": [
            {"name": "w", "scaling": 1.0, "A": encode_tensor(torch.zeros(4)), "B": encode_tensor(torch.zeros(8, 4))}]}),
         "w: A (4,) and B (8, 4) do not chain"),
        (lambda: decode_tensor({"shape": [2], "data": b""}), "malformed encoded tensor: KeyError('dtype')"),
        (lambda: decode_tensor({"dtype": "float32", "shape": [2], "data": [0.0, 1.0]}),
         "encoded tensor data is list, expected bytes"),
        (lambda: decode_tensor({"dtype": "float32", "shape": [2], "data": b"\0" * 4}),
         "encoded tensor has 4 bytes, shape [2] float32 needs 8"),
        (lambda: encode_tensor(torch.zeros(2, dtype=torch.complex64)), "cannot encode tensor of dtype torch.complex64"),
        (lambda: check_same_targets([f"m{i}" for i in range(7)], [f"n{i}" for i in range(7)]),
         "payload targets differ from the first sync: unknown ['n0', 'n1', 'n2', 'n3', 'n4'], "
         "missing ['m0', 'm1', 'm2', 'm3', 'm4'] (7 unknown, 7 missing)"),
        (lambda: check_apply_results([], {"num_modules": 1}), "no vLLM worker reported a LoRA sync"),
    ],  # fmt: skip
)
def test_every_refusal_says_what_is_wrong(call, message):
    with pytest.raises(LoraSyncError) as err:
        call()
    assert str(err.value) == message


def test_tensors_of_no_elements_and_of_one_roundtrip():
    for t in (torch.empty(0, 3, dtype=torch.bfloat16), torch.tensor([3.5]), torch.tensor(2.25, dtype=torch.float16)):
        back = decode_tensor(encode_tensor(t))
        assert back.dtype == t.dtype and back.shape == t.shape and torch.equal(back, t)


def test_only_the_adapters_lora_weights_are_collected_whatever_comes_first():
    peft_model, lcfg = _peft(targets=["q_proj"])
    named = {n: p.data for n, p in lora_parameters(peft_model)}
    other = {n.replace(".default.", ".other."): t for n, t in named.items()}
    mixed = {"model.embed_tokens.weight": torch.zeros(2, 2), **other, **named}  # a base weight, another adapter
    assert build_payload(mixed, lcfg) == build_payload(named, lcfg)
