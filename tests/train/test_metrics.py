"""JSONL metrics/samples/spike logs through the real patched OpenRLHF trainer methods, and eval pass@n (#966)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from rft.io import read_jsonl
from rft.train import metrics
from rft.train.step_timer import PHASES, ROLLOUT_KEY, StepTimer, phase_key
from tests.train.trainer_standins import Tok, loop_trainer, rollout


@pytest.fixture
def log_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("METRICS_LOG_DIR", str(tmp_path / "m"))
    monkeypatch.setenv("SAMPLES_LOG_DIR", str(tmp_path / "s"))
    monkeypatch.delenv("SPIKE_LOG_PATH", raising=False)
    return tmp_path


def base_trainer(**args):
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer

    tr = object.__new__(BasePPOTrainer)
    tr.args = SimpleNamespace(**{"logging_steps": 1, "save_steps": float("inf"), **args})
    tr.wandb_logger = tr.tensorboard_logger = None
    return tr


def test_save_logs_writes_one_numeric_line_per_step(patched_openrlhf, log_dirs):
    tr = base_trainer()
    for step in (1, 2):
        status = {
            "policy_loss": torch.tensor(0.5 * step),
            "reward": 0.25,
            "grad_norm": 3,
            "ppo_kl": float("nan"),
            "generated_samples": ["text", 1.0],
            "note": "skip me",
        }
        tr.save_logs_and_checkpoints(step, status, {})
    rows = read_jsonl(log_dirs / "m" / metrics.METRICS_FILE)
    assert [r["global_step"] for r in rows] == [1, 2]
    assert rows[1]["policy_loss"] == 1.0 and rows[0]["reward"] == 0.25 and rows[0]["grad_norm"] == 3
    assert rows[0]["ppo_kl"] is None
    assert "generated_samples" not in rows[0] and "note" not in rows[0]
    assert isinstance(rows[0]["timestamp"], float)
    assert set(rows[0]) <= set(metrics.KNOWN_KEYS)


def test_metrics_off_without_env(patched_openrlhf, tmp_path, monkeypatch):
    monkeypatch.delenv("METRICS_LOG_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    base_trainer().save_logs_and_checkpoints(1, {"reward": 1.0}, {})
    assert list(tmp_path.iterdir()) == []


def test_samples_every_n_steps(patched_openrlhf, log_dirs, monkeypatch):
    from openrlhf.trainer.ppo_utils.experience_maker import Experience

    monkeypatch.setenv("SAMPLES_LOG_EVERY", "2")
    exp = Experience(
        sequences=torch.tensor([[0, 5, 6, 7, 8], [5, 6, 9, 0, 0]]),
        action_mask=torch.tensor([[0, 0, 1, 1], [0, 1, 0, 0]], dtype=torch.bool),
        prompts=["p1", "p2"], labels=["1", "2"], rewards=torch.tensor([1.0, 0.0]),
        info={"correctness": torch.tensor([1.0, 0.0]), "scalar": torch.tensor(3.0)},
    )
    assert metrics.write_samples(1, [exp], Tok()) is None
    path = metrics.write_samples(2, [exp], Tok())
    rows = read_jsonl(path)
    assert path.name == "samples_step2.jsonl"
    assert rows[0] == {"global_step": 2, "prompt": "p1", "label": "1", "response": "t7 t8", "reward": 1.0,
                       "correctness": 1.0}
    assert rows[1]["response"] == "t9"
    monkeypatch.setenv("SAMPLES_LOG_EVERY", "zero")
    with pytest.raises(ValueError, match="SAMPLES_LOG_EVERY"):
        metrics.samples_every()


def test_prompt_hashes_and_spike_log(log_dirs):
    seqs = torch.tensor([[0, 0, 5, 6, 7], [0, 5, 6, 7, 8]])
    att = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]])
    act = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    h = metrics.prompt_token_hashes(seqs, att, act)
    assert h[0] != h[1] and len(h[0]) == 16
    same = metrics.prompt_token_hashes(torch.tensor([[9, 5, 6, 1]]), torch.tensor([[0, 1, 1, 1]]),
                                       torch.tensor([[0, 1, 1]], dtype=torch.bool))
    assert same[0] == h[0]  # tokens [5, 6] whatever the padding
    path = metrics.append_spike({"global_step": 3, "grad_norm": torch.tensor(80.0), "prompt_hashes": h})
    assert path == log_dirs / "m" / metrics.SPIKE_FILE
    row = json.loads(path.read_text().splitlines()[0])
    assert row["grad_norm"] == 80.0 and row["prompt_hashes"] == h


def test_eval_generates_and_labels_eval_n(patched_openrlhf, log_dirs, monkeypatch):
    """OpenRLHF#966: 0.9.3 generated the *training* n per eval prompt but reshaped by the eval n."""
    from openrlhf.trainer.ppo_trainer import PPOTrainer
    from openrlhf.trainer.ppo_utils import experience_maker as em

    class Engine:
        def __init__(self):
            self.calls = []
            self.get_num_unfinished_requests = SimpleNamespace(remote=lambda: 0)
            self.generate_responses = SimpleNamespace(remote=lambda **kw: self.calls.append(kw) or kw)

    engine = Engine()
    gen = object.__new__(em.SamplesGenerator)
    gen.args = SimpleNamespace(n_samples_per_prompt=8, enable_vllm_is_correction=False)
    gen.vllm_engines = [engine]
    gen.tokenizer = None
    monkeypatch.setattr("ray.get", lambda refs: refs)  # engines are stand-ins; ray.get is a pass-through
    monkeypatch.setattr("ray.wait", lambda refs, num_returns, timeout: (list(refs), []))  # all answered
    gen._dispatch_prompts_to_vllm(["q1", "q2"], ["1", "2"], n_samples_per_prompt=3, temperature=0.6)
    assert [c["num_samples"] for c in engine.calls] == [3, 3]
    engine.calls.clear()
    gen._dispatch_prompts_to_vllm(["q1"], ["1"])  # training rollouts keep the training n
    assert engine.calls[0]["num_samples"] == 8

    cls = getattr(PPOTrainer, "__ray_actor_class__", PPOTrainer)
    tr = object.__new__(cls)
    tr.wandb_logger = tr.tensorboard_logger = None
    tr.eval_dataloader = [(["aime", "amc"], ["q1", "q2"], ["1", "2"])]
    rewards = {"q1": [0.0, 1.0, 0.0], "q2": [0.0, 0.0, 0.0]}
    samples = [em.Experience(prompts=[p], rewards=torch.tensor([r])) for p in ("q1", "q2") for r in rewards[p]]
    tr.samples_generator = SimpleNamespace(generate_eval_samples=lambda **kw: samples)
    tr.evaluate(5, n_samples_per_prompt=3)
    rows = read_jsonl(log_dirs / "m" / metrics.METRICS_FILE)
    assert rows[-1]["event"] == "eval" and rows[-1]["global_step"] == 5
    assert rows[-1]["eval_aime_pass3"] == 1.0 and rows[-1]["eval_amc_pass3"] == 0.0
    assert rows[-1]["eval_aime_pass1"] == pytest.approx(1 / 3)


def ticking(tr):
    """Give the trainer (and its experience maker) a step timer on a clock that advances 1 s a reading."""
    ticks = iter(range(10**6))
    tr.step_timer = tr.experience_maker.step_timer = StepTimer(clock=lambda: float(next(ticks)))


def check_step_times(rows, phases, generated_per_s):
    """Every step line holds every time_* key: the phases the loop opened > 0, the rest 0, their sum within the
    step; tokens/s from the batch (3 response tokens x 4 samples generated, 5 tokens x 4 trained)."""
    for r in rows:
        for p in PHASES:
            assert (r[phase_key(p)] > 0) == (p in phases), (p, r)
        assert sum(r[phase_key(p)] for p in PHASES) <= r["time_step_s"]
        assert r["tokens_trained_per_s"] == pytest.approx(20 / r["time_train_s"])
        assert r["tokens_generated_per_s"] == pytest.approx(generated_per_s)
        assert r["response_len_p50"] == r["response_len_max"] == 3
    assert set(rows[0]) <= set(metrics.KNOWN_KEYS)


def check_loop_logs(log_dirs, group, steps=3):
    rows = read_jsonl(log_dirs / "m" / metrics.METRICS_FILE)
    assert [r["global_step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        assert r["policy_loss"] == pytest.approx(0.1 * r["global_step"])  # the actor fit of that very step
        assert r["grad_norm"] == 2.5 and r["lora_sync_seconds"] == 0.5
        # whole-batch reward stats of the real experience maker: rewards 1, 0, 0.9, 0 ("bad" -> 0)
        assert r["reward_mean"] == pytest.approx(0.475) and r["reward_max"] == 1.0
        assert r["reward_high_but_wrong"] == pytest.approx(0.25)  # the 0.9 with correctness 0
    assert "save_checkpoint" not in group.calls  # save_steps -1: metrics still written, no checkpoint
    assert sorted(p.name for p in (log_dirs / "s").iterdir()) == ["samples_step2.jsonl"]
    samples = read_jsonl(log_dirs / "s" / "samples_step2.jsonl")
    assert len(samples) == 4 and {s["prompt"] for s in samples} == {"q0", "q1"} and samples[0]["correctness"] == 1.0


def test_sync_trainer_fit_logs_every_step(patched_openrlhf, log_dirs, monkeypatch):
    from openrlhf.trainer.ppo_trainer import PPOTrainer

    monkeypatch.setenv("SAMPLES_LOG_EVERY", "2")
    monkeypatch.setattr("ray.get", lambda refs: refs)  # the groups are stand-ins returning plain values
    monkeypatch.setattr("rft.train.waits.get", lambda refs, role, *a, **k: refs)
    tr, group = loop_trainer(PPOTrainer, log_dirs)
    batches = iter([(rollout(s), None, 2, False) for s in range(3)] + [([], None, 0, True)])
    from rft.train.prompt_filter import PromptFilter

    # the rollout: 12 tokens in 4 s of which 0.5 s only the reward ran (the timer moves it to time_reward_s)
    tr.samples_generator = SimpleNamespace(generate_samples=lambda **kw: next(batches), prompt_filter=PromptFilter(),
                                           last_rollout={"tokens": 12, "wall_s": 4.0, "reward_only_s": 0.5})
    tr.prompts_dataloader = type("Loader", (), {"__len__": lambda self: 6, "state_dict": lambda self: {}})()
    tr.eval_dataloader, tr.generate_kwargs = None, {"prompt_max_len": 8, "max_new_tokens": 8}
    ticking(tr)
    tr.fit()
    check_loop_logs(log_dirs, group)
    check_step_times(read_jsonl(log_dirs / "m" / metrics.METRICS_FILE), {"generate", "reward", "logprob", "train",
                                                                        "sync"}, 3.0)


def test_async_trainer_fit_logs_every_step(patched_openrlhf, log_dirs, monkeypatch):
    import queue

    from openrlhf.trainer.ppo_trainer_async import TrainingActor

    monkeypatch.setenv("SAMPLES_LOG_EVERY", "2")
    monkeypatch.setattr("ray.get", lambda refs: refs)
    monkeypatch.setattr("rft.train.waits.get", lambda refs, role, *a, **k: refs)
    tr, group = loop_trainer(TrainingActor, log_dirs)
    tr.rollout_queue, tr.rollout_slots = queue.Queue(), queue.Queue()
    for s in range(3):  # the generator's rollout timing rides in client_states, never into the checkpoint
        timing = {"tokens": 12, "wall_s": 6.0, "reward_only_s": 1.0}
        tr.rollout_queue.put((rollout(s), {"episode": 0, ROLLOUT_KEY: timing}, None))
    tr.rollout_queue.put("done")
    tr.vllm_lock = SimpleNamespace(acquire=SimpleNamespace(remote=lambda: None),
                                   release=SimpleNamespace(remote=lambda: None))
    saved = []
    tr.save_logs_and_checkpoints = lambda step, status, states, save=tr.save_logs_and_checkpoints: (
        saved.append(dict(states)) or save(step, status, states))
    ticking(tr)
    tr.eval_dataloader, tr.generate_kwargs = None, {"prompt_max_len": 8, "max_new_tokens": 8}
    tr.fit(global_step=0)
    check_loop_logs(log_dirs, group)
    rows = read_jsonl(log_dirs / "m" / metrics.METRICS_FILE)
    # async: the queue wait and the vLLM lock are the trainer's generate time; in-rollout reward overlaps training
    check_step_times(rows, {"generate", "logprob", "train", "sync"}, 2.0)
    assert all(ROLLOUT_KEY not in s for s in saved)
    assert [r["rollout_lag"] for r in rows] == [0.0] * 3  # maxsize 0
