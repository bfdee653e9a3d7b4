"""Online filtering by score or correctness, the prompt history, and the step budget the LR schedule assumes."""

from types import SimpleNamespace

import pytest
import torch

from rft.plan.lr_schedule import Schedule
from rft.train.prompt_filter import (
    MIXED,
    RIGHT,
    WRONG,
    PromptFilter,
    group_kind,
    passes,
    planned_rollout_steps,
)


def group(prompt, rewards, correct=None, scores=None):
    """One prompt group of OpenRLHF Experiences (one sample each), as _generate_vllm sees it."""
    correct = rewards if correct is None else correct
    scores = rewards if scores is None else scores
    return [SimpleNamespace(prompts=[prompt], labels=["7"], rewards=torch.tensor([r]), scores=torch.tensor([s]),
                            info={"correctness": torch.tensor([c])})
            for r, c, s in zip(rewards, correct, scores, strict=True)]  # fmt: skip


def test_judge_rewards_need_the_correctness_key():
    """correct_only pays a right answer 0.8-1.0: the score mean of an all-right group is inside (0, 1)."""
    judged = group("p", [0.85, 0.92, 1.0, 0.8], correct=[1, 1, 1, 1])
    by_score = PromptFilter(dynamic_filtering=True, key="score")
    by_correct = PromptFilter(dynamic_filtering=True, key="correctness")
    assert by_score.after_group(judged) == judged  # 0.9.3's rule keeps a group that teaches nothing
    assert by_correct.after_group(judged) == [] and by_correct.filtered == 1
    mixed = group("q", [0.9, 0.0, 0.0, 0.0], correct=[1, 0, 0, 0])
    assert by_correct.after_group(mixed) == mixed
    assert group_kind(judged, "correctness") == RIGHT and group_kind(mixed, "correctness") == MIXED
    assert group_kind(group("r", [0.0, 0.0]), "score") == WRONG


def test_history_skips_uniform_prompts_more_the_longer_they_stay_uniform():
    pf = PromptFilter(history=True, explore=0.5, max_skip=0.95)
    key = "a" * 16
    pf.records[key] = [0, 0, MIXED]
    assert pf.skip_probability(key) == 0
    probs = []
    for streak in (1, 2, 3, 10):
        pf.records[key][0] = streak
        probs.append(pf.skip_probability(key))
    assert probs == [0.5, 0.75, 0.875, 0.95]  # capped: a prompt is never retired for good


def test_skips_are_counted_deterministic_and_rare_for_mixed_prompts():
    def run():
        pf = PromptFilter(history=True, seed=3, explore=0.5)
        for p in range(200):
            pf.after_group(group(f"easy{p}", [1.0, 1.0]) if p % 2 else group(f"mixed{p}", [1.0, 0.0]))
        pool = iter([([f"easy{p}" if p % 2 else f"mixed{p}"], ["7"]) for p in range(200)])

        def draw(k):
            try:
                return (*next(pool), False)
            except StopIteration:
                return [], [], True

        prompts, _, exhausted = pf.collect(draw, 200)
        return pf, prompts, exhausted

    pf, prompts, exhausted = run()
    assert exhausted and pf.skipped == 200 - len(prompts)
    easy_kept = sum(p.startswith("easy") for p in prompts)
    assert sum(p.startswith("mixed") for p in prompts) == 100  # never skipped
    assert 30 <= easy_kept <= 70  # streak 1: skipped with probability 1/2
    assert run()[1] == prompts  # the same draws on a rerun (and on a resume: the records carry the appearances)


def test_history_state_round_trips_through_the_checkpoint():
    pf = PromptFilter(history=True)
    pf.after_group(group("p", [1.0, 1.0]))
    pf.after_group(group("p", [1.0, 1.0]))
    pf.passes = 3
    restored = PromptFilter(history=True)
    restored.load_state_dict(pf.state_dict())
    assert restored.records == pf.records and restored.passes == 3
    assert next(iter(restored.records.values()))[0] == 2
    restored.load_state_dict(None)  # a checkpoint from before the history
    assert restored.records == pf.records


def test_step_metrics_count_and_reset():
    pf = PromptFilter(dynamic_filtering=True, history=True)
    for p, r in (("a", [1.0, 1.0]), ("b", [0.0, 0.0]), ("c", [1.0, 0.0])):
        pf.after_group(group(p, r))
    m = pf.step_metrics(accepted_prompts=1)
    assert m["prompts_filtered"] == 2 and m["prompts_per_accepted"] == 3.0 and m["prompts_uniform_known"] == 2
    assert pf.step_metrics(1)["prompts_filtered"] == 0
    assert PromptFilter().step_metrics(1) == {}


def test_off_means_0_9_3_behaviour():
    pf = PromptFilter()
    assert not pf.active and not pf.skip("p", "7")
    g = group("p", [1.0, 1.0])
    assert pf.after_group(g) == g
    with pytest.raises(ValueError):
        PromptFilter(key="mean")


@pytest.mark.parametrize(("pool", "rbs", "episodes"), [(384, 64, 5), (100, 8, 3), (7, 2, 1)])
def test_the_step_budget_is_the_lr_preflights_rollout_steps(pool, rbs, episodes):
    """The patched trainer's budget is the LR preflight's rollout_steps (the cosine's floor when the pool divides
    into rollout batches)."""
    s = Schedule(pool=pool, n_samples_per_prompt=8, train_batch_size=rbs, num_episodes=episodes, lr=1e-5,
                 warmup_ratio=0.05, rollout_batch_size=rbs)  # fmt: skip
    assert planned_rollout_steps(pool, rbs, episodes) == s.rollout_steps
    if pool % rbs == 0:  # no partial batch: the budget is the whole schedule
        assert s.rollout_steps * s.steps_per_rollout == s.total_steps
        assert s.lr_after(s.total_steps) == pytest.approx(1e-6)


def test_passes_continue_until_the_budget():
    """Passes that each yield fewer steps than 0.9.3's episodes: as many passes as the budget takes."""
    done = {"steps": 0}
    seen = []
    for p in passes(0, 5, 30, lambda: done["steps"], True):
        seen.append(p)
        done["steps"] += 7  # each pass trains 7 steps: 5 passes reach 30
    assert seen == [0, 1, 2, 3, 4] and done["steps"] >= 30
    assert list(passes(2, 5, 30, lambda: 0, False)) == [2, 3, 4]  # off: 0.9.3's episodes, from the resumed one


def test_passes_that_train_nothing_end_the_run(capsys):
    done = {"steps": 0}
    assert list(passes(0, 3, 10, lambda: done["steps"], True)) == [0, 1, 2]  # IDLE_PASSES in a row
    assert "ends at rollout step 0 of 10: 3 passes over the pool in a row trained nothing" in capsys.readouterr().out
    trained = iter([1, 0, 0, 1, 0, 0, 0])  # steps each pass trains; an idle pass alone does not end the run
    seen = []
    for p in passes(0, 1, 10, lambda: done["steps"], True):
        seen.append(p)
        done["steps"] += next(trained)
    assert seen == [0, 1, 2, 3, 4, 5, 6] and done["steps"] == 2
    assert "ends at rollout step 2 of 10" in capsys.readouterr().out
    assert list(passes(0, 1, 0, lambda: 0, True)) == [] and capsys.readouterr().out == ""  # the budget reached


def test_the_patched_fit_loop_runs_the_step_budget_over_several_passes(patched_openrlhf, tmp_path, monkeypatch):
    """The real patched PPOTrainer.fit with the history on: the sample generator's passes end early (prompts
    skipped or dropped), and the loop starts further passes until the scheduled 3 rollout steps are done, with
    the history in every checkpoint's client_states; off, 0.9.3's one episode of 1 step."""
    from openrlhf.trainer.ppo_trainer import PPOTrainer

    from rft.io import read_jsonl
    from rft.train import metrics
    from tests.train.trainer_standins import loop_trainer, rollout

    monkeypatch.setattr("ray.get", lambda refs: refs)
    monkeypatch.setattr("rft.train.waits.get", lambda refs, role, *a, **k: refs)  # stand-ins: plain values
    for active in (True, False):
        monkeypatch.setenv("METRICS_LOG_DIR", str(tmp_path / f"m{active}"))
        monkeypatch.delenv("SAMPLES_LOG_DIR", raising=False)
        monkeypatch.setattr(metrics, "_continued", set())
        tr, group = loop_trainer(PPOTrainer, tmp_path)
        tr.args.save_steps = 1
        pf = PromptFilter(history=active)
        # each pass over the 6-prompt pool yields one batch, then the loader is exhausted
        batches = iter([item for s in range(5) for item in ((rollout(s), None, 4, False), ([], None, 2, True))])
        tr.samples_generator = SimpleNamespace(generate_samples=lambda b=batches, **kw: next(b),
                                               prompt_filter=pf, last_rollout={})
        tr.prompts_dataloader = type("Loader", (), {"__len__": lambda self: 6, "state_dict": lambda self: {}})()
        tr.eval_dataloader, tr.generate_kwargs = None, {"prompt_max_len": 8, "max_new_tokens": 8}
        saved = []
        tr.save_logs_and_checkpoints = lambda step, status, states, saved=saved: (
            saved.append(states), metrics.append_metrics(step, status))
        tr.fit()
        rows = read_jsonl(tmp_path / f"m{active}" / metrics.METRICS_FILE)
        if active:  # budget = 6 // 2 * 1 = 3 rollout steps, over passes 0, 1, 2
            assert [r["global_step"] for r in rows] == [1, 2, 3]
            assert [r["pool_pass"] for r in rows] == [0, 1, 2] and [s["episode"] for s in saved] == [0, 1, 2]
            assert all("prompt_history" in s for s in saved)
        else:
            assert [r["global_step"] for r in rows] == [1] and "pool_pass" not in rows[0]


def test_a_batch_the_pass_cannot_fill_carries_into_the_next_pass(patched_openrlhf, monkeypatch):
    """The real patched SamplesGenerator._generate_vllm, vLLM replaced by groups decided by the prompt: a pass
    whose one teaching prompt cannot fill a batch of 2 keeps its group and the next pass completes the batch
    (0.9.3 drops it: no pass ever trains); a full batch trains even when the pass ends with it."""
    from openrlhf.trainer.ppo_utils.experience_maker import SamplesGenerator

    pool = [("teach", "7"), ("easy", "3"), ("hard", "42")]
    rewards = {"teach": [1, 0], "easy": [1, 1], "hard": [0, 0]}
    monkeypatch.setattr("ray.wait", lambda refs, **kw: (refs[:1], refs[1:]))
    monkeypatch.setattr("ray.get", lambda ref: ref)

    def generator(pf):
        gen = object.__new__(SamplesGenerator)
        gen.args = SimpleNamespace(n_samples_per_prompt=2, dynamic_filtering_reward_range=(0, 1))
        gen._dispatch_prompts_to_vllm = lambda ps, ls, **kw: [group(p, rewards[p]) for p in ps]
        gen._process_response_into_experience = lambda response, **kw: response
        return gen

    def one_pass(gen, pf):
        loader = iter([(None, [p], [lab]) for p, lab in pool])
        return gen._generate_vllm(dataloader_iter=loader, num_prompts=2, dynamic_filtering=True, prompt_filter=pf)

    pf = PromptFilter(dynamic_filtering=True)
    gen = generator(pf)
    batch, consumed, exhausted = one_pass(gen, pf)
    assert (batch, consumed, exhausted) == ([], 3, True) and len(pf.carry) == 2  # teach's group kept
    batch, consumed, exhausted = one_pass(gen, pf)
    assert [e.prompts[0] for e in batch] == ["teach"] * 4 and not exhausted and consumed == 1
    assert pf.carry == [] and pf.step_metrics(2)["samples_carried"] == 2

    off = SimpleNamespace(active=False)  # 0.9.3's own path: the unfilled batch is dropped every pass
    assert one_pass(generator(off), off)[0] == [] and one_pass(generator(off), off)[0] == []
