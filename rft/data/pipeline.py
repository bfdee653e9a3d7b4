"""NuminaMath-1.5 to RL pool, SFT sets, eval and probe sets: the filter stages and seeded splits (the eval
sets: `rft.data.eval_sets`).

Problem identity everywhere is `rft.data.problems.problem_hash` (MD5 of the normalized problem). Every file is
written atomically, the data files first, then REPORT.md/report.json, then MANIFEST.json.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from rft.data.config import DataConfig, Inputs, choose, seeded_rng
from rft.data.eval_sets import EvalProblem, EvalSets, build_eval_sets, eval_row
from rft.data.integer_answer import parse_integer_answer
from rft.data.problems import problem_hash
from rft.data.solutions import SFT_OK, sft_output
from rft.data.sources import BatchStream, DataError, Source, num_rows, parse_source
from rft.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, sha256_file
from rft.prompts import build_input

NUMINA_COLUMNS = {
    name: (name,)
    for name in (
        "problem",
        "solution",
        "answer",
        "question_type",
        "problem_is_valid",
        "solution_is_valid",
        "source",
    )
}
MANIFEST = "MANIFEST.json"
REPORT_MD = "REPORT.md"
REPORT_JSON = "report.json"
EXAMPLES_PER_STAGE = 3
PROBE_ID_MODES = ("in-pool", "held-out")


@dataclass(frozen=True)
class FileSpec:
    """One output file: its role ("train", "sft", "dev", "eval", "probe"), exact row keys and datasource."""

    name: str
    role: str
    keys: tuple[str, ...]
    datasource: str | None = None
    subset_of: str | None = None


RL_KEYS = ("input", "label")
SFT_KEYS = ("input", "output", "label")
EVAL_KEYS = ("input", "label", "datasource")
FILES = {
    f.name: f
    for f in (
        FileSpec("sft_rl_pool.jsonl", "train", RL_KEYS),
        FileSpec("sft_rl_pool_400.jsonl", "train", RL_KEYS, subset_of="sft_rl_pool.jsonl"),
        FileSpec("sft_train.jsonl", "sft", SFT_KEYS),
        FileSpec("sft_dev.jsonl", "dev", SFT_KEYS),
        FileSpec("probe_set_200.jsonl", "probe", EVAL_KEYS, "probe_id"),
        FileSpec("aime_eval.jsonl", "eval", EVAL_KEYS, "aime"),
        FileSpec("probe_set_200_ood.jsonl", "eval", (*EVAL_KEYS, "origin"), "probe_ood"),
        FileSpec("gsm8k_rl_pool.jsonl", "train", RL_KEYS),
        FileSpec("gsm8k_eval.jsonl", "eval", EVAL_KEYS, "gsm8k"),
    )
}
GSM8K_FILES = ("gsm8k_rl_pool.jsonl", "gsm8k_eval.jsonl")
TRAINING_ROLES = ("train", "sft")


@dataclass
class StageStat:
    """Rows entering one filter stage, rows it removed, and a few removed rows as examples."""

    key: str
    number: str
    title: str
    rows_in: int = 0
    removed: int = 0
    examples: list[dict] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        """Rows that passed this stage."""
        return self.rows_in - self.removed


@dataclass
class NuminaResult:
    """Rows that passed every stage (in input order) and the per-stage statistics."""

    table: pa.Table
    labels: list[str]
    hashes: list[str]
    rows: list[int]
    stages: list[StageStat]
    total_rows: int
    source_mix: Counter


def _snippet(text: str | None, n: int = 90) -> str:
    """One-line preview of a problem for the report."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


def _stages(cfg: DataConfig) -> list[StageStat]:
    """The filter stages in the order they run."""
    return [
        StageStat("question_type", "1", 'question_type == "math-word-problem"'),
        StageStat("integer_answer", "2", "clean integer answer"),
        StageStat("contest_source", "3a", f"exclude sources {', '.join(cfg.exclude_sources) or '(none)'}"),
        StageStat("eval_overlap", "3b", "drop problems equal (by hash) to an eval/probe problem"),
        StageStat(
            "valid",
            "4",
            'problem_is_valid == solution_is_valid == "Yes"' + ("" if cfg.require_valid else " (off)"),
        ),
        StageStat("dedup", "5", "deduplicate by problem hash (first wins)"),
        StageStat(
            "length",
            "6",
            f"problem >= {cfg.min_problem_chars} chars, solution >= {cfg.min_solution_chars} chars",
        ),
    ]


class _BatchFilter:
    """Applies the stages to one record batch, tracking the surviving row indices and their labels/hashes."""

    def __init__(self, batch: pa.RecordBatch, cols: dict[str, str], where: str, offset: int):
        self.batch, self.offset, self.where = batch, offset, where
        self.cols = {k: self._column(v, k) for k, v in cols.items()}
        self.alive = np.arange(batch.num_rows)
        self.labels = np.empty(0, dtype=object)
        self.hashes = np.empty(0, dtype=object)

    def _column(self, name: str, logical: str) -> pa.Array:
        arr = self.batch.column(self.batch.schema.get_field_index(name))
        if not (
            pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_null(arr.type)
        ):
            raise DataError(
                f"{self.where}: column {name!r} has type {arr.type}, expected strings ({logical})"
            )
        if pa.types.is_null(arr.type):
            return arr.cast(pa.string())
        return arr

    def take(self, logical: str) -> pa.Array:
        """The alive rows of a column, nulls as empty strings."""
        return pc.fill_null(self.cols[logical].take(pa.array(self.alive)), "")

    def apply(self, stage: StageStat, keep: np.ndarray, detail) -> None:
        """Drop the rows where `keep` is False, counting them and keeping a few as examples."""
        stage.rows_in += len(self.alive)
        removed = np.flatnonzero(~keep)
        stage.removed += len(removed)
        for j in removed[: max(0, EXAMPLES_PER_STAGE - len(stage.examples))]:
            i = int(self.alive[j])
            stage.examples.append(
                {
                    "row": self.offset + i,
                    "problem": _snippet(self.cols["problem"][i].as_py()),
                    "detail": detail(j, i),
                }
            )
        self.alive = self.alive[keep]
        if len(self.labels):
            self.labels = self.labels[keep]
        if len(self.hashes):
            self.hashes = self.hashes[keep]

    def value(self, logical: str, i: int) -> str | None:
        """One raw cell, for example details."""
        return self.cols[logical][i].as_py()


def _run_stages(
    f: _BatchFilter, stages: list[StageStat], cfg: DataConfig, blocked: dict[str, str], seen: dict[str, int]
) -> None:
    """Apply the seven stages, in order, to one batch; `seen` carries dedup state across batches."""
    s_type, s_int, s_src, s_eval, s_valid, s_dedup, s_len = stages
    f.apply(
        s_type,
        pc.equal(f.take("question_type"), "math-word-problem").to_numpy(zero_copy_only=False),
        lambda j, i: f"question_type={f.value('question_type', i)!r}",
    )

    f.labels = np.array([parse_integer_answer(a) for a in f.take("answer").to_pylist()], dtype=object)
    f.apply(
        s_int,
        np.array([p is not None for p in f.labels], dtype=bool),
        lambda j, i: f"answer={f.value('answer', i)!r}",
    )

    excluded = pa.array(list(cfg.exclude_sources), pa.string())
    f.apply(
        s_src,
        ~pc.is_in(f.take("source"), value_set=excluded).to_numpy(zero_copy_only=False),
        lambda j, i: f"source={f.value('source', i)!r}",
    )

    f.hashes = np.array([problem_hash(p) for p in f.take("problem").to_pylist()], dtype=object)
    hashes = f.hashes
    f.apply(
        s_eval,
        np.array([h not in blocked for h in hashes], dtype=bool),
        lambda j, i: f"same problem as the {blocked[hashes[j]]} eval input (source={f.value('source', i)!r})",
    )

    if cfg.require_valid:
        valid = pc.and_(
            pc.equal(f.take("problem_is_valid"), "Yes"), pc.equal(f.take("solution_is_valid"), "Yes")
        )
        valid_keep = valid.to_numpy(zero_copy_only=False)
    else:
        valid_keep = np.ones(len(f.alive), dtype=bool)
    f.apply(
        s_valid,
        valid_keep,
        lambda j, i: (
            f"problem_is_valid={f.value('problem_is_valid', i)!r}, "
            f"solution_is_valid={f.value('solution_is_valid', i)!r}"
        ),
    )

    dup_of: dict[int, int] = {}
    dedup_keep = np.ones(len(f.alive), dtype=bool)
    for j, (h, i) in enumerate(zip(f.hashes, f.alive, strict=True)):
        if h in seen:
            dedup_keep[j] = False
            dup_of[j] = seen[h]
        else:
            seen[h] = f.offset + int(i)
    f.apply(s_dedup, dedup_keep, lambda j, i: f"duplicate of row {dup_of[j]}")

    plen = pc.utf8_length(pc.utf8_trim_whitespace(f.take("problem"))).to_numpy(zero_copy_only=False)
    slen = pc.utf8_length(pc.utf8_trim_whitespace(f.take("solution"))).to_numpy(zero_copy_only=False)
    f.apply(
        s_len,
        (plen >= cfg.min_problem_chars) & (slen >= cfg.min_solution_chars),
        lambda j, i: f"problem {plen[j]} chars, solution {slen[j]} chars",
    )


def filter_numina(source: Source, cfg: DataConfig, blocked: dict[str, str]) -> NuminaResult:
    """Stream the NuminaMath shards through the stages; `blocked` maps eval problem hashes to their origin."""
    stream = BatchStream(source, NUMINA_COLUMNS, cfg.batch_size)
    files = stream.files()
    stages = _stages(cfg)
    seen: dict[str, int] = {}
    kept: list[pa.Table] = []
    labels: list[str] = []
    hashes: list[str] = []
    rows: list[int] = []
    mix: Counter = Counter()
    offset = 0
    with tqdm(total=num_rows(files), unit="row", desc="filter NuminaMath", disable=not cfg.progress) as bar:
        for where, batch, cols in stream.iter_batches(files):
            f = _BatchFilter(batch, cols, where, offset)
            for vc in pc.value_counts(pc.fill_null(f.cols["source"], "")).to_pylist():
                mix[vc["values"]] += vc["counts"]
            _run_stages(f, stages, cfg, blocked, seen)
            kept.append(
                pa.table({k: f.take(k).cast(pa.large_string()) for k in ("problem", "solution", "source")})
            )
            labels.extend(f.labels.tolist())
            hashes.extend(f.hashes.tolist())
            rows.extend((offset + f.alive).tolist())
            offset += batch.num_rows
            bar.update(batch.num_rows)
    table = (
        pa.concat_tables(kept)
        if kept
        else pa.table({k: pa.array([], pa.large_string()) for k in ("problem", "solution", "source")})
    )
    return NuminaResult(table, labels, hashes, rows, stages, offset, mix)


# ----------------------------------------------------------------------------------------- splits


@dataclass
class Splits:
    """Row indices into NuminaResult for each Numina-derived file, SFT outputs, and SFT selection counts."""

    pool: list[int]
    pool_subset: list[int]
    sft_train: list[int]
    sft_dev: list[int]
    probe: list[int]
    outputs: dict[int, str]
    sft_reasons: Counter


def make_splits(numina: NuminaResult, cfg: DataConfig) -> Splits:
    """Seeded, disjoint-by-hash splits of the eligible rows (rows are already unique by hash)."""
    n = len(numina.labels)
    order = seeded_rng(cfg.seed, 0).permutation(n).tolist()
    held_out = cfg.probe_id_mode == "held-out"
    probe = order[: cfg.probe_size] if held_out else []
    rest_order = order[len(probe) :]
    if held_out and len(probe) < cfg.probe_size:
        raise DataError(f"NuminaMath: only {n} eligible rows, --probe-size asks for {cfg.probe_size}")
    solutions = numina.table.column("solution")
    need_sft = cfg.sft_size + cfg.sft_dev_size
    sft_dev: list[int] = []
    sft_train: list[int] = []
    outputs: dict[int, str] = {}
    reasons: Counter = Counter()
    pool: list[int] = []
    for i in rest_order:
        if len(sft_dev) + len(sft_train) < need_sft:
            out, why = sft_output(solutions[i].as_py(), numina.labels[i])
            reasons[why] += 1
            if why == SFT_OK:
                (sft_dev if len(sft_dev) < cfg.sft_dev_size else sft_train).append(i)
                outputs[i] = out
                continue
        if len(pool) < cfg.rl_pool_size:
            pool.append(i)
        elif len(sft_dev) + len(sft_train) >= need_sft:
            break
    if len(sft_dev) + len(sft_train) < need_sft:
        raise DataError(
            f"NuminaMath: only {len(sft_dev) + len(sft_train)} eligible rows end in a \\boxed{{label}}, "
            f"--sft-size + --sft-dev-size ask for {need_sft}"
        )
    if len(pool) < cfg.rl_pool_size:
        raise DataError(
            f"NuminaMath: {n} eligible rows leave {len(pool)} for the pool after the SFT/probe splits, "
            f"--rl-pool-size asks for {cfg.rl_pool_size}"
        )
    if not held_out:
        probe = [
            pool[j] for j in choose(len(pool), cfg.probe_size, seeded_rng(cfg.seed, 5), "RL pool", "--probe-size")
        ]
    probe_set = set(probe)
    others = [i for i in pool if i not in probe_set]
    subset = [
        others[j]
        for j in choose(
            len(others), cfg.pool_subset_size, seeded_rng(cfg.seed, 6), "RL pool", "--pool-subset-size"
        )
    ]
    return Splits(pool, subset, sft_train, sft_dev, probe, outputs, reasons)


def gsm8k_pool(
    candidates: list[EvalProblem], numina_hashes: set[str], cfg: DataConfig
) -> tuple[list[EvalProblem], int]:
    """GSM8K train problems not in any Numina split, seeded order; returns (pool, overlap removed)."""
    fresh = [p for p in candidates if p.hash not in numina_hashes]
    order = seeded_rng(cfg.seed, 4).permutation(len(fresh)).tolist()
    k = cfg.gsm8k_pool_size or len(fresh)
    if k > len(fresh):
        raise DataError(
            f"GSM8K train: only {len(fresh)} eligible problems, but --gsm8k-pool-size asks for {k}"
        )
    return [fresh[i] for i in order[:k]], len(candidates) - len(fresh)


# ----------------------------------------------------------------------------------------- rows and output


def rl_row(problem: str, label: str) -> dict:
    """An RL pool row."""
    return {"input": build_input(problem), "label": label}


@dataclass
class PrepareResult:
    """Everything the report needs: inputs, stages, eval sets, splits and the rows of every file."""

    inputs: Inputs
    cfg: DataConfig
    numina: NuminaResult
    evals: EvalSets
    splits: Splits
    gsm8k_overlap: int
    files: dict[str, list[dict]]


def prepare(inputs: Inputs, cfg: DataConfig) -> PrepareResult:
    """Run the whole pipeline in memory (nothing is written)."""
    if cfg.probe_id_mode not in PROBE_ID_MODES:
        raise DataError(
            f"--probe-id-mode must be one of {', '.join(PROBE_ID_MODES)}, got {cfg.probe_id_mode!r}"
        )
    evals = build_eval_sets(inputs, cfg)
    numina = filter_numina(parse_source(inputs.numina), cfg, evals.blocked)
    splits = make_splits(numina, cfg)
    problems = numina.table.column("problem")

    def rows(idx: list[int]) -> list[dict]:
        return [rl_row(problems[i].as_py(), numina.labels[i]) for i in idx]

    def sft_rows(idx: list[int]) -> list[dict]:
        return [
            {
                "input": build_input(problems[i].as_py()),
                "output": splits.outputs[i],
                "label": numina.labels[i],
            }
            for i in idx
        ]

    files = {
        "sft_rl_pool.jsonl": rows(splits.pool),
        "sft_rl_pool_400.jsonl": rows(splits.pool_subset),
        "sft_train.jsonl": sft_rows(splits.sft_train),
        "sft_dev.jsonl": sft_rows(splits.sft_dev),
        "probe_set_200.jsonl": [{**r, "datasource": "probe_id"} for r in rows(splits.probe)],
        "aime_eval.jsonl": [eval_row(p, "aime") for p in evals.aime],
        "probe_set_200_ood.jsonl": [eval_row(p, "probe_ood", origin=True) for p in evals.ood],
    }
    overlap = 0
    if inputs.gsm8k_train and inputs.gsm8k_test:
        used = {numina.hashes[i] for i in (*splits.pool, *splits.sft_train, *splits.sft_dev, *splits.probe)}
        gpool, overlap = gsm8k_pool(evals.gsm8k_train, used, cfg)
        files["gsm8k_rl_pool.jsonl"] = [rl_row(p.problem, p.label) for p in gpool]
        files["gsm8k_eval.jsonl"] = [eval_row(p, "gsm8k") for p in evals.gsm8k_eval]
    return PrepareResult(inputs, cfg, numina, evals, splits, overlap, files)


BAND_FILE = "sft_rl_pool_band.jsonl"
"""The RL pool problems inside a pass-rate band (rft.data.pass_band)."""


def file_specs(probe_id_mode: str) -> dict[str, FileSpec]:
    """FILES with the ID probe marked as a subset of the pool when it is drawn from inside it."""
    specs = dict(FILES)
    # the pass-rate band pool (prepare_sft_data.py --pass-rates), written only when asked for
    specs[BAND_FILE] = FileSpec(BAND_FILE, "train", RL_KEYS, subset_of="sft_rl_pool.jsonl")
    if probe_id_mode == "in-pool":
        base = FILES["probe_set_200.jsonl"]
        specs[base.name] = FileSpec(base.name, base.role, base.keys, base.datasource, "sft_rl_pool.jsonl")
    return specs


def write_outputs(result: PrepareResult, out_dir: Path, report_md: str, report: dict) -> dict:
    """Write every file atomically (data, then reports, then MANIFEST.json); returns the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = file_specs(result.cfg.probe_id_mode)
    entries = {}
    for name, rows in result.files.items():
        atomic_write_jsonl(out_dir / name, rows)
        spec = specs[name]
        entries[name] = {
            "rows": len(rows),
            "sha256": sha256_file(out_dir / name),
            "role": spec.role,
            "keys": list(spec.keys),
            "datasource": spec.datasource,
            "subset_of": spec.subset_of,
        }
    atomic_write_text(out_dir / REPORT_MD, report_md)
    atomic_write_json(out_dir / REPORT_JSON, report)
    manifest = {
        "version": 1,
        "seed": result.cfg.seed,
        "probe_id_mode": result.cfg.probe_id_mode,
        "files": entries,
        "reports": {n: sha256_file(out_dir / n) for n in (REPORT_MD, REPORT_JSON)},
    }
    atomic_write_json(out_dir / MANIFEST, manifest)
    return manifest
