"""Post-hoc evaluation: the three labelled modes, per-cell runs with resume, summary and markdown report.

A cell is one (model, dataset, mode). Each finished cell is written atomically to
`<run_dir>/cells/<model>/<dataset>/<mode>/` (samples.jsonl, then cell.json as the completion mark), so a
crash loses no finished cell, and a re-run skips cells whose recorded settings match unless forced.
Modes are never conflated: every figure is stored and printed under its mode's name.

Per-problem "solved" (used for fixed/broken flips): greedy_pass@1 -> the greedy answer is correct;
sampling_pass@8 -> the maj@8 answer is correct; nondet_proxy_pass@8 -> any of the 8 greedy passes is.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rft.data.problems import problem_hash
from rft.eval.generation import Completion, Request
from rft.eval.passk import (
    answers_agree,
    bootstrap_ci,
    distinct_answers,
    maj_correct,
    mean_at_n,
    pass_at_k,
)
from rft.eval.report import pct, summarize, write_reports
from rft.io import atomic_write_json, atomic_write_jsonl, iter_jsonl_lines, read_jsonl, sha256_file
from rft.prompts import DEFAULT_CHAT_DATE, DEFAULT_REASONING_EFFORT, chat_template_kwargs, encode_prompt


@dataclass(frozen=True)
class Mode:
    """An eval mode: its label, sampling temperature, samples per problem, and headline metric."""

    name: str
    temperature: float
    samples: int
    headline: str


MODES: dict[str, Mode] = {
    "greedy_pass@1": Mode("greedy_pass@1", 0.0, 1, "pass@1"),
    "sampling_pass@8": Mode("sampling_pass@8", 0.6, 8, "mean@8"),
    "nondet_proxy_pass@8": Mode("nondet_proxy_pass@8", 0.0, 8, "pass@8"),
}
SAMPLING_TOP_P = 1.0  # plain temperature sampling, the DeepSeek-R1 T=0.6 convention
DATASETS = {"aime": "aime_eval.jsonl", "id": "probe_set_200.jsonl", "ood": "probe_set_200_ood.jsonl"}
_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class Problem:
    """One eval row: a stable id, the `input` text (problem + instruction) and the label."""

    pid: str
    input: str
    label: str
    datasource: str = "default"


@dataclass
class EvalConfig:
    """Everything that decides a cell's outputs (recorded in every cell and compared on resume)."""

    max_new_tokens: int = 8192
    seed: int = 1234
    reasoning_effort: str | None = DEFAULT_REASONING_EFFORT
    chat_date: str = DEFAULT_CHAT_DATE  # YYYY-MM-DD, or "today" (the real clock, as training does)
    backend: str = "vllm"
    limit: int | None = None
    n_boot: int = 2000

    def resolved_chat_date(self) -> str:
        """The date the chat template writes: chat_date, with "today" replaced by today's date."""
        return datetime.now().strftime("%Y-%m-%d") if self.chat_date == "today" else self.chat_date

    def template_kwargs(self) -> dict:
        """Chat-template kwargs pinning reasoning effort and date; ValueError on a malformed date."""
        try:
            return chat_template_kwargs(self.reasoning_effort, self.resolved_chat_date())
        except ValueError:
            raise ValueError(f"--chat-date {self.chat_date!r}: expected YYYY-MM-DD or 'today'") from None

    def fingerprint(self) -> dict:
        """The settings a finished cell must match to be reused."""
        return {
            "max_new_tokens": self.max_new_tokens,
            "seed": self.seed,
            "reasoning_effort": self.reasoning_effort,
            "chat_date": self.resolved_chat_date(),
            "backend": self.backend,
            "limit": self.limit,
            "sampling_top_p": SAMPLING_TOP_P,
        }


def parse_named(spec: str, flag: str) -> tuple[str, str]:
    """Split "NAME=PATH"; the name must be a plain token (it becomes a directory name)."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise ValueError(f"{flag} {spec!r}: expected NAME=PATH")
    if not _NAME.match(name):
        raise ValueError(f"{flag} {spec!r}: name may only hold letters, digits and _.+-")
    return name, path


def resolve_dataset(spec: str, data_dir: str | Path = "data") -> tuple[str, Path]:
    """(name, path) for a dataset given as aime/id/ood, NAME=PATH, or a JSONL path (name = file stem)."""
    if spec in DATASETS:
        name, path = spec, Path(data_dir) / DATASETS[spec]
    elif "=" in spec:
        name, raw = parse_named(spec, "--dataset")
        path = Path(raw)
    else:
        path = Path(spec)
        name = re.sub(r"[^A-Za-z0-9_.+-]", "_", path.stem)
    if not path.is_file():
        raise ValueError(f"--dataset {spec}: {path} not found")
    return name, path


def load_problems(path: str | Path, limit: int | None = None) -> list[Problem]:
    """Eval rows of a JSONL file; a line without `input` or `label` raises ValueError naming file:line."""
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for lineno, row in iter_jsonl_lines(path):
        for key in ("input", "label"):
            if row.get(key) in (None, ""):
                raise ValueError(f"{path}:{lineno}: row has no {key!r}")
        pid = str(row.get("id") or problem_hash(row["input"])[:12])
        seen[pid] = seen.get(pid, 0) + 1
        if seen[pid] > 1:
            pid = f"{pid}~{seen[pid]}"
        problems.append(Problem(pid, row["input"], str(row["label"]), str(row.get("datasource", "default"))))
        if limit and len(problems) >= limit:
            break
    if not problems:
        raise ValueError(f"{path}: no eval rows")
    return problems


def sample_seed(seed: int, problem_index: int, sample_index: int, samples: int) -> int:
    """The seed of one sample: distinct per (problem, sample), fixed by the run seed."""
    return seed + problem_index * samples + sample_index


def plan_passes(
    mode: Mode, problems: Sequence[Problem], prompt_ids: dict[str, list[int]], cfg: EvalConfig
) -> list[list[Request]]:
    """The generate calls of one cell; nondet_proxy runs 8 greedy passes, each in its own shuffled order."""

    def req(i: int, p: Problem, s: int) -> Request:
        return Request(
            p.pid,
            s,
            tuple(prompt_ids[p.pid]),
            mode.temperature,
            SAMPLING_TOP_P if mode.temperature > 0 else 1.0,
            cfg.max_new_tokens,
            sample_seed(cfg.seed, i, s, mode.samples),
        )

    indexed = list(enumerate(problems))
    if mode.temperature > 0 or mode.samples == 1:
        return [[req(i, p, s) for i, p in indexed for s in range(mode.samples)]]
    passes = []
    for s in range(mode.samples):
        order = indexed[:]
        random.Random(cfg.seed + s).shuffle(order)
        passes.append([req(i, p, s) for i, p in order])
    return passes


def sample_row(req: Request, comp: Completion, label: str, grade_fn: Callable) -> dict:
    """One per-sample record, graded by the project's reward module."""
    g = grade_fn(comp.text, label, finished=comp.finished)
    return {
        "prompt_id": req.prompt_id,
        "sample_index": req.sample_index,
        "seed": req.seed if req.temperature > 0 else None,
        "temperature": req.temperature,
        "label": label,
        "response": comp.text,
        "response_tokens": len(comp.token_ids),
        "finished": comp.finished,
        "answer": g.answer,
        "correct": bool(g.correct),
        "method": g.method,
        "has_answer": bool(g.has_answer),
        "has_boxed": bool(g.has_boxed),
        "boxed_in_final": bool(g.boxed_in_final),
        "truncated": bool(g.truncated),
    }


def _figure(values: Sequence[float], cfg: EvalConfig) -> dict:
    """A mean over problems with its 95% bootstrap interval and the per-problem values it came from."""
    lo, hi = bootstrap_ci(values, n_boot=cfg.n_boot, seed=cfg.seed)
    return {"value": sum(values) / len(values), "ci95": [lo, hi], "per_problem": list(values)}


def cell_metrics(mode: Mode, problems: Sequence[Problem], rows: Sequence[dict], cfg: EvalConfig) -> dict:
    """Every figure of a cell (each with a bootstrap CI over problems), rates, and per-problem solved flags."""
    by_pid: dict[str, list[dict]] = {p.pid: [] for p in problems}
    for r in rows:
        by_pid[r["prompt_id"]].append(r)
    correct, answers = [], []
    for p in problems:
        got = sorted(by_pid[p.pid], key=lambda r: r["sample_index"])
        if len(got) != mode.samples:
            raise ValueError(f"{mode.name}: problem {p.pid} has {len(got)} samples, expected {mode.samples}")
        correct.append([r["correct"] for r in got])
        answers.append([r["answer"] for r in got])
    n = mode.samples
    figures: dict[str, dict] = {}
    if mode.name == "greedy_pass@1":
        figures["pass@1"] = _figure([float(c[0]) for c in correct], cfg)
        solved = [c[0] for c in correct]
    elif mode.name == "sampling_pass@8":
        figures["mean@8"] = _figure([mean_at_n(c) for c in correct], cfg)
        for k in (1, n):
            figures[f"pass@{k}"] = _figure([pass_at_k(n, sum(c), k) for c in correct], cfg)
        solved = [maj_correct(a, c) for a, c in zip(answers, correct, strict=True)]
        figures["maj@8"] = _figure([float(s) for s in solved], cfg)
    else:
        figures["pass@8"] = _figure([pass_at_k(n, sum(c), n) for c in correct], cfg)
        figures["mean@8"] = _figure([mean_at_n(c) for c in correct], cfg)
        figures["agreement"] = _figure([float(answers_agree(a)) for a in answers], cfg)
        figures["distinct_answers"] = _figure([float(distinct_answers(a)) for a in answers], cfg)
        solved = [any(c) for c in correct]
    total = len(rows)
    return {
        "mode": mode.name,
        "headline": mode.headline,
        "n_problems": len(problems),
        "n_samples": total,
        "problem_ids": [p.pid for p in problems],
        "figures": figures,
        "solved": [bool(s) for s in solved],
        "rates": {
            "boxed": sum(r["has_boxed"] for r in rows) / total,
            "boxed_in_final": sum(r["boxed_in_final"] for r in rows) / total,
            "truncated": sum(r["truncated"] for r in rows) / total,
            "no_answer": sum(not r["has_answer"] for r in rows) / total,
            "response_tokens_mean": sum(r["response_tokens"] for r in rows) / total,
        },
    }


def prompts_digest(prompt_ids: dict[str, list[int]]) -> str:
    """SHA-256 over the prompt token ids (what the model actually saw)."""
    return hashlib.sha256(json.dumps(prompt_ids, sort_keys=True).encode()).hexdigest()


class RunDir:
    """Layout of one run directory: cells/<model>/<dataset>/<mode>/{samples.jsonl,cell.json}, reports."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def cell_dir(self, model: str, dataset: str, mode: str) -> Path:
        return self.root / "cells" / model / dataset / mode

    def load_cell(self, model: str, dataset: str, mode: str) -> dict | None:
        """The finished cell's record, or None if it never finished."""
        path = self.cell_dir(model, dataset, mode) / "cell.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    def save_cell(self, model: str, dataset: str, mode: str, rows: list[dict], record: dict) -> None:
        """Samples first, then cell.json: cell.json exists only for a complete cell."""
        d = self.cell_dir(model, dataset, mode)
        atomic_write_jsonl(d / "samples.jsonl", rows)
        atomic_write_json(d / "cell.json", record)

    def samples(self, model: str, dataset: str, mode: str) -> list[dict]:
        return read_jsonl(self.cell_dir(model, dataset, mode) / "samples.jsonl")


def cell_key(model_identity: dict, dataset_sha: str, mode: str, cfg: EvalConfig) -> dict:
    """What a finished cell must match to be skipped: model identity, dataset bytes, mode, settings."""
    key = {
        "model": model_identity,
        "dataset_sha256": dataset_sha,
        "mode": mode,
        "settings": cfg.fingerprint(),
    }
    return json.loads(json.dumps(key))  # the form it has after a round trip through cell.json


def run_cell(
    backend,
    mode: Mode,
    problems: Sequence[Problem],
    prompt_ids: dict[str, list[int]],
    cfg: EvalConfig,
    grade_fn: Callable,
    desc: str,
) -> list[dict]:
    """Generate and grade one cell; rows sorted by problem order then sample index."""
    label = {p.pid: p.label for p in problems}
    order = {p.pid: i for i, p in enumerate(problems)}
    rows = []
    for j, batch in enumerate(plan_passes(mode, problems, prompt_ids, cfg)):
        tag = f"{desc} pass {j + 1}" if mode.name == "nondet_proxy_pass@8" else desc
        for req, comp in zip(batch, backend.generate(batch, desc=tag), strict=True):
            rows.append(sample_row(req, comp, label[req.prompt_id], grade_fn))
    rows.sort(key=lambda r: (order[r["prompt_id"]], r["sample_index"]))
    return rows


@dataclass
class CellSpec:
    """One requested cell."""

    model: str
    dataset: str
    mode: str


def evaluate_model(
    run: RunDir,
    model: str,
    model_dir: Path,
    backend,
    pending: Sequence[CellSpec],
    datasets: dict[str, tuple[Path, list[Problem]]],
    keys: dict[tuple, dict],
    cfg: EvalConfig,
    grade_fn: Callable,
    log: Callable[[str], None],
) -> None:
    """Run the pending cells of one model, saving each as soon as it is done."""
    prompt_cache: dict[str, dict[str, list[int]]] = {}
    for cell in pending:
        path, problems = datasets[cell.dataset]
        if cell.dataset not in prompt_cache:
            prompt_cache[cell.dataset] = {
                p.pid: encode_prompt(backend.tokenizer, p.input, **cfg.template_kwargs()) for p in problems
            }
        prompt_ids = prompt_cache[cell.dataset]
        mode = MODES[cell.mode]
        t0 = time.time()
        rows = run_cell(
            backend, mode, problems, prompt_ids, cfg, grade_fn, f"{model}/{cell.dataset}/{mode.name}"
        )
        metrics = cell_metrics(mode, problems, rows, cfg)
        record = {
            **metrics,
            "model": model,
            "model_dir": str(model_dir),
            "dataset": cell.dataset,
            "dataset_path": str(path),
            "key": keys[(cell.model, cell.dataset, cell.mode)],
            "prompts_sha256": prompts_digest(prompt_ids),
            "seconds": round(time.time() - t0, 2),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        run.save_cell(model, cell.dataset, mode.name, rows, record)
        h = metrics["figures"][mode.headline]
        log(
            f"[{mode.name}] {model} on {cell.dataset}: {mode.headline} = {pct(h['value'])} "
            f"[{pct(h['ci95'][0])}, {pct(h['ci95'][1])}]  ({metrics['n_problems']} problems)"
        )


def environment() -> dict:
    """Library versions and accelerator that produced the numbers (vLLM looked up, never imported)."""
    from importlib.metadata import PackageNotFoundError, version

    env: dict = {}
    for pkg in ("torch", "transformers", "peft", "vllm"):
        try:
            env[pkg] = version(pkg)
        except PackageNotFoundError:
            env[pkg] = None
    import torch

    env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return env


def run_evaluation(
    models: Sequence[tuple[str, str]],
    datasets: Sequence[str],
    modes: Sequence[str],
    *,
    run_dir: str | Path,
    cfg: EvalConfig,
    backend_factory: Callable[[Path], object],
    baseline: str | None = None,
    base: str | None = None,
    merged_dir: str | Path | None = None,
    merge_dtype: str = "bfloat16",
    dequantize: bool = True,
    force: bool = False,
    data_dir: str | Path = "data",
    grade_fn: Callable | None = None,
    log: Callable[[str], None] = print,
    download: bool = False,
) -> dict:
    """Evaluate every (model, dataset, mode) cell, skipping finished ones, then write summary + markdown."""
    from rft.eval.merge import model_identity, resolve_model

    if grade_fn is None:
        from rft.reward.exact_match import grade as grade_fn
    names = [m for m, _ in models]
    if len(set(names)) != len(names):
        raise ValueError(f"--model names must be unique, got {names}")
    baseline = baseline or names[0]
    if baseline not in names:
        raise ValueError(f"--baseline {baseline!r} is not one of the --model names {names}")
    cfg.template_kwargs()  # a bad --chat-date fails before any work
    for m in modes:
        if m not in MODES:
            raise ValueError(f"--mode {m!r}: expected one of {', '.join(MODES)}")
    # validate every input before any generation: bad data fails in seconds, not after an hour
    loaded: dict[str, tuple[Path, list[Problem]]] = {}
    for spec in datasets:
        name, path = resolve_dataset(spec, data_dir)
        if name in loaded:
            raise ValueError(f"--dataset {spec}: dataset name {name!r} given twice")
        loaded[name] = (path, load_problems(path, cfg.limit))
    dataset_sha = {name: sha256_file(path) for name, (path, _) in loaded.items()}
    identities = {name: model_identity(path, base, download) for name, path in models}
    run = RunDir(run_dir)
    keys = {
        (m, d, mo): cell_key(identities[m], dataset_sha[d], mo, cfg)
        for m in names
        for d in loaded
        for mo in modes
    }
    merges: dict[str, dict] = {}
    for name, path in models:
        pending = []
        for d in loaded:
            for mo in modes:
                done = run.load_cell(name, d, mo)
                if force or done is None or done.get("key") != keys[(name, d, mo)]:
                    pending.append(CellSpec(name, d, mo))
                    if done is not None and not force:
                        log(
                            f"[{mo}] {name} on {d}: settings or model changed since the finished cell; re-running"
                        )
                else:
                    log(f"[{mo}] {name} on {d}: finished earlier, skipped (use --force to redo)")
        if not pending:
            continue
        model_dir, record = resolve_model(
            path, base=base, merged_dir=merged_dir, dtype=merge_dtype, dequantize=dequantize, download=download
        )
        merges[name] = record
        if record["kind"] == "adapter":
            state = "cache hit" if record["cache_hit"] else "merged"
            log(f"{name}: adapter {record['adapter']} -> {model_dir} ({state})")
        backend = backend_factory(model_dir)
        try:
            evaluate_model(run, name, model_dir, backend, pending, loaded, keys, cfg, grade_fn, log)
        finally:
            backend.close()
    cells = [run.load_cell(m, d, mo) for m in names for d in loaded for mo in modes]
    summary = summarize(cells, baseline, settings=cfg.fingerprint(), n_boot=cfg.n_boot, seed=cfg.seed)
    summary["environment"] = environment()
    summary["merges"] = merges
    md = write_reports(run.root, summary, f"Post-hoc eval: {', '.join(names)} on {', '.join(loaded)}")
    log(f"wrote {run.root / 'summary.json'} and {md}")
    return summary
