"""upstream_fixes.patch: OpenRLHF fixes made after 0.9.3 that an rft run reaches, patched vs pristine.

- #1219: `scores = info["scores"] or info["rewards"]` replaces a score of 0 by the reward. rft's reward returns the
  correctness as `scores`; with `[reward] scheme = "signed"` a wrong answer's score 0 became its reward -1, so
  `--dynamic_filtering` on scores (0.9.3's key) saw a group with 1 right answer in 8 at mean -0.75, not 0.125.
- #1299: `balance_experiences` (`--use_dynamic_batch`, allowed for non-gpt-oss models) merges rank chunks with `zip`,
  which drops samples when their count does not divide by the ranks.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from argparse import Namespace
from types import SimpleNamespace

import torch

from rft.fixtures.patched_openrlhf import ROOT
from rft.fixtures.reward_files import write_reward_toml


class CharTokenizer:
    """A character tokenizer (ids = code points): the executor only encodes the prompt and decodes the sample."""

    def __call__(self, text, add_special_tokens=False, return_tensors="pt"):
        return {"input_ids": torch.tensor([[ord(c) for c in text]])}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


class OneAnswerEngine:
    """Stands in for the vLLM engine: always answers `text` (the reward path is what is under test)."""

    def __init__(self, text: str):
        self.ids = [ord(c) for c in text]

    async def generate(self, prompt_ids, sampling_params):
        out = SimpleNamespace(token_ids=self.ids, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def _load(path, name: str):
    """A module of the pristine release loaded by file path (its imports resolve to the patched package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _score(agent_module, monkeypatch, tmp_path) -> tuple[float, float]:
    """(reward, score) the single-turn executor records for a wrong answer under the signed scheme."""
    monkeypatch.setenv("RFT_REWARD_CONFIG", str(write_reward_toml(tmp_path / "reward.toml", reward={"scheme": "signed"})))
    executor = agent_module.SingleTurnAgentExecutor(str(ROOT / "reward_func_em.py"))
    params = SimpleNamespace(max_tokens=16, logprobs=None)
    out = asyncio.run(executor.execute("What is 3+4? ", "7", params, 256, CharTokenizer(),
                                       OneAnswerEngine("The answer is \\boxed{8}")))
    return float(out["reward"]), float(out["scores"])


def test_a_zero_score_stays_zero(patched_openrlhf, monkeypatch, tmp_path):
    from openrlhf.utils import agent

    assert _score(agent, monkeypatch, tmp_path) == (-1.0, 0.0)


def test_pristine_0_9_3_replaces_a_zero_score_by_the_reward(pristine_openrlhf_root, patched_openrlhf, monkeypatch,
                                                            tmp_path):
    pristine = _load(pristine_openrlhf_root / "openrlhf" / "utils" / "agent.py", "pristine_agent")
    assert _score(pristine, monkeypatch, tmp_path) == (-1.0, -1.0)


def _experiences(n: int):
    from openrlhf.trainer.ppo_utils.experience_maker import Experience

    out = []
    for i in range(n):
        seq = torch.full((1, 3 + i), 5)
        info = {"total_length": torch.tensor([float(3 + i)]), "response_length": torch.tensor([float(i + 1)]),
                "reward": torch.tensor([float(i)])}
        out.append(Experience(sequences=seq, attention_mask=torch.ones_like(seq),
                              action_mask=torch.ones(1, i + 1, dtype=torch.bool), info=info))
    return out


def _balanced_rewards(module) -> list[float]:
    args = Namespace(actor_num_nodes=1, actor_num_gpus_per_node=2, ring_attn_size=1, ds_tensor_parallel_size=1)
    batches = module.balance_experiences(_experiences(5), args)
    return sorted(float(r) for b in batches for r in b.info["reward"])


def test_balance_experiences_keeps_every_sample(patched_openrlhf):
    from openrlhf.trainer.ppo_utils import replay_buffer

    assert _balanced_rewards(replay_buffer) == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_pristine_0_9_3_balance_drops_samples_that_do_not_divide_by_the_ranks(pristine_openrlhf_root,
                                                                               patched_openrlhf):
    pristine = _load(pristine_openrlhf_root / "openrlhf" / "trainer" / "ppo_utils" / "replay_buffer.py",
                     "pristine_replay_buffer")
    kept = _balanced_rewards(pristine)
    assert len(kept) < 5, kept

