"""rft.plan.flags: every rft flag registered in one place, seen by the launch's reading of the patched parser, and
validated after parsing by OpenRLHF's own `train_ppo_ray` block."""

from __future__ import annotations

import argparse

import pytest

from rft.plan import flags, openrlhf_cli

BASE = ["--pretrain", "m", "--prompt_data", "d", "--actor_num_gpus_per_node", "1", "--micro_rollout_batch_size", "1",
        "--advantage_estimator", "group_norm", "--n_samples_per_prompt", "2", "--remote_rm_url", "r.py",
        "--rollout_batch_size", "1"]


def rft_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    flags.add_flags(parser)
    return parser


def test_every_rft_flag_has_help_and_the_launch_sees_it_only_in_the_patched_source(patched_openrlhf,
                                                                                  pristine_openrlhf_root):
    actions = [a for a in rft_parser()._actions if a.option_strings]
    assert len(actions) >= 15 and all(a.help for a in actions)
    ours = {s for a in actions for s in a.option_strings}
    switches = {s for a in actions if isinstance(a, argparse._StoreTrueAction) for s in a.option_strings}
    assert ours <= openrlhf_cli.known_flags("ppo", patched_openrlhf)
    assert not ours & openrlhf_cli.known_flags("ppo", pristine_openrlhf_root)
    assert "--pretrain" in openrlhf_cli.known_flags("ppo", pristine_openrlhf_root)
    assert switches == {"--vllm_sync_lora_via_object_store", "--vllm_sync_lora_native", "--vllm_sync_lora_skip",
                        "--lora_sync_probe", "--ref_from_actor", "--offload", "--prompt_history",
                        "--prompt_data_in_order"}


@pytest.mark.parametrize("argv,message", [
    (["--offload"], "--offload requires --zero_stage 3"),
    (["--vllm_sync_lora_native"], "--vllm_sync_lora_native requires --lora_rank > 0"),
    (["--ref_from_actor"], "--ref_from_actor requires --lora_rank > 0"),
    (["--loss_aggregation", "token_mean", "--use_dynamic_batch"], "not implemented with --use_dynamic_batch"),
    (["--lora_rank", "8", "--vllm_num_engines", "1"], "needs --vllm_sync_lora_via_object_store"),
    (["--vllm_pretrain", "other", "--vllm_num_engines", "1"], "--vllm_pretrain other differs from --pretrain m"),
])
def test_the_patched_parser_refuses_naming_the_flag(patched_openrlhf, argv, message):
    with pytest.raises(openrlhf_cli.FlagError, match=message):
        openrlhf_cli.parse_args([*BASE, *argv], "ppo", patched_openrlhf)


def test_finish_derives_the_implied_flags(patched_openrlhf):
    args = openrlhf_cli.parse_args([*BASE, "--lora_rank", "8", "--vllm_num_engines", "1",
                                    "--vllm_sync_lora_native"], "ppo", patched_openrlhf).args
    assert args.vllm_sync_lora_via_object_store and args.vllm_pretrain == "m"
    assert openrlhf_cli.parse_args([*BASE, "--prompt_history"], "ppo", patched_openrlhf).args.prompt_history_explore == 0.25
