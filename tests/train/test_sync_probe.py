"""rft/train/sync_probe.py: the probe's log-prob reading from a vLLM RequestOutput."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rft.train.sync_probe import prompt_logprobs


def test_prompt_logprobs_reads_the_prompt_tokens_own_logprobs():
    lp = SimpleNamespace
    out = SimpleNamespace(prompt_token_ids=[5, 7, 9],
                          prompt_logprobs=[None, {7: lp(logprob=-1.0), 3: lp(logprob=-0.1)}, {9: lp(logprob=-3.0)}])
    assert prompt_logprobs(out) == [-1.0, -3.0]


def test_a_probe_without_prompt_logprobs_is_an_error():
    out = SimpleNamespace(prompt_token_ids=[5, 7], prompt_logprobs=[None, None])
    with pytest.raises(ValueError, match="without prompt log-probs"):
        prompt_logprobs(out)
