"""rft/plan/memory_plan.py: the arithmetic lines against hand-computed figures, the fit verdicts, and the
activation coefficients counted per op through the real transformers and OpenRLHF code."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
import torch

from rft.plan.memory_plan import (
    ATTN_PEAK,
    EAGER_FP32,
    EAGER_FP32_PEAK,
    ENTROPY_KEPT,
    FLEX,
    LOGITS_PEAK,
    OUTPUT_KEPT,
    SHAPES,
    activation_lines,
    actor_plan,
    recipe_flags,
    render,
    shape_for,
)
from tests.support.peak_memory import PeakBytes

RECIPE_20B = ["--pretrain", "openai/gpt-oss-20b", "--zero_stage", "3", "--lora_rank", "32", "--prompt_max_len",
              "1024", "--generate_max_len", "4096", "--micro_train_batch_size", "1", "--actor_num_gpus_per_node", "4"]


def test_lora_and_weights_per_gpu_by_hand():
    s = SHAPES["gpt-oss-120b"]
    # per layer: q 64*(2880+4096) + k, v 64*(2880+512) each + o 64*(4096+2880) = 1,327,104; 36 layers
    assert s.lora_params(64) == 36 * 1_327_104 == 47_775_744
    assert SHAPES["gpt-oss-20b"].lora_params(32) == 24 * 663_552  # 15.9M, docs/launching.md
    a = recipe_flags(["--pretrain", "openai/gpt-oss-120b", "--zero_stage", "3", "--lora_rank", "64"])
    assert round(actor_plan(s, a)[0].gib, 2) == 27.20  # the frozen bf16 partition on each of 8 GPUs
    assert s.expert_params_per_layer == 128 * (2880 * 5760 + 2880 * 2880)


def test_fit_verdicts_follow_the_layout():
    flags = [
        "--pretrain",
        "/x/gpt-oss-120b-bf16",
        "--zero_stage",
        "3",
        "--lora_rank",
        "64",
        "--init_kl_coef",
        "0",
        "--prompt_max_len",
        "1024",
        "--generate_max_len",
        "3072",
        "--vllm_num_engines",
        "4",
        "--vllm_tensor_parallel_size",
        "2",
        "--micro_train_batch_size",
        "1",  # the recipe's (OpenRLHF's default is 4)
    ]
    text, fits = render([*flags, "--actor_num_gpus_per_node", "8"], nodes=2)
    assert fits and "2 node(s): actor on 8 GPU(s)" in text
    _, fits4 = render([*flags, "--actor_num_gpus_per_node", "4"])
    assert fits4 is False
    _, off4 = render([*flags, "--actor_num_gpus_per_node", "4", "--offload", "--adam_offload"])
    assert off4 is True
    # a KL term with a colocated reference doubles the frozen weights: 8 GPUs cannot hold both
    _, kl8 = render(
        [*flags, "--actor_num_gpus_per_node", "8", "--init_kl_coef", "0.001", "--colocate_actor_ref"]
    )
    assert kl8 is False
    # --ref_from_actor: the reference is the actor without its adapter, so the same layout fits again
    _, kl8_actor = render(
        [*flags, "--actor_num_gpus_per_node", "8", "--init_kl_coef", "0.001", "--colocate_actor_ref",
         "--ref_from_actor"]
    )
    assert kl8_actor is True
    assert render(["--pretrain", "Qwen/Qwen2.5-0.5B"]) == ("", None)


def attention_units(attention) -> tuple[float, float]:
    """(live after the forward, peak through the backward) of one gpt-oss attention call in bf16, in units of
    heads x T x (T+1) x 2 B (T large against the head dim, so the T x T tensors dominate)."""
    heads, kv, t, d = 4, 2, 768, 4
    module = types.SimpleNamespace(num_key_value_groups=heads // kv, training=True,
                                   sinks=torch.nn.Parameter(torch.zeros(heads, dtype=torch.bfloat16)))
    q = torch.randn(1, heads, t, d, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(1, kv, t, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    mask = torch.full((t, t), float("-inf")).triu(1).to(torch.bfloat16)[None, None]
    unit = heads * t * (t + 1) * 2
    with PeakBytes() as pb:
        out, _ = attention(module, q, k, v, mask, d**-0.5)
        kept = pb.reset() / unit
        out.float().sum().backward()
    return kept, pb.peak / unit


def test_eager_attention_backward_peak_is_counted():
    """transformers' gpt-oss eager attention, forward and backward in bf16: peak live bytes in units of
    heads x T x (T+1) x 2 B (T large against the head dim, so the T x T tensors dominate)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    kept, peak = attention_units(eager_attention_forward)
    assert kept == pytest.approx(1, abs=0.05)  # the softmax output, kept for the backward
    assert peak == pytest.approx(ATTN_PEAK, abs=0.1)


def test_the_fp32_attention_backward_peak_is_counted_and_the_plan_takes_the_gpus():
    """rft_eager_fp32 through the real code, as the eager test above: it keeps 3 units (fp32 probabilities, their
    bf16 cast) and peaks at 7 in its backward; the plan takes eager's 4 in fp32 (8), which the GPU's measured
    difference to eager confirms (docs/attention.md#the-trainer-paths-on-one-gpu)."""
    from rft.gptoss.attention import EAGER_FP32 as NAME
    from rft.gptoss.attention import FLEX as FLEX_NAME
    from rft.gptoss.attention import eager_fp32_attention

    assert (EAGER_FP32, FLEX) == (NAME, FLEX_NAME)
    kept, peak = attention_units(eager_fp32_attention)
    assert kept == pytest.approx(3, abs=0.05)
    assert peak == pytest.approx(7, abs=0.1)
    assert EAGER_FP32_PEAK == 2 * ATTN_PEAK == 8 > peak
    # one H100, 20b at 24 layers, 5,120 tokens: peak 53.74 GiB eager, 66.32 rft_eager_fp32 (+12.58)
    def total(path: str) -> float:
        return sum(line.gib for line in actor_plan(SHAPES["gpt-oss-20b"], recipe_flags(
            [*RECIPE_20B, "--entropy_loss_coef", "0", "--attn_implementation", path])))

    assert total(EAGER_FP32) - total("eager") == pytest.approx(66.32 - 53.74, abs=0.15)


def test_the_plan_names_the_attention_path_and_switching_it_moves_the_line():
    s = SHAPES["gpt-oss-20b"]
    peaks = {}
    for path in ("eager", EAGER_FP32, FLEX, None):
        a = recipe_flags([*RECIPE_20B, "--entropy_loss_coef", "0", *(["--attn_implementation", path] if path else [])])
        _, peak = activation_lines(s, a)
        peaks[path] = peak
    assert "one layer's eager attention 4 x bf16" in peaks["eager"].item
    assert "one layer's rft_eager_fp32 attention 4 x fp32" in peaks[EAGER_FP32].item
    assert "one layer's rft_flex attention: no T x T tensor" in peaks[FLEX].item
    assert "flash_attention_2 counted as eager" in peaks[None].item  # OpenRLHF's default (the rules refuse it)
    assert peaks[None].gib == peaks["eager"].gib
    unit = 64 * 5120 * 5121 * 2 / 2**30
    assert peaks[EAGER_FP32].gib - peaks["eager"].gib == pytest.approx(4 * unit)  # 12.5 GiB
    # no T x T tensor: the attention term is the kept logits and the LSE, so the logits' backward sets the peak
    assert peaks[FLEX].gib == pytest.approx(4 * 5120 * 201088 * 4 / 2**30)
    eager_text, _ = render([*RECIPE_20B, "--attn_implementation", "eager"])
    fp32_text, _ = render([*RECIPE_20B, "--attn_implementation", EAGER_FP32])
    assert "rft_eager_fp32 attention" in fp32_text and "rft_eager_fp32" not in eager_text


def test_logits_backward_peak_is_counted(patched_openrlhf):
    """OpenRLHF's Actor.forward after the model: fp32 logits and the log-probs (no flash-attn kernel), then the
    backward, with `output` (the logits) kept in scope as ppo_actor.py keeps it."""
    from openrlhf.models.utils import log_probs_from_logits

    t, vocab, hidden = 2048, 512, 8  # 2 logsumexp chunks
    h = torch.randn(1, t, hidden, requires_grad=True)
    w = torch.randn(vocab, hidden, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (1, t))
    unit = t * vocab * 4
    with PeakBytes() as pb:
        output = {"logits": torch.nn.functional.linear(h.to(torch.bfloat16), w).to(torch.float32)}
        loss = -log_probs_from_logits(output["logits"], torch.roll(labels, -1, 1))[:, :-1].mean()
        loss.backward()
        after = pb.live
    assert pb.peak / unit == pytest.approx(LOGITS_PEAK, abs=0.1)
    assert after / unit == pytest.approx(OUTPUT_KEPT, abs=0.1)  # into every layer's backward


ENTROPY_SAVES = """
import torch
from openrlhf.models.utils import compute_entropy
logits = torch.randn(1, 256, 64, requires_grad=True)
def extra_txv(fn):
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x) or x, lambda x: x):
        fn(logits)
    own = logits.untyped_storage().data_ptr()
    return sum(x.numel() == logits.numel() and x.untyped_storage().data_ptr() != own for x in saved)
print(extra_txv(compute_entropy), extra_txv(compute_entropy._torchdynamo_orig_callable))
"""


@pytest.mark.slow
def test_the_compiled_entropy_keeps_no_softmax(patched_openrlhf):
    """OpenRLHF's @torch.compile'd compute_entropy (what return_entropy=True runs at --entropy_loss_coef 0) saves
    for its backward the logits themselves and per-row values only; its eager body would save the softmax.
    In a subprocess: the CPU suite turns torch.compile off (TORCHDYNAMO_DISABLE), a GPU run has it on."""
    from rft.fixtures.patched_openrlhf import stub_env

    env = {k: v for k, v in stub_env(patched_openrlhf).items() if k != "TORCHDYNAMO_DISABLE"}
    res = subprocess.run([sys.executable, "-c", ENTROPY_SAVES], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    compiled, eager = map(int, res.stdout.split()[-2:])
    assert compiled == ENTROPY_KEPT == 0 and eager >= 1  # eager: the softmax, and more


def test_activation_lines_by_hand():
    a = recipe_flags([*RECIPE_20B, "--entropy_loss_coef", "0"])
    ckpt, peak = activation_lines(SHAPES["gpt-oss-20b"], a)
    assert ckpt.gib == pytest.approx(24 * 5120 * 2880 * 2 / 2**30)
    logits = 4 * 5120 * 201088 * 4 / 2**30  # 15.3 GiB: the plan's 2 fp32 copies said 7.7
    attn = (4 * 64 * 5120 * 5121 * 2 + 5120 * 201088 * 4) / 2**30  # 12.5 + 3.8: the plan's 3 bf16 said 9.4
    assert peak.gib == pytest.approx(max(logits, attn)) and "(15.3)" in peak.item and "(16.3)" in peak.item
    assert "compiled entropy graph" in peak.item
    _, no_entropy = activation_lines(SHAPES["gpt-oss-20b"], recipe_flags(RECIPE_20B))
    assert no_entropy.gib == pytest.approx(peak.gib) and "no entropy graph" in no_entropy.item
    text, _ = render(RECIPE_20B)
    assert "routed expert loop (rft/gptoss/moe.py" in text and "0.00 GiB  exact" in text


def test_shape_from_a_local_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 24, "num_local_experts": 32}))
    assert shape_for(str(tmp_path)).name == "gpt-oss-20b"


def test_a_flag_that_does_not_parse_gives_no_plan_and_no_exit():
    assert render(["--pretrain", "openai/gpt-oss-120b", "--lora_rank", "many"]) == ("", None)


def test_the_plans_defaults_are_openrlhfs(patched_openrlhf, monkeypatch):
    """A flag the command leaves out is planned at the default OpenRLHF's own parser gives it."""
    from rft.plan.openrlhf_cli import parse_args

    monkeypatch.setenv("RFT_OPENRLHF_DIR", str(patched_openrlhf))
    real = vars(parse_args(["--pretrain", "m", "--prompt_data", "d", "--remote_rm_url", "r.py"]).args)
    for flag, value in vars(recipe_flags(["--pretrain", "m"])).items():
        # vllm_num_engines None: none; entropy_loss_coef None: no entropy graph
        assert value == (real[flag] if real[flag] is not None or value is None else 0), flag


def test_below_zero3_the_frozen_base_is_replicated_and_nothing_is_gathered():
    s = SHAPES["gpt-oss-20b"]
    three = actor_plan(s, recipe_flags(RECIPE_20B))
    two = actor_plan(s, recipe_flags([*RECIPE_20B, "--zero_stage", "2"]))
    assert two[0].gib == pytest.approx(2 * s.params / 2**30) == pytest.approx(4 * three[0].gib)
    assert "replicated (ZeRO-2)" in two[0].item and "ZeRO-3 partition" in three[0].item
    assert any("ZeRO-3 gather" in line.item for line in three)
    assert not any("ZeRO-3 gather" in line.item for line in two)
    # --offload moves parameters to the host only under ZeRO-3 (DeepSpeed's offload_param)
    assert actor_plan(s, recipe_flags([*RECIPE_20B, "--zero_stage", "2", "--offload"]))[0].where == "GPU"


def test_active_params_are_the_published_counts():
    assert SHAPES["gpt-oss-20b"].active_params == pytest.approx(3.6e9, rel=0.01)
    assert SHAPES["gpt-oss-120b"].active_params == pytest.approx(5.1e9, rel=0.01)
