"""JSONL metrics, sample and spike logs written by the patched OpenRLHF trainer (read by the monitor).

Files (each line one JSON object; all writers are no-ops when their directory/path is unset):

- ``$METRICS_LOG_DIR/training_metrics.jsonl``: one line per global step from
  ``BasePPOTrainer.save_logs_and_checkpoints`` (sync and async trainers): ``global_step`` (int, the rollout
  step), ``timestamp`` (Unix seconds) and every numeric metric under OpenRLHF's own key; non-finite values are
  written as null. Built-in eval results arrive as a second line for the same ``global_step`` holding
  ``eval_<datasource>_pass<n>`` / ``eval_<datasource>_pass1`` (OpenRLHF 0.9.3's names) and ``"event": "eval"``;
  a fresh run with an eval set also logs the base model's eval at ``global_step`` 0 (``RFT_EVAL_AT_START=0``
  skips it).
- ``$SAMPLES_LOG_DIR/samples_step<N>.jsonl`` every ``$SAMPLES_LOG_EVERY`` steps (default 10; N = global
  step): one line per rollout sample: ``global_step``, ``prompt``, ``label``, ``response``, ``reward`` and the
  sample's numeric info values (``response_length``, our reward extra_logs, ...).
- ``$SPIKE_LOG_PATH`` (default ``$METRICS_LOG_DIR/spike_log.jsonl``): one line per optimizer step whose
  grad norm exceeded ``SPIKE_GRAD_NORM`` (50), written by actor rank 0: ``global_step``, ``optimizer_step``,
  ``grad_norm``, the ratio statistics of that accumulation window and ``prompt_hashes`` (sha1 of the
  prompt token ids of every sample in the window, all ranks).

``KNOWN_KEYS`` lists the metric keys the patched trainer can write (a run writes a subset: e.g. ``vllm_kl``
only with --enable_vllm_is_correction, ``correctness`` etc. only if the reward function returns them).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from rft.io import atomic_write_jsonl
from rft.reward.blend import JUDGE_LOG_KEYS
from rft.reward.exact_match import EXTRA_LOG_KEYS
from rft.train.allgather_probe import ALLGATHER_KEYS
from rft.train.group_waste import WASTE_KEYS
from rft.train.loss_diag import DIAG_KEYS
from rft.train.mismatch import BIN_KEYS as MISMATCH_BIN_KEYS
from rft.train.mismatch import KEYS as MISMATCH_KEYS
from rft.train.numbers import scalar
from rft.train.prompt_filter import STEP_KEYS as PROMPT_FILTER_KEYS
from rft.train.robust_rewards import BATCH_KEYS
from rft.train.step_timer import KEYS as STEP_TIME_KEYS
from rft.train.sync_probe import PROBE_KEYS
from rft.train.token_stats import KEYS as TOKEN_STAT_KEYS

METRICS_FILE = "training_metrics.jsonl"
SPIKE_FILE = "spike_log.jsonl"
SPIKE_GRAD_NORM = 50.0
DEFAULT_SAMPLES_EVERY = 10

KNOWN_KEYS = (
    # bookkeeping
    "global_step",
    "timestamp",
    "event",
    # OpenRLHF 0.9.3 actor status (ppo_actor.training_step + experience info means)
    "policy_loss",
    "actor_lr",
    "ppo_clip_ratio",
    "ppo_kl",
    "vllm_kl",
    "kl",
    "logprobs_diff",
    "entropy_loss",
    "reward",
    "score",
    "return",
    "response_length",
    "total_length",
    "response_clip_ratio",
    "truncated",
    "group_reward_std",
    "dynamic_filtering_pass_rate",
    "critic_loss",
    "values",
    "critic_lr",
    # rft: reward function extra_logs (rft.reward.exact_match) and sanitising counters (rft.train.robust_rewards)
    *EXTRA_LOG_KEYS,
    "reward_defaulted",
    "extra_logs_defaulted",
    # rft: the judge reward's extra_logs (rft.reward.blend)
    *JUDGE_LOG_KEYS,
    # rft: batch reward distribution and judge cost/failures (rft.train.robust_rewards.batch_reward_stats_of)
    *BATCH_KEYS,
    # rft: uniform-reward groups and the rollouts they cost (rft.train.group_waste)
    *WASTE_KEYS,
    # rft: online filtering and the prompt history (rft.train.prompt_filter)
    *PROMPT_FILTER_KEYS,
    # rft: loss diagnostics (rft.train.loss_diag) and the optimizer's grad norm
    *DIAG_KEYS,
    "grad_norm",
    "grad_norm_steps",
    # rft: advantage and per-token entropy statistics over every action token of a step (rft.train.token_stats)
    *TOKEN_STAT_KEYS,
    # rft: the rollout/trainer gap over every action token of a step (rft.train.mismatch)
    *MISMATCH_KEYS,
    *MISMATCH_BIN_KEYS,
    # rft: vLLM log-probs that were non-finite, replaced by the trainer's (experience_maker.patch), per sample
    "rollout_logprob_repaired",
    # rft: LoRA weight sync into vLLM
    "lora_sync_seconds",
    "lora_sync_bytes",
    "lora_sync_params",
    "lora_sync_modules",
    "lora_sync_expected_modules",
    "lora_sync_skipped",
    # rft: where the step's wall time goes, tokens/s, response-length tail (rft.train.step_timer)
    *STEP_TIME_KEYS,
    # rft: --async_train: how many optimizer steps the rollouts lag the policy (the async queue size; ppo_trainer_async.patch)
    "rollout_lag",
    # rft: the smoke's sync probe, trainer vs engine (rft.train.sync_probe)
    *PROBE_KEYS,
    # rft: the smoke's all-gather across the actor ranks (rft.train.allgather_probe)
    *ALLGATHER_KEYS,
)
"""Metric keys the patched trainer may write; eval keys (`eval_*`) come on top of these."""


def metrics_log_dir() -> Path | None:
    """$METRICS_LOG_DIR, or None when metrics logging is off."""
    value = os.environ.get("METRICS_LOG_DIR")
    return Path(value) if value else None


def samples_log_dir() -> Path | None:
    """$SAMPLES_LOG_DIR, or None when sample dumps are off."""
    value = os.environ.get("SAMPLES_LOG_DIR")
    return Path(value) if value else None


def samples_every() -> int:
    """Dump samples every $SAMPLES_LOG_EVERY global steps (default 10); a bad value is a clear error."""
    raw = os.environ.get("SAMPLES_LOG_EVERY", str(DEFAULT_SAMPLES_EVERY))
    try:
        every = int(raw)
    except ValueError:
        raise ValueError(f"SAMPLES_LOG_EVERY must be a positive integer, got {raw!r}") from None
    if every <= 0:
        raise ValueError(f"SAMPLES_LOG_EVERY must be a positive integer, got {raw!r}")
    return every


def eval_at_start() -> bool:
    """Whether the patched trainer runs the built-in eval before the first step ($RFT_EVAL_AT_START, default 1)."""
    raw = os.environ.get("RFT_EVAL_AT_START", "1").strip()
    if raw not in ("0", "1"):
        raise ValueError(f"RFT_EVAL_AT_START must be 0 or 1, got {raw!r}")
    return raw == "1"


def spike_log_path() -> Path | None:
    """$SPIKE_LOG_PATH, else $METRICS_LOG_DIR/spike_log.jsonl, else None."""
    value = os.environ.get("SPIKE_LOG_PATH")
    if value:
        return Path(value)
    base = metrics_log_dir()
    return base / SPIKE_FILE if base else None


def as_number(value: Any) -> float | int | None | bool:
    """A JSON-ready number for a metric value (None if non-finite); False if the value is not one number."""
    number = scalar(value)
    if number is None:
        return False
    return number if isinstance(number, int) or math.isfinite(number) else None


def numeric_metrics(status: Mapping[str, Any]) -> dict[str, float | int | None]:
    """The numeric entries of a status dict (tensors/numpy scalars to Python numbers, others dropped)."""
    out: dict[str, float | int | None] = {}
    for key, value in status.items():
        if isinstance(value, (str, bytes, list, tuple, dict)) or value is None:
            continue
        number = as_number(value)
        if number is not False:
            out[str(key)] = number
    return out


def _append_line(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line with a single write (a reader never sees half a line from us)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()


# metrics files this process has already written to (see drop_rows_from)
_continued: set[Path] = set()


def drop_rows_from(path: Path, global_step: int) -> int:
    """Rewrite `path` (atomically) without its rows of global_step >= `global_step`; returns how many went.

    A run resumed from the checkpoint of step k starts again at k + 1: the rows an interrupted run logged
    after its last checkpoint are dropped, so the file has every step exactly once.
    """
    if not path.exists():
        return 0
    keep, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a torn last line of a killed run
            dropped += 1
            continue
        if isinstance(row, dict) and int(row.get("global_step", 0)) >= global_step:
            dropped += 1
        else:
            keep.append(row)
    if dropped:
        atomic_write_jsonl(path, keep)
    return dropped


def append_metrics(
    global_step: int, status: Mapping[str, Any], *, event: str | None = None, log_dir: Path | None = None
) -> Path | None:
    """Append the step's numeric metrics to training_metrics.jsonl; returns the path (None when off).

    The first append of a process first drops rows at or after its step (left by an interrupted run).
    """
    log_dir = log_dir or metrics_log_dir()
    if log_dir is None:
        return None
    record: dict[str, Any] = {"global_step": int(global_step), "timestamp": round(time.time(), 3)}
    if event:
        record["event"] = event
    metrics = numeric_metrics(status)
    metrics.pop("global_step", None)
    record.update(metrics)
    path = Path(log_dir) / METRICS_FILE
    if path not in _continued:
        _continued.add(path)
        drop_rows_from(path, int(global_step))
    _append_line(path, record)
    return path


def prompt_token_hashes(
    sequences: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor
) -> list[str]:
    """sha1 (16 hex) of each sample's prompt token ids: the unpadded tokens before the first action."""
    if sequences.dim() != 2 or action_mask.dim() != 2 or sequences.shape[0] != action_mask.shape[0]:
        return []  # packed samples: no per-sample rows
    offset = sequences.shape[1] - action_mask.shape[1]  # action_mask is aligned with sequences[:, offset:]
    hashes = []
    for seq, att, act in zip(sequences.cpu(), attention_mask.cpu(), action_mask.cpu(), strict=True):
        positions = torch.nonzero(act, as_tuple=False)
        end = int(positions[0]) + offset if len(positions) else seq.shape[0]
        ids = seq[:end][att[:end].bool()].to(torch.int64)
        hashes.append(hashlib.sha1(ids.numpy().tobytes()).hexdigest()[:16])
    return hashes


def append_spike(record: Mapping[str, Any], path: Path | None = None) -> Path | None:
    """Append one spike record to the spike log; returns the path (None when off)."""
    path = path or spike_log_path()
    if path is None:
        return None
    clean = {k: (v if isinstance(v, (str, list)) else as_number(v)) for k, v in record.items()}
    _append_line(Path(path), {"timestamp": round(time.time(), 3), **clean})
    return Path(path)


def sample_records(global_step: int, experiences: Iterable[Any], tokenizer) -> list[dict[str, Any]]:
    """One dict per rollout sample of OpenRLHF `Experience` micro-batches (text decoded, info as numbers)."""
    rows: list[dict[str, Any]] = []
    for exp in experiences:
        seqs, act = exp.sequences, exp.action_mask
        offset = seqs.shape[1] - act.shape[1]
        prompts = list(exp.prompts or [])
        labels = list(exp.labels or [])
        for i in range(seqs.shape[0]):
            response_ids = seqs[i, offset:][act[i].bool()].tolist()
            row: dict[str, Any] = {
                "global_step": int(global_step),
                "prompt": prompts[i] if i < len(prompts) else None,
                "label": labels[i] if i < len(labels) else None,
                "response": tokenizer.decode(response_ids, skip_special_tokens=False),
            }
            if exp.rewards is not None:
                row["reward"] = as_number(exp.rewards.reshape(-1)[i]) if exp.rewards.numel() > i else None
            for key, value in exp.info.items():
                if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == seqs.shape[0]:
                    number = as_number(value[i].reshape(-1)[0])
                    if number is not False:
                        row[key] = number
            rows.append(row)
    return rows


def write_samples(
    global_step: int,
    experiences: Iterable[Any],
    tokenizer,
    *,
    log_dir: Path | None = None,
    every: int | None = None,
) -> Path | None:
    """Write samples_step<N>.jsonl atomically when N is a multiple of the interval; returns the path."""
    log_dir = log_dir or samples_log_dir()
    every = every or samples_every()
    if log_dir is None or global_step % every != 0:
        return None
    path = Path(log_dir) / f"samples_step{int(global_step)}.jsonl"
    atomic_write_jsonl(path, sample_records(global_step, experiences, tokenizer))
    return path
