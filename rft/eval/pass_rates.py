"""Per-problem pass rates of one model over a prompt pool: the RL pool's difficulty for `prepare_sft_data.py
--pass-rates`.

Every problem gets `samples` responses with the training prompt (the chat template as OpenRLHF renders it) and
the training sampling settings (temperature 1.0, top_p 1.0, the launch scripts' 4096 new tokens), graded by the
exact-match reward. Problems are done in chunks; each finished chunk is written atomically under
`<run-dir>/pass_rates/<settings key>/`, so an interrupted multi-hour job resumes at its first missing chunk
and a re-run with the same model, pool and settings reuses every chunk (the cache).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rft.data.problems import problem_hash
from rft.eval.generation import Request
from rft.eval.modes import Problem, load_problems, sample_seed
from rft.io import atomic_write_json, atomic_write_jsonl, read_jsonl, sha256_file
from rft.prompts import DEFAULT_CHAT_DATE, DEFAULT_REASONING_EFFORT, chat_template_kwargs, encode_prompt

ROW_KEYS = ("problem_hash", "n", "correct", "pass_rate", "truncated", "mean_tokens")
"""Keys of one pass-rate row (JSONL, one row per problem, in pool order)."""


@dataclass(frozen=True)
class PassRateConfig:
    """What decides the pass rates (recorded with the cache and compared on resume)."""

    samples: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 4096
    chunk_size: int = 500
    seed: int = 1234
    reasoning_effort: str | None = DEFAULT_REASONING_EFFORT
    chat_date: str = DEFAULT_CHAT_DATE

    def key(self, model: dict, pool_sha256: str, limit: int | None) -> str:
        """The cache key: model identity, pool content and every setting."""
        blob = json.dumps({"model": model, "pool": pool_sha256, "limit": limit, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def problem_row(problem: Problem, correct: Sequence[bool], finished: Sequence[bool], tokens: Sequence[int]) -> dict:
    """One pass-rate row from a problem's graded samples."""
    n = len(correct)
    return {
        "problem_hash": problem_hash(problem.input),
        "n": n,
        "correct": int(sum(correct)),
        "pass_rate": sum(correct) / n,
        "truncated": int(sum(not f for f in finished)),
        "mean_tokens": sum(tokens) / n,
    }


def run_chunk(backend, problems: Sequence[Problem], first: int, cfg: PassRateConfig, grade_fn: Callable) -> list[dict]:
    """Generate and grade one chunk (`first` = index of its first problem in the pool, for the seeds)."""
    kwargs = chat_template_kwargs(cfg.reasoning_effort, cfg.chat_date)
    requests = []
    for i, p in enumerate(problems):
        ids = tuple(encode_prompt(backend.tokenizer, p.input, **kwargs))
        requests += [Request(p.pid, s, ids, cfg.temperature, cfg.top_p, cfg.max_new_tokens,
                             sample_seed(cfg.seed, first + i, s, cfg.samples)) for s in range(cfg.samples)]  # fmt: skip
    completions = backend.generate(requests, desc=f"pass rates {first}-{first + len(problems) - 1}")
    rows = []
    for i, p in enumerate(problems):
        comps = completions[i * cfg.samples : (i + 1) * cfg.samples]
        correct = [bool(grade_fn(c.text, p.label, finished=c.finished).correct) for c in comps]
        rows.append(problem_row(p, correct, [c.finished for c in comps], [len(c.token_ids) for c in comps]))
    return rows


def compute_pass_rates(
    model_path: str | Path,
    pool: str | Path,
    out: str | Path,
    *,
    run_dir: str | Path,
    cfg: PassRateConfig,
    backend_factory: Callable[[Path], object],
    resolve: Callable[[str | Path], Path] | None = None,
    identity: dict | None = None,
    limit: int | None = None,
    grade_fn: Callable | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Pass rates of the model over the pool, chunk by chunk (finished chunks reused), merged into `out`."""
    if grade_fn is None:
        from rft.reward.exact_match import grade as grade_fn
    if cfg.samples < 1 or cfg.chunk_size < 1:
        raise ValueError("--pass-rate-samples and --chunk-size must be positive")
    problems = load_problems(pool, limit)
    key = cfg.key(identity or {"path": str(model_path)}, sha256_file(pool), limit)
    cache = Path(run_dir) / "pass_rates" / key
    cache.mkdir(parents=True, exist_ok=True)
    atomic_write_json(cache / "settings.json", {"model": str(model_path), "pool": str(pool), "limit": limit,
                                                **asdict(cfg)})  # fmt: skip
    starts = list(range(0, len(problems), cfg.chunk_size))
    path_of = {s: cache / f"chunk_{s // cfg.chunk_size:05d}.jsonl" for s in starts}
    pending = [s for s in starts if not path_of[s].is_file()]
    log(f"pass rates: {len(problems)} problems x {cfg.samples} samples in {len(starts)} chunk(s), "
        f"{len(starts) - len(pending)} cached in {cache}")
    if pending:
        model_dir = resolve(model_path) if resolve else Path(model_path)
        backend = backend_factory(model_dir)
        try:
            for s in pending:
                rows = run_chunk(backend, problems[s : s + cfg.chunk_size], s, cfg, grade_fn)
                atomic_write_jsonl(path_of[s], rows)
                solved = sum(r["correct"] for r in rows) / (len(rows) * cfg.samples)
                log(f"pass rates: chunk {s // cfg.chunk_size + 1}/{len(starts)} done ({solved:.1%} of samples right)")
        finally:
            backend.close()
    merged = [row for s in starts for row in read_jsonl(path_of[s])]
    atomic_write_jsonl(Path(out), merged)
    log(f"pass rates: wrote {len(merged)} rows to {out}")
    return Path(out)
