"""rft/launch/rules.py: the launch rules one by one (attention sinks, placement, disk, patches, unlabelled rows)."""

from __future__ import annotations

import json
import os
import shutil
from types import SimpleNamespace

import pytest

from rft.fixtures.reward_files import write_reward_toml
from rft.io import atomic_write_jsonl
from rft.launch import rules
from rft.plan.openrlhf_cli import FlagError, parse_args
from rft.provenance import REPO_ROOT as ROOT


def test_attention_rule_unit(tmp_path):
    grpo = ["--remote_rm_url", "r.py", "--advantage_estimator", "dr_grpo", "--vllm_num_engines", "1"]
    ns = parse_args(["--pretrain", "Qwen/Qwen2.5-0.5B", "--packing_samples", *grpo]).args
    assert rules.attention_rule(ns, []) == ([], [])
    local = tmp_path / "my-model"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    assert rules.is_gpt_oss(str(local)) and not rules.is_gpt_oss("Qwen/Qwen2.5-0.5B")
    default = parse_args(["--pretrain", str(local), *grpo]).args
    errs, _ = rules.attention_rule(default, [])
    assert errs and "(OpenRLHF's default)" in errs[0]
    for path in ("eager", "rft_eager_fp32"):
        assert rules.attention_rule(parse_args(["--pretrain", str(local), "--attn_implementation", path, *grpo]).args,
                                    []) == ([], [])
    flex = parse_args(["--pretrain", str(local), "--attn_implementation", "rft_flex", *grpo]).args
    errs, warns = rules.attention_rule(flex, [])
    assert not errs and len(warns) == 1 and "untested for training" in warns[0] and "torch 2.11" in warns[0]


def test_gpus_needed_counts_the_reference_model(patched_root, monkeypatch):
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    base = ["--pretrain", "m", "--remote_rm_url", "r.py", "--advantage_estimator", "dr_grpo",
            "--vllm_num_engines", "2", "--vllm_tensor_parallel_size", "2", "--actor_num_gpus_per_node", "4",
            "--ref_num_gpus_per_node", "4", "--init_kl_coef", "0.001"]
    assert rules.gpus_needed(parse_args(base + ["--colocate_actor_ref"]).args) == 8
    assert rules.gpus_needed(parse_args(base).args) == 12
    assert rules.gpus_needed(parse_args(base + ["--init_kl_coef", "0"]).args) == 8
    wrong = parse_args(base + ["--colocate_actor_ref", "--ref_num_gpus_per_node", "8"]).args
    assert "needs --ref_num_nodes and --ref_num_gpus_per_node equal" in rules.placement_rules(wrong)[0]


def test_reference_from_the_actor_is_not_placed(patched_root, monkeypatch):
    """--ref_from_actor: no reference group, so no GPUs for it and no colocation rule on its shape."""
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    base = ["--pretrain", "m", "--remote_rm_url", "r.py", "--advantage_estimator", "dr_grpo",
            "--vllm_num_engines", "2", "--vllm_tensor_parallel_size", "2", "--actor_num_gpus_per_node", "4",
            "--ref_num_gpus_per_node", "4", "--init_kl_coef", "0.001", "--lora_rank", "8", "--ref_from_actor",
            "--vllm_sync_lora_via_object_store"]
    assert rules.gpus_needed(parse_args(base).args) == 8
    other = parse_args(base + ["--colocate_actor_ref", "--ref_num_gpus_per_node", "8"]).args
    assert rules.placement_rules(other) == []


def test_check_disk_reads_the_real_filesystem(tmp_path):
    """Blocks below the profile's need, names the path and its nearest existing parent; notes it otherwise."""
    free = shutil.disk_usage(tmp_path).free / 2**30
    target = str(tmp_path / "not" / "yet" / "ckpt")
    short = rules.Report()
    rules.check_disk([target], free * 2 + 1, short)
    (msg,) = short.blocking
    assert msg.startswith(f"disk: {target} ({tmp_path}) has ") and "needs >= " in msg and not short.notes
    enough = rules.Report()
    rules.check_disk([target, str(tmp_path)], 0, enough)
    assert not enough.blocking and len(enough.notes) == 2


SMALL_FLAGS = ["--pretrain", "Qwen/Qwen2.5-0.5B", "--remote_rm_url", "r.py", "--advantage_estimator", "dr_grpo",
               "--actor_num_gpus_per_node", "1", "--vllm_num_engines", "1", "--save_path", "/tmp/x"]  # fmt: skip


def test_unpatched_openrlhf_blocks_the_launch(pristine_openrlhf_root):
    env = {rules.OPENRLHF_DIR_ENV: str(pristine_openrlhf_root)}
    rep, facts = rules.run_checks(rules.PROFILES["small"], SMALL_FLAGS, env, lr_pool=400)
    assert facts["patches"]["applied"] is False
    assert any(b.startswith("patches: not all applied") for b in rep.blocking), rep.blocking
    # Our own flags do not exist in the pristine parser: the flag check names the one it rejects.
    rep, _ = rules.run_checks(rules.PROFILES["small"], [*SMALL_FLAGS, "--offload"], env, lr_pool=400)
    assert any("unrecognized arguments: --offload" in e for e in rep.errors), rep.errors


def test_run_checks_reads_the_environment_it_is_given_and_changes_none(
    patched_root, pristine_openrlhf_root, monkeypatch
):
    """The OpenRLHF directory and RFT_SMOKE come from `env`, never from os.environ, which stays as it was; the
    launch's --pool sizes the LR preflight when --prompt_data is not here."""
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(pristine_openrlhf_root))
    monkeypatch.delenv("RFT_SMOKE", raising=False)
    before = dict(os.environ)
    env = {rules.OPENRLHF_DIR_ENV: str(patched_root), "RFT_SMOKE": "1"}
    flags = [*SMALL_FLAGS, "--offload", "--zero_stage", "3", "--prompt_data", "/no/such/pool.jsonl",
             "--lora_rank", "8", "--vllm_sync_lora_via_object_store"]
    rep, facts = rules.run_checks(rules.PROFILES["small"], flags, env, pool_if_absent=400)
    assert facts["patches"]["applied"] is True and not any("--offload" in e for e in rep.errors), rep.errors
    assert "LR preflight: pool taken from --pool 400 (--prompt_data not found)" in rep.warnings
    assert any(n.startswith("smoke run: ") for n in rep.notes), rep.notes
    assert dict(os.environ) == before


def test_the_scratch_copy_is_patched_and_parsed_without_the_environment(pristine_openrlhf_root, tmp_path, monkeypatch):
    """An unpatched install is checked against a patched scratch copy, handed to the parser as its root."""
    monkeypatch.delenv(rules.OPENRLHF_DIR_ENV, raising=False)
    root = rules.patched_scratch_copy(tmp_path, pristine_openrlhf_root)
    assert root == tmp_path
    assert parse_args([*SMALL_FLAGS, "--offload", "--zero_stage", "3"], "ppo", root).args.offload is True
    with pytest.raises(FlagError, match="unrecognized arguments: --offload"):
        parse_args([*SMALL_FLAGS, "--offload"], "ppo", pristine_openrlhf_root)


def test_the_exact_match_reward_settings_must_load(tmp_path):
    """reward_func_em.py loads reward.toml inside every engine: a bad file is an error here, naming file and key."""
    em = SimpleNamespace(remote_rm_url=[str(ROOT / "reward_func_em.py")])
    path = write_reward_toml(tmp_path / "reward.toml", reward={"scheme": "signed"})
    rep = rules.Report()
    rules.em_settings_rule(em, rep, {"RFT_REWARD_CONFIG": str(path)})
    assert rep.notes == [f"reward: exact match, scheme signed ({path})"] and not rep.errors
    write_reward_toml(path, reward={"scheme": "ternary"})
    rep = rules.Report()
    rules.em_settings_rule(em, rep, {"RFT_REWARD_CONFIG": str(path)})
    assert rep.errors == [f"reward: {path}: [reward] scheme = 'ternary': use one of ['binary', 'signed']"]
    rep = rules.Report()
    rules.em_settings_rule(SimpleNamespace(remote_rm_url=["my_reward.py"]), rep, {"RFT_REWARD_CONFIG": str(path)})
    assert rep == rules.Report()  # another reward file reads no reward.toml


def test_an_existing_ray_cluster_is_noted_not_counted():
    gpu = [{"index": 0, "name": "H100", "memory_gib": 79.6}]
    rep = rules.Report()
    rules.check_gpus(8, rules.PROFILES["small"], gpu, rep, ray_address="10.0.0.1:6379")
    assert rep.notes == ["GPUs: existing Ray cluster 10.0.0.1:6379: 8 needed, count not checked here"]
    assert not rep.blocking
    rules.check_gpus(8, rules.PROFILES["small"], gpu, rep)
    assert rep.blocking == ["GPUs: the command places 8 GPUs, this node has 1"]


def test_a_few_rows_without_a_label_are_carried_and_counted(tmp_path):
    """Up to 1% of rows may lack the label (scored 0 and counted in the run); more is refused, naming a row."""
    path = tmp_path / "pool.jsonl"
    rows = [{"input": f"problem {i}", "label": str(i)} for i in range(200)]
    del rows[10]["label"]
    atomic_write_jsonl(path, rows)
    seen, unlabelled = rules.scan_jsonl(str(path), ["input", "label"], "label")
    assert len(seen) == 200 and unlabelled == [f"{path}:11"]
    for i in (20, 30):
        del rows[i]["label"]
    atomic_write_jsonl(path, rows)
    with pytest.raises(ValueError, match=r"pool.jsonl:11: missing or empty key 'label'.*3 of 200 rows"):
        rules.scan_jsonl(str(path), ["input", "label"], "label")


def test_loss_aggregation_is_named_and_recorded(patched_root, monkeypatch):
    """The note and the run-record fact name the aggregation in force: the estimator's default or the flag."""
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    base = ["--pretrain", "m", "--remote_rm_url", "r.py", "--vllm_num_engines", "1", "--generate_max_len", "4096",
            "--n_samples_per_prompt", "4"]
    for extra, mode, text in (
        (["--advantage_estimator", "dr_grpo"], "dr_grpo_constant", "4096 generate_max_len x its samples"),
        (["--advantage_estimator", "group_norm"], "token_mean", "(default for group_norm)"),
        (["--advantage_estimator", "dr_grpo", "--loss_aggregation", "microbatch_mean"], "microbatch_mean",
         "OpenRLHF 0.9.3: token mean per micro-batch"),
    ):
        rep, facts = rules.Report(), {}
        rules.loss_and_sampling_rule(parse_args(base + extra).args, rep, facts)
        assert facts == {"loss_aggregation": mode}
        (note,) = rep.notes
        assert note.startswith(f"loss aggregation: {mode}") and text in note, note
        assert not rep.errors and not rep.warnings


def test_truncated_sampling_is_warned_naming_the_consequence(patched_root, monkeypatch):
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    base = ["--pretrain", "m", "--remote_rm_url", "r.py", "--vllm_num_engines", "1", "--advantage_estimator",
            "dr_grpo", "--top_p", "0.9"]
    with_is = rules.Report()
    rules.loss_and_sampling_rule(parse_args(base + ["--enable_vllm_is_correction"]).args, with_is, {})
    (warn,) = with_is.warnings
    assert warn.startswith("sampling: --top_p 0.9: vLLM samples from the truncated distribution")
    assert "log of the kept mass" in warn and "IS correction reweights every token" in warn and not with_is.errors
    without = rules.Report()
    rules.loss_and_sampling_rule(parse_args(base).args, without, {})
    assert not without.errors and "mismatch_* measure that truncation" in without.warnings[0]
    # min_p / top_k, should a later flag carry them, count the same; top_k <= 0 and min_p 0 are "off"
    ns = parse_args(base[:-2] + ["--enable_vllm_is_correction"]).args
    ns.top_k, ns.min_p = 20, 0.0
    rep = rules.Report()
    rules.loss_and_sampling_rule(ns, rep, {})
    assert rep.warnings and rep.warnings[0].startswith("sampling: --top_k 20:")
    ns.top_k = -1
    rep = rules.Report()
    rules.loss_and_sampling_rule(ns, rep, {})
    assert not rep.errors and not rep.warnings


def test_loss_aggregation_flag_is_validated_by_the_patched_parser(patched_root, monkeypatch):
    """An explicit window aggregation on a dynamic batch is refused by OpenRLHF's own (patched) validation."""
    from rft.plan.openrlhf_cli import FlagError

    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    base = ["--pretrain", "m", "--remote_rm_url", "r.py", "--vllm_num_engines", "1", "--advantage_estimator",
            "dr_grpo"]
    with pytest.raises(FlagError, match="not implemented with --use_dynamic_batch"):
        parse_args(base + ["--loss_aggregation", "token_mean", "--use_dynamic_batch"])
    assert parse_args(base + ["--use_dynamic_batch"]).args.loss_aggregation is None  # the default falls back



def test_levers_rule_records_the_rollout_lag_and_names_the_levers(patched_root, monkeypatch):
    monkeypatch.setenv(rules.OPENRLHF_DIR_ENV, str(patched_root))
    base = ["--pretrain", "m", "--remote_rm_url", "r.py", "--advantage_estimator", "group_norm",
            "--vllm_num_engines", "1", "--actor_num_gpus_per_node", "2", "--lora_rank", "8",
            "--vllm_sync_lora_via_object_store", "--init_kl_coef", "0.01", "--n_samples_per_prompt", "2", "--zero_stage", "3"]
    rep, facts = rules.Report(), {}
    rules.levers_rule(parse_args(base).args, rep, facts)
    assert facts == {"rollout_lag": 0} and rep.notes == []
    rep, facts = rules.Report(), {}
    args = parse_args(base + ["--async_train", "--async_queue_size", "2", "--ref_from_actor", "--zero_stage", "2"]).args
    rules.levers_rule(args, rep, facts)
    assert facts == {"rollout_lag": 2}
    assert [n.split(":")[0] for n in rep.notes] == ["--async_train", "--ref_from_actor", "--zero_stage 2 with LoRA"]
    assert not rep.errors


def test_the_checks_are_one_table_of_rules_with_one_signature(patched_root, tmp_path):
    """Each rule of RULES takes the Check and returns (kind, message) findings; run_checks is their sum in order."""
    import inspect

    assert all(list(inspect.signature(rule).parameters) == ["c"] for rule in rules.RULES)
    env = {rules.OPENRLHF_DIR_ENV: str(patched_root), "POOL": "400", "PATH": os.environ["PATH"]}
    flags = [*SMALL_FLAGS, "--ckpt_path", str(tmp_path / "ckpt")]
    rep, facts = rules.run_checks(rules.PROFILES["small"], flags, env, lr_pool=400)
    found, args = rules.parse_command(rules.PROFILES["small"], flags, env, {})
    check = rules.Check(rules.PROFILES["small"], flags, env, args, {}, lr_pool=400)
    for rule in rules.RULES:
        out = rule(check)
        assert all(kind in ("errors", "blocking", "warnings", "notes") and isinstance(text, str)
                   for kind, text in out), (rule.__name__, out)
        found += out
    again = rules.Report()
    again.add(found)
    assert again == rep and check.facts.keys() == facts.keys() - {"patches"}
    assert check.sched is not None and "lr_preflight" in facts  # the preflight's schedule left for the judge's rule
    assert rules.findings(rep) == [(k, t) for k in ("errors", "blocking", "warnings", "notes") for t in getattr(rep, k)]
