"""The flags of prompt_filter.patch through OpenRLHF's own (patched) parser, into the filter they build (the
patched fit loop and sample generator run in tests/train/test_prompt_filter.py)."""

from __future__ import annotations

BASE = ["--pretrain", "m", "--prompt_data", "d", "--actor_num_gpus_per_node", "1", "--micro_rollout_batch_size", "1",
        "--advantage_estimator", "group_norm", "--n_samples_per_prompt", "4", "--remote_rm_url", "reward_func_judge.py",
        "--rollout_batch_size", "2"]  # fmt: skip


def test_filter_and_history_flags_parse_and_build_the_filter(patched_openrlhf, monkeypatch):  # noqa: F811
    from rft.plan.openrlhf_cli import parse_args
    from rft.train.prompt_filter import PromptFilter

    monkeypatch.setenv("RFT_OPENRLHF_DIR", str(patched_openrlhf))
    args = parse_args(BASE + ["--dynamic_filtering", "--dynamic_filtering_reward_range", "0", "1",
                              "--dynamic_filtering_key", "correctness", "--prompt_history",
                              "--prompt_history_explore", "0.4"]).args  # fmt: skip
    pf = PromptFilter.from_args(args)
    assert pf.active and pf.dynamic_filtering and pf.history and pf.key == "correctness"
    assert pf.reward_range == (0.0, 1.0) and pf.explore == 0.4 and pf.max_skip == 0.95
    assert PromptFilter.from_args(parse_args(BASE + ["--prompt_history"]).args).explore == 0.25
    plain = PromptFilter.from_args(parse_args(BASE).args)
    assert not plain.active and plain.key == "score" and not parse_args(BASE).args.prompt_data_in_order
    assert parse_args(BASE + ["--prompt_data_in_order"]).args.prompt_data_in_order
