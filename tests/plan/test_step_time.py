"""rft/plan/step_time.py: the phases and their sum, the model's monotonicity, async against sync, the figures'
overrides and calibration, and the block both gpt-oss dry runs print."""

from __future__ import annotations

import re

import pytest

from rft.plan.memory_plan import SHAPES
from rft.plan.step_time import (
    FIGURES,
    FIGURES_ENV,
    MEASURED_TOKENS,
    PHASES,
    FiguresError,
    Levers,
    actor_gib,
    candidates,
    compute_s,
    fits,
    forward_flops,
    lever_step,
    load_figures,
    main,
    phases,
    predict,
    recipe,
    recommend,
    train_flops,
    with_levers,
)
from tests.launch.test_cli import run_script, script_env

# train_grpo_20b.sh's flags the model reads (the dry-run tests below check the scripts themselves)
RECIPE_20B = ["--pretrain", "openai/gpt-oss-20b", "--prompt_max_len", "1024", "--generate_max_len", "4096",
              "--eval_dataset", "probe.jsonl", "--eval_steps", "5", "--eval_n_samples_per_prompt", "1",
              "--vllm_num_engines", "2", "--vllm_tensor_parallel_size", "2", "--actor_num_gpus_per_node", "4",
              "--colocate_actor_ref", "--zero_stage", "3", "--gradient_checkpointing", "--lora_rank", "32",
              "--init_kl_coef", "0.001", "--n_samples_per_prompt", "8", "--rollout_batch_size", "16",
              "--micro_rollout_batch_size", "1", "--micro_train_batch_size", "1", "--entropy_loss_coef", "0",
              "--save_steps", "5"]
RECIPE_120B = [*RECIPE_20B, "--pretrain", "/x/gpt-oss-120b-bf16", "--lora_rank", "64", "--init_kl_coef", "0",
               "--rollout_batch_size", "8", "--generate_max_len", "3072", "--offload", "--adam_offload"]
DEFAULTS = load_figures(None)


def step(argv: list[str], figures: dict[str, float] = DEFAULTS) -> dict[str, float]:
    pr = predict(argv, figures)
    assert pr is not None
    return pr.phases


@pytest.mark.parametrize("recipe", [RECIPE_20B, RECIPE_120B, [*RECIPE_20B, "--async_train"]])
def test_phases_are_the_metric_names_and_the_sync_step_is_their_sum(recipe):
    p = step(recipe)
    assert tuple(p) == PHASES == ("generate", "reward", "logprob", "train", "sync", "eval", "save", "other", "step")
    assert all(v >= 0 for v in p.values()) and min(p["generate"], p["logprob"], p["train"], p["sync"]) > 0
    if "--async_train" not in recipe:
        assert p["step"] == pytest.approx(sum(v for k, v in p.items() if k != "step"))
    else:
        assert p["step"] < sum(v for k, v in p.items() if k != "step")


@pytest.mark.parametrize("recipe", [RECIPE_20B, RECIPE_120B])
@pytest.mark.parametrize("more", [
    ["--n_samples_per_prompt", "16"],
    ["--rollout_batch_size", "32"],
    ["--generate_max_len", "8192"],
    ["--prompt_max_len", "64"],  # a shorter prompt budget: the assumed prompt is cut, so this is the less arm
])
def test_more_work_is_never_predicted_faster(recipe, more):
    base = step(recipe)
    if more == ["--prompt_max_len", "64"]:
        base, other = step([*recipe, *more]), base
    else:
        other = step([*recipe, *more])
    for name in PHASES:
        assert other[name] >= base[name] - 1e-9, name


@pytest.mark.parametrize("recipe", [RECIPE_20B, RECIPE_120B])
def test_a_larger_truncated_share_or_a_higher_zero_stage_is_never_faster(recipe):
    base = step(recipe)
    longer = step(recipe, {**DEFAULTS, "truncated_share": 0.9})
    assert longer["generate"] > base["generate"] and longer["step"] > base["step"]
    stages = [step([*recipe, "--zero_stage", str(z)]) for z in (0, 1, 2, 3)]
    for lo, hi in zip(stages, stages[1:], strict=False):
        assert hi["step"] >= lo["step"] and hi["train"] >= lo["train"] and hi["logprob"] >= lo["logprob"]
    assert stages[3]["train"] > stages[2]["train"]  # the gathers: forward, recompute and backward of each micro-batch


@pytest.mark.parametrize("recipe", [RECIPE_20B, RECIPE_120B, [*RECIPE_20B, "--generate_max_len", "16384"],
                                    [*RECIPE_20B, "--n_samples_per_prompt", "2"]])
def test_async_is_never_slower_than_sync(recipe):
    sync, overlapped = step(recipe), step([*recipe, "--async_train"])
    assert overlapped["step"] <= sync["step"]
    # the phases themselves are the same; only the step overlaps them
    assert {k: v for k, v in overlapped.items() if k != "step"} == {k: v for k, v in sync.items() if k != "step"}
    expect = max(sync["generate"] + sync["reward"], sync["logprob"] + sync["train"] + sync["save"])
    assert overlapped["step"] == pytest.approx(expect + sync["sync"] + sync["eval"] + sync["other"])


def test_the_mfu_figures_reproduce_the_measured_trainer_phases():
    """docs/gpu-check.md: the patched Actor under ZeRO-3 on one H100 at 1024 + 4096 tokens: a training micro-step
    5.21 s, the old-log-prob forward 1.62 s."""
    s = compute_s(train_flops(SHAPES["gpt-oss-20b"], MEASURED_TOKENS, checkpointing=True), DEFAULTS)
    assert s == pytest.approx(5.21, abs=0.05)
    f = compute_s(sum(forward_flops(SHAPES["gpt-oss-20b"], MEASURED_TOKENS)), DEFAULTS, "forward_mfu")
    assert f == pytest.approx(1.62, abs=0.05)


def test_a_figures_file_overrides_and_an_unknown_name_is_refused(tmp_path):
    f = tmp_path / "h200.toml"
    f.write_text("hbm_bytes_s = 4.8e12\nzero3_gather_share = 0.05\nsync_call_s = 3\n")
    figures = load_figures(f)
    assert figures["hbm_bytes_s"] == 4.8e12 and figures["peak_bf16_flops"] == FIGURES["peak_bf16_flops"].value
    base, over = step(RECIPE_20B), step(RECIPE_20B, figures)
    assert over["sync"] - base["sync"] == pytest.approx(1.0)
    assert over["train"] > base["train"] and over["logprob"] > base["logprob"]  # the slower gathers
    # the decode share is calibrated on the decode_tok_s figure, so HBM alone moves nothing; the figure does
    assert over["generate"] == pytest.approx(base["generate"])
    assert step(RECIPE_20B, {**DEFAULTS, "decode_tok_s": 2765 / 2})["generate"] == pytest.approx(2 * base["generate"])
    bad = tmp_path / "bad.toml"
    bad.write_text("hbm_bandwidth = 1\n")
    with pytest.raises(FiguresError, match="unknown figure.*hbm_bandwidth"):
        load_figures(bad)
    bad.write_text("hbm_bytes_s = -1\n")
    with pytest.raises(FiguresError, match="positive"):
        load_figures(bad)
    assert main(["--device-figures", str(bad), "--", *RECIPE_20B]) == 2


def test_the_cited_figures_are_the_shipped_toml_and_it_reads_as_a_figures_file(tmp_path):
    """device_figures.toml holds every figure with its unit and source, the defaults a run's figures start from; in
    an RFT_DEVICE_FIGURES file a table in its form sets its value like a `name = value` pair."""
    import tomllib

    from rft.plan.step_time import FIGURES_FILE, cited_figures, figures_text

    table = tomllib.loads(FIGURES_FILE.read_text(encoding="utf-8"))
    assert list(table) == list(FIGURES) and len(FIGURES) == 25
    assert all(t["source"] and t["unit"] for t in table.values())
    assert FIGURES["allgather_bytes_s"].spread == (300e9, 400e9) and FIGURES["hbm_bytes_s"].spread == (3.35e12,) * 2
    assert {name: fig.value for name, fig in cited_figures(FIGURES_FILE).items()} == DEFAULTS
    mixed = tmp_path / "mixed.toml"
    mixed.write_text(figures_text({"sync_call_s": 3.0}, "a test") + '\n[hbm_bytes_s]\nvalue = 4.8e12\nunit = "B/s"\n')
    assert load_figures(mixed) == {**DEFAULTS, "sync_call_s": 3.0, "hbm_bytes_s": 4.8e12}
    bad = tmp_path / "cited.toml"
    bad.write_text('[hbm_bytes_s]\nvalue = 3.35e12\nunit = "B/s"\n')
    with pytest.raises(FiguresError, match=r"cited.toml: \[hbm_bytes_s\] needs value .*unit and source"):
        cited_figures(bad)
    bad.write_text('[hbm_bytes_s]\nvalue = true\nunit = "B/s"\nsource = "x"\n')
    with pytest.raises(FiguresError, match=r"\[hbm_bytes_s\]"):
        cited_figures(bad)
    bad.write_text('[hbm_bytes_s]\nvalue = "fast"\n')
    with pytest.raises(FiguresError, match="hbm_bytes_s must be positive numbers"):
        load_figures(bad)


def test_levers_20b_need_the_reference_from_the_actor_for_zero2_to_fit():
    pr = predict(RECIPE_20B, DEFAULTS)
    base = Levers(False, False, 3)
    assert candidates(pr)[0] == base and len(candidates(pr)) == 8
    zero2, both = Levers(False, False, 2), Levers(False, True, 2)
    assert not fits(pr, zero2) and fits(pr, both) and fits(pr, base)
    for lever in (Levers(True, False, 3), zero2):
        assert lever_step(pr, lever) < lever_step(pr, base)
    # the reference from the actor is a second forward with its own gathers: the colocated reference's time, less memory
    assert lever_step(pr, Levers(False, True, 3)) == lever_step(pr, base)
    assert actor_gib(pr.shape, with_levers(pr.recipe, Levers(False, True, 3))) < actor_gib(pr.shape, pr.recipe)
    best = recommend(pr)
    assert fits(pr, best) and all(lever_step(pr, best) <= lever_step(pr, lv) for lv in candidates(pr) if fits(pr, lv))


def test_levers_120b_keep_zero3_under_offload_and_have_no_reference():
    pr = predict(RECIPE_120B, DEFAULTS)
    assert {lv.zero_stage for lv in candidates(pr)} == {3} and not any(lv.ref_from_actor for lv in candidates(pr))
    assert recommend(pr) == Levers(True, False, 3)
    # no KL term, no reference: the log-prob phase is the old log-probs alone, half of what a KL term makes it
    with_kl = phases(pr.shape, recipe([*RECIPE_120B, "--init_kl_coef", "0.001"]), DEFAULTS)
    assert with_kl["logprob"] == pytest.approx(2 * pr.phases["logprob"])


BLOCK = re.compile(r"^predicted step time: (\d+\.\d)-(\d+\.\d) min over the figures' spread \((\d+\.\d) at the "
                   r"stated figures\)\n  figures: (.*)\n  attention: .*\n"
                   r"((?:  \w+ +\d+\.\d s  \(\d+\.\d-\d+\.\d\)  .*\n){9})levers:", re.M)
ROW = re.compile(r"  (\w+) +(\d+\.\d) s  \((\d+\.\d)-(\d+\.\d)\)")


def dry_run_block(stderr: str) -> tuple[float, dict[str, float], str]:
    """(minutes at the stated figures, seconds per phase, the rest); each row's range holds its value."""
    m = BLOCK.search(stderr)
    assert m, stderr
    rows = {}
    for ln in m.group(5).splitlines():
        name, mid, lo, hi = ROW.match(ln).groups()
        assert float(lo) <= float(mid) <= float(hi), ln
        rows[name] = float(mid)
    assert float(m.group(1)) <= float(m.group(3)) <= float(m.group(2))
    return float(m.group(3)), rows, stderr[m.end():]


@pytest.mark.parametrize("name", ["train_grpo_20b.sh", "train_grpo_120b.sh"])
def test_both_dry_runs_print_the_step_by_phase_and_the_levers(name, patched_root, data_dir, tmp_path):
    env = script_env(patched_root, data_dir, tmp_path)
    env.pop(FIGURES_ENV, None)
    res = run_script(name, env, "--dry-run")
    assert res.returncode == 0, res.stderr
    minutes, rows, rest = dry_run_block(res.stderr)
    assert tuple(rows) == PHASES
    assert rows["step"] == pytest.approx(sum(v for k, v in rows.items() if k != "step"), abs=0.5)
    assert minutes == pytest.approx(rows["step"] / 60, abs=0.06)
    assert "--async_train:" in rest and "recommended:" in rest
    # a figures file through the environment moves the printed phase
    figures = tmp_path / "figures.toml"
    figures.write_text("sync_call_s = 1.5\n")
    _, over, _ = dry_run_block(run_script(name, {**env, FIGURES_ENV: str(figures)}, "--dry-run").stderr)
    assert over["sync"] < rows["sync"] and over["generate"] == rows["generate"]
    assert "as stated in docs/step-time.md" in BLOCK.search(res.stderr).group(4)


def test_the_judge_reward_and_a_reference_on_its_own_gpus():
    em, judge = step([*RECIPE_20B, "--remote_rm_url", "/r/reward_func_em.py"]), step(
        [*RECIPE_20B, "--remote_rm_url", "/r/reward_func_judge.py"])
    assert judge["reward"] == pytest.approx(em["reward"] * 2118 / 49)
    apart = step([t for t in RECIPE_20B if t != "--colocate_actor_ref"])
    assert apart["logprob"] == pytest.approx(step(RECIPE_20B)["logprob"] / 2)  # beside the old log-probs, not after


def test_the_predicted_phases_are_the_measured_ones():
    """The model's phase names are the trainer's `time_<phase>_s` keys and the monitor's `other` (the step outside
    them), which the monitor sets side by side."""
    from rft.monitor.step_phases import OTHER
    from rft.train.step_timer import PHASES as MEASURED

    assert PHASES == (*MEASURED, OTHER, "step")


def test_the_range_holds_the_stated_figures_and_a_file_pins_a_figure(tmp_path):
    """Low and high come from the figures' spread: every phase's stated value lies between them; a figure a file
    sets is exact, so pinning every spread figure collapses the range to one number."""
    pr = predict(RECIPE_20B, DEFAULTS)
    for name in PHASES:
        assert pr.low[name] <= pr.phases[name] + 1e-9 and pr.phases[name] <= pr.high[name] + 1e-9, name
    assert pr.high["step"] > 1.4 * pr.low["step"]
    spread = {n: f.value * 1.0001 for n, f in FIGURES.items() if f.spread[0] != f.spread[1]}
    pinned = predict(RECIPE_20B, {**DEFAULTS, **spread})
    assert pinned.low["step"] == pytest.approx(pinned.high["step"]) == pytest.approx(pinned.phases["step"])


def test_the_sync_is_the_bytes_it_moves_and_the_tokenizer_is_sent_once():
    """20b, r32 on q/k/v/o: 15.9M bf16 LoRA parameters (32 MB) to each of 2 engines plus the fixed cost; the
    tokenizer's per-call load is 0 since experience_maker.patch (0.56 s a call before)."""
    pr = predict(RECIPE_20B, DEFAULTS)
    moved = 2 * 2 * SHAPES["gpt-oss-20b"].lora_params(32)
    assert moved == pytest.approx(63.7e6, rel=1e-3)
    assert pr.phases["sync"] == pytest.approx(DEFAULTS["sync_call_s"] + moved / DEFAULTS["object_store_bytes_s"])
    assert DEFAULTS["tokenizer_call_s"] == 0
    before = step(RECIPE_20B, {**DEFAULTS, "tokenizer_call_s": 0.56})
    assert before["generate"] - pr.phases["generate"] == pytest.approx(0.56 * 16 / 2)  # 16 calls over 2 engines


def test_the_eval_decodes_greedily_to_the_budget():
    base = step(RECIPE_20B)
    assert step(RECIPE_20B, {**DEFAULTS, "eval_truncated_share": 0.5})["eval"] < base["eval"]
    assert DEFAULTS["eval_truncated_share"] == 1.0


def test_the_decode_figure_says_it_is_borrowed():
    assert FIGURES["decode_tok_s"].source.startswith("BORROWED") and "SGLang" in FIGURES["decode_tok_s"].source


def test_the_transport_floor_is_the_rate_at_which_gathers_are_half_the_step():
    """docs/step-time.md#the-transport: 20b 160 gathers of 31.4 GB a step; at the floor they equal the rest."""
    from rft.plan.step_time import gather_count, gather_floor, gather_s

    pr = predict(RECIPE_20B, DEFAULTS)
    a = pr.recipe
    assert gather_count(a, 128) == 32 + 32 + 32 * 3
    floor = gather_floor(pr.shape, a, DEFAULTS)
    at_floor = {**DEFAULTS, "allgather_bytes_s": floor, "zero3_gather_share": 1.0}
    gathers = 160 * gather_s(pr.shape, a, at_floor)
    assert gathers == pytest.approx(phases(pr.shape, a, at_floor)["step"] / 2, rel=1e-6)
    assert 18e9 < floor < 26e9
    assert gather_floor(pr.shape, recipe([*RECIPE_20B, "--zero_stage", "2"]), DEFAULTS) is None


def test_the_attention_path_scales_the_trainer_and_the_dry_run_names_it():
    """docs/attention.md#the-trainer-paths-on-one-gpu: rft_eager_fp32's micro-step 5.90 s and forward 1.80 s against
    eager's 5.21 and 1.62 on one H100; the block names the path, its factors and the memory plan's difference."""
    from rft.plan.step_time import render

    eager = predict([*RECIPE_20B, "--attn_implementation", "eager"], DEFAULTS)
    fp32 = predict([*RECIPE_20B, "--attn_implementation", "rft_eager_fp32"], DEFAULTS)
    assert DEFAULTS["eager_fp32_train_factor"] == pytest.approx(5.90 / 5.21, abs=0.005)
    assert DEFAULTS["eager_fp32_forward_factor"] == pytest.approx(1.80 / 1.62, abs=0.005)
    from rft.plan.step_time import sequence_tokens

    a = eager.recipe
    per_micro = compute_s(train_flops(eager.shape, sequence_tokens(a, DEFAULTS), True), DEFAULTS)
    micro = 16 * 8 / 4  # samples per actor rank at micro batch 1, one epoch: the compute grows, the gathers do not
    assert fp32.phases["train"] - eager.phases["train"] == pytest.approx(micro * per_micro * 0.13, rel=1e-6)
    forward = compute_s(sum(forward_flops(eager.shape, sequence_tokens(a, DEFAULTS))), DEFAULTS, "forward_mfu")
    # old log-probs and the colocated reference, 32 forwards each
    assert fp32.phases["logprob"] - eager.phases["logprob"] == pytest.approx(2 * micro * forward * 0.11, rel=1e-6)
    assert fp32.phases["generate"] == eager.phases["generate"]
    text_eager, text_fp32 = render(eager), render(fp32)
    assert "  attention: eager (the path the trainer figures were measured on)" in text_eager
    assert ("  attention: rft_eager_fp32 (train x1.13, forward x1.11, measured on one H100; +12.5 GiB activations by "
            "the memory plan)") in text_fp32
    row = re.compile(r"  train +(\d+\.\d) s")
    assert float(row.search(text_fp32).group(1)) > float(row.search(text_eager).group(1))
    # rft_flex has no trainer measurement: timed as eager, and the line says why
    flex = predict([*RECIPE_20B, "--attn_implementation", "rft_flex"], DEFAULTS)
    assert flex.phases == eager.phases
    assert "timed as eager, not measured: its training backward failed to compile" in render(flex)
    assert "-1.0 GiB activations by the memory plan" in render(flex)


def test_the_dry_run_with_the_fp32_path_names_it_and_moves_both_lines(patched_root, data_dir, tmp_path):
    env = script_env(patched_root, data_dir, tmp_path)
    env.pop(FIGURES_ENV, None)
    plan = re.compile(r"actor +(\d+\.\d\d) GiB  estimate +GPU +backward peak, .*one layer's (\S+) attention")
    seen = {}
    for path in ("eager", "rft_eager_fp32"):
        res = run_script("train_grpo_20b.sh", env, "--dry-run", "--attn_implementation", path)
        assert res.returncode == 0, res.stderr
        _, rows, _ = dry_run_block(res.stderr)
        m = plan.search(res.stderr)
        assert m and m.group(2) == path, res.stderr
        assert f"  attention: {path} (" in res.stderr
        seen[path] = rows["train"], float(m.group(1))
    assert seen["rft_eager_fp32"][0] == pytest.approx(seen["eager"][0] * 1.13, rel=0.05)
    assert seen["rft_eager_fp32"][1] - seen["eager"][1] == pytest.approx(12.5, abs=0.05)
