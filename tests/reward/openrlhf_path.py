"""A reward file through OpenRLHF's real call path in a subprocess: the SingleTurnAgentExecutor loads it by file path
and the experience maker turns its result into tensors; only the vLLM engine is a stand-in (a fixed completion)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rft.fixtures.patched_openrlhf import stub_env
from rft.provenance import REPO_ROOT as ROOT

# argv: repository root, reward file, JSON list of [prompt, response, label, finish_reason]
SCRIPT = r"""
import asyncio, json, sys, types
sys.path.insert(0, sys.argv[1])
from rft.fixtures.tiny_model import build_tokenizer
from openrlhf.utils.agent import SingleTurnAgentExecutor
from openrlhf.trainer.ppo_utils.experience_maker import SamplesGenerator

tok = build_tokenizer()
cases = json.loads(sys.argv[3])

class Engine:  # stand-in for a vLLM engine (no GPU): returns a fixed completion
    def __init__(self, text, finish_reason):
        self.text, self.finish_reason = text, finish_reason
    async def generate(self, prompt_token_ids, sampling_params):
        ids = tok(self.text, add_special_tokens=False)["input_ids"]
        out = types.SimpleNamespace(token_ids=ids, text=self.text, finish_reason=self.finish_reason, logprobs=None)
        return types.SimpleNamespace(outputs=[out])

executor = SingleTurnAgentExecutor(remote_rm_url=sys.argv[2])
sg = SamplesGenerator(strategy=types.SimpleNamespace(args=types.SimpleNamespace()), prompts_dataloader=None,
                      eval_dataloader=None, tokenizer=tok, vllm_engines=[])
results = []
for prompt, response, label, finish in cases:
    params = types.SimpleNamespace(max_tokens=512, logprobs=None)
    out = asyncio.run(executor.execute(prompt, label, params, 4096, tok, Engine(response, finish)))
    exp = sg._process_response_into_experience(out, prompt_max_len=1024, max_new_tokens=1024)
    results.append({"reward": exp.rewards.tolist(), "score": exp.scores.tolist(),
                    "info": {k: v.tolist() for k, v in exp.info.items()}})
print("RESULTS " + json.dumps(results))
"""


def run_through_openrlhf(reward_file: Path, cases: list[tuple[str, str, str, str]]) -> list[dict]:
    """Per (prompt, response, label, finish_reason) case, the experience's reward, score and info as lists."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT), str(reward_file), json.dumps(cases)],
        capture_output=True, text=True, env=stub_env(), cwd=str(ROOT), timeout=300,
    )  # fmt: skip
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert line, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(line[0][len("RESULTS ") :])
