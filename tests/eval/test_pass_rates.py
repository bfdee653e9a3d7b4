"""eval_posthoc.py --pass-rates: per-problem pass rates over a pool, chunked, cached and resumable (HF backend)."""

from __future__ import annotations

import datetime
import json

import pytest

from rft.data.problems import problem_hash
from rft.eval import cli
from rft.eval.pass_rates import ROW_KEYS, PassRateConfig, compute_pass_rates
from rft.fixtures.tiny_model import build_tiny_model
from rft.io import atomic_write_jsonl, read_jsonl
from rft.prompts import build_input


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("pr")
    model = build_tiny_model(root / "m", train_steps=30)
    pool = root / "pool.jsonl"
    atomic_write_jsonl(pool, [{"input": build_input(f"Problem {i}: what is {i} + 0?"), "label": str(i % 10)}
                              for i in range(5)])  # fmt: skip
    return model, pool


def backend_counting(calls: list):
    from rft.eval.generation import HFBackend

    def factory(model_dir):
        calls.append(str(model_dir))
        return HFBackend(model_dir, device="cpu", batch_size=8)

    return factory


def test_chunks_are_cached_and_a_lost_chunk_is_redone(tiny, tmp_path):
    model, pool = tiny
    cfg = PassRateConfig(samples=4, max_new_tokens=8, chunk_size=2)
    calls: list = []
    out = compute_pass_rates(model, pool, tmp_path / "pr.jsonl", run_dir=tmp_path / "run", cfg=cfg,
                             backend_factory=backend_counting(calls), log=lambda _: None)  # fmt: skip
    rows = read_jsonl(out)
    assert len(calls) == 1 and len(rows) == 5 and all(tuple(r) == ROW_KEYS for r in rows)
    assert [r["problem_hash"] for r in rows] == [problem_hash(x["input"]) for x in read_jsonl(pool)]
    assert all(r["n"] == 4 and 0 <= r["correct"] <= 4 and r["pass_rate"] == r["correct"] / 4 for r in rows)
    chunks = sorted((tmp_path / "run" / "pass_rates").glob("*/chunk_*.jsonl"))
    assert len(chunks) == 3  # 2 + 2 + 1 problems
    # everything cached: no model load at all
    compute_pass_rates(model, pool, tmp_path / "again.jsonl", run_dir=tmp_path / "run", cfg=cfg,
                       backend_factory=backend_counting(calls), log=lambda _: None)  # fmt: skip
    assert len(calls) == 1 and read_jsonl(tmp_path / "again.jsonl") == rows
    # an interrupted job: the missing chunk is redone, with the same seeds, the others reused
    chunks[1].unlink()
    compute_pass_rates(model, pool, tmp_path / "resumed.jsonl", run_dir=tmp_path / "run", cfg=cfg,
                       backend_factory=backend_counting(calls), log=lambda _: None)  # fmt: skip
    assert len(calls) == 2 and read_jsonl(tmp_path / "resumed.jsonl") == rows
    # other settings: another cache entry
    compute_pass_rates(model, pool, tmp_path / "t.jsonl", run_dir=tmp_path / "run",
                       cfg=PassRateConfig(samples=2, max_new_tokens=8, chunk_size=2),
                       backend_factory=backend_counting(calls), log=lambda _: None)  # fmt: skip
    assert len(list((tmp_path / "run" / "pass_rates").iterdir())) == 2


def test_the_cli_writes_the_pass_rate_file(tiny, tmp_path, capsys):
    model, pool = tiny
    out = tmp_path / "pass_rates.jsonl"
    rc = cli.main(["--model", f"base={model}", "--dataset", str(pool), "--pass-rates", str(out),
                            "--pass-rate-samples", "2", "--pass-rate-max-tokens", "8", "--backend", "hf",
                            "--run-dir", str(tmp_path / "run"), "--device", "cpu"])  # fmt: skip
    assert rc == 0 and len(read_jsonl(out)) == 5
    settings = json.loads(next((tmp_path / "run" / "pass_rates").glob("*/settings.json")).read_text())
    assert settings["samples"] == 2 and settings["temperature"] == 1.0 and settings["max_new_tokens"] == 8
    assert cli.main(["--model", f"a={model}", "--model", f"b={model}", "--dataset", str(pool),
                              "--pass-rates", str(out)]) == 2  # fmt: skip
    assert "exactly one --model" in capsys.readouterr().err
    # --chat-date today: the template's real date, which the cache records; a malformed date: exit 2, no model
    today = cli.main(["--model", f"base={model}", "--dataset", str(pool), "--pass-rates", str(out),
                               "--pass-rate-samples", "1", "--pass-rate-max-tokens", "4", "--backend", "hf",
                               "--run-dir", str(tmp_path / "today"), "--device", "cpu", "--chat-date", "today"])  # fmt: skip
    settings = json.loads(next((tmp_path / "today" / "pass_rates").glob("*/settings.json")).read_text())
    assert today == 0 and settings["chat_date"] == datetime.date.today().isoformat()
    assert cli.main(["--model", f"base={model}", "--dataset", str(pool), "--pass-rates", str(out),
                              "--chat-date", "24/11/2026", "--backend", "hf"]) == 2  # fmt: skip
    assert "--chat-date '24/11/2026'" in capsys.readouterr().err
