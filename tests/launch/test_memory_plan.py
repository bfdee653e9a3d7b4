"""rft/launch/memory_plan.py: the arithmetic lines against hand-computed figures, the fit verdicts."""

from __future__ import annotations

import json

from rft.launch.memory_plan import SHAPES, _flags, actor_plan, render, shape_for


def test_lora_and_weights_per_gpu_by_hand():
    s = SHAPES["gpt-oss-120b"]
    # per layer: q 64*(2880+4096) + k, v 64*(2880+512) each + o 64*(4096+2880) = 1,327,104; 36 layers
    assert s.lora_params(64) == 36 * 1_327_104 == 47_775_744
    assert SHAPES["gpt-oss-20b"].lora_params(32) == 24 * 663_552  # 15.9M, docs/launching.md
    a = _flags(["--pretrain", "openai/gpt-oss-120b", "--lora_rank", "64"])
    assert round(actor_plan(s, a)[0].gib, 2) == 27.20  # the frozen bf16 partition on each of 8 GPUs
    assert s.expert_params_per_layer == 128 * (2880 * 5760 + 2880 * 2880)


def test_fit_verdicts_follow_the_layout():
    flags = [
        "--pretrain",
        "/x/gpt-oss-120b-bf16",
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
    assert render(["--pretrain", "Qwen/Qwen2.5-0.5B"]) == ("", None)


def test_shape_from_a_local_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 24, "num_local_experts": 32}))
    assert shape_for(str(tmp_path)).name == "gpt-oss-20b"


def test_a_flag_that_does_not_parse_gives_no_plan_and_no_exit():
    assert render(["--pretrain", "openai/gpt-oss-120b", "--lora_rank", "many"]) == ("", None)


def test_the_plans_defaults_are_openrlhfs(patched_openrlhf, monkeypatch):
    """A flag the command leaves out is planned at the default OpenRLHF's own parser gives it."""
    from rft.launch.openrlhf_cli import parse_args

    monkeypatch.setenv("RFT_OPENRLHF_DIR", str(patched_openrlhf))
    real = vars(parse_args(["--pretrain", "m", "--prompt_data", "d", "--remote_rm_url", "r.py"]).args)
    for flag, value in vars(_flags(["--pretrain", "m"])).items():
        assert value == (real[flag] if real[flag] is not None else 0), flag  # vllm_num_engines None: none
