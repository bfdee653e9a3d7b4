"""rft's own launch choices: each variable's values, its error, and the flags `decide` puts in front of a recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from rft.fixtures.reward_files import write_reward_toml
from rft.launch import choices
from rft.launch.choices import ChoiceError, decide, filter_flags, lora_sync_flags, resume_flags, reward_file
from rft.provenance import REPO_ROOT

LORA = ["--lora_rank", "32", "--ckpt_path"]


def test_reward_names_a_file_of_ours_or_an_existing_one(tmp_path):
    assert reward_file({}) == ("em", REPO_ROOT / "reward_func_em.py")
    assert reward_file({"REWARD": "judge"}) == ("judge", REPO_ROOT / "reward_func_judge.py")
    own = tmp_path / "mine.py"
    own.write_text("def reward_func(*a):\n    return 0\n")
    assert reward_file({"REWARD": str(own)}) == ("file", own)
    assert reward_file({"REWARD": str(REPO_ROOT / "reward_func_em.py")})[0] == "em"  # by path, not by name
    with pytest.raises(ChoiceError, match=r"REWARD=gemini: expected em, judge or the path of a reward file"):
        reward_file({"REWARD": "gemini"})
    with pytest.raises(ChoiceError, match="REWARD="):
        reward_file({"REWARD": str(tmp_path)})  # a directory is no reward file


@pytest.mark.parametrize(("kind", "scheme", "key"), [("em", "binary", None), ("file", "binary", None),
                                                      ("file", "signed", None), ("em", "signed", "correctness"),
                                                      ("judge", "binary", "correctness")])
def test_the_filter_key_follows_the_reward_and_its_scheme(kind, scheme, key):
    flags = filter_flags({"DYNAMIC_FILTER": "1"}, kind, scheme)
    assert flags[0] == "--dynamic_filtering" and flags[-3:] == ["--dynamic_filtering_reward_range", "0", "1"]
    if key:
        assert flags[1:3] == ["--dynamic_filtering_key", key]
    else:
        assert "--dynamic_filtering_key" not in flags
    assert filter_flags({}, kind, scheme) == []
    with pytest.raises(ChoiceError, match="DYNAMIC_FILTER=2: expected 0 or 1"):
        filter_flags({"DYNAMIC_FILTER": "2"}, kind, scheme)


def test_lora_sync_flags_only_for_a_lora_command():
    assert lora_sync_flags({}, ["--lora_rank", "8"]) == ["--vllm_sync_lora_via_object_store"]
    assert lora_sync_flags({"LORA_SYNC": "native"}, ["--lora_rank", "8"]) == ["--vllm_sync_lora_via_object_store",
                                                                               "--vllm_sync_lora_native"]
    assert lora_sync_flags({}, []) == [] and lora_sync_flags({}, ["--lora_rank", "0"]) == []
    assert lora_sync_flags({}, ["--lora_rank", "many"]) == []  # left to OpenRLHF's parser, which names it
    with pytest.raises(ChoiceError, match="LORA_SYNC=fused: expected merge or native"):
        lora_sync_flags({"LORA_SYNC": "fused"}, ["--lora_rank", "8"])
    with pytest.raises(ChoiceError, match="LORA_SYNC=native applies to LoRA runs"):
        lora_sync_flags({"LORA_SYNC": "native"}, ["--lora_rank", "0"])


def test_resume_only_from_a_complete_save(tmp_path):
    argv = ["--ckpt_path", str(tmp_path)]
    assert resume_flags(argv, smoke=False)[0] == []
    (tmp_path / "_actor").mkdir()  # killed in its first save: 0.9.3 would raise on --load_checkpoint
    assert resume_flags(argv, smoke=False)[0] == []
    (tmp_path / "_actor" / "latest").write_text("global_step15\n")
    flags, line = resume_flags(argv, smoke=False)
    assert flags == ["--load_checkpoint"] and line == f"resume: resuming from {tmp_path / '_actor'} (global_step15)"
    assert resume_flags(argv, smoke=False, fresh=True) == ([], "resume: no (--no_load_checkpoint)")
    assert resume_flags(argv, smoke=True) == ([], "resume: no (a smoke run starts fresh; it saves at "
                                                  "SMOKE_RESUME_STEP and relaunches once to resume)")


def test_a_smoke_run_gets_its_own_directories(tmp_path):
    env = {"RUN_NAME": "r", "METRICS_LOG_DIR": "/s/rft_metrics/r", "SAMPLES_LOG_DIR": "/s/samples/r",
           "SPIKE_LOG_PATH": "/s/rft_metrics/r/spike_log.jsonl", "SMOKE": "1"}
    argv = [*LORA, "/d/ckpt/r", "--save_path", "/runs/r/model", "--lora_rank", "8"]
    d = decide("ppo", argv, env)
    assert d.env == {"RFT_SMOKE": "1", "RUN_NAME": "r-smoke", "METRICS_LOG_DIR": "/s/rft_metrics/r-smoke",
                     "SAMPLES_LOG_DIR": "/s/samples/r-smoke", "SPIKE_LOG_PATH": "/s/rft_metrics/r-smoke/spike_log.jsonl"}
    assert d.tail == ["--save_path", "/runs/r-smoke/model", "--ckpt_path", "/d/ckpt/r-smoke"]
    assert "--load_checkpoint" not in d.flags
    # already a smoke name: left as it is
    assert decide("ppo", argv, {**env, "RUN_NAME": "r-smoke"}).tail == []
    with pytest.raises(ChoiceError, match="SMOKE=yes: expected 0 or 1"):
        decide("ppo", argv, {"SMOKE": "yes"})


def test_decide_puts_every_choice_in_front_with_its_line(tmp_path):
    (tmp_path / "_actor").mkdir()
    (tmp_path / "_actor" / "latest").write_text("global_step5")
    signed = write_reward_toml(tmp_path / "reward.toml", reward={"scheme": "signed"})
    env = {"DYNAMIC_FILTER": "1", "RFT_REWARD_CONFIG": str(signed)}
    d = decide("ppo", ["--lora_rank", "8", "--ckpt_path", str(tmp_path)], env)
    assert d.flags == ["--remote_rm_url", str(REPO_ROOT / "reward_func_em.py"), "--vllm_sync_lora_via_object_store",
                       "--dynamic_filtering", "--dynamic_filtering_key", "correctness",
                       "--dynamic_filtering_reward_range", "0", "1", "--load_checkpoint"]
    assert [ln.split(":")[0] for ln in d.lines] == ["reward", "LoRA sync", "prompt filter", "determinism",
                                                      "resume", "smoke run"]
    assert "scheme signed" in d.lines[0]
    sft = decide("sft", ["--lora_rank", "8"], {"REWARD": "nonsense", "LORA_SYNC": "x"})  # no reward, no sync in SFT
    assert sft.flags == [] and sft.lines == []


def test_deterministic_turns_on_openrlhfs_full_determinism_and_vllms_batch_invariant_kernels(tmp_path):
    from rft.plan.openrlhf_cli import known_flags

    assert "--full_determinism" in known_flags()  # 0.9.3's own flag
    assert choices.determinism([])[0] == {}
    env, line = choices.determinism(["--lora_rank", "8", "--full_determinism"])
    assert env == {"VLLM_BATCH_INVARIANT": "1"} and line == "determinism: --full_determinism, VLLM_BATCH_INVARIANT=1"
    d = decide("ppo", ["--lora_rank", "8", "--ckpt_path", str(tmp_path), "--full_determinism"], {})
    assert "--full_determinism" not in d.flags and d.env["VLLM_BATCH_INVARIANT"] == "1"
    assert "VLLM_BATCH_INVARIANT" not in decide("ppo", ["--lora_rank", "8"], {}).env


def test_with_suffix_renames_the_run_component_only():
    assert choices.with_suffix("/a/run/b", "run") == "/a/run-smoke/b"
    assert choices.with_suffix("/a/runner/b", "run") == "/a/runner/b"
    assert choices.with_suffix(str(Path("rel") / "run"), "run") == "rel/run-smoke"
