"""LoRA adapters -> merged full models, cached under a merged-models directory by content hash.

A model path is either a full model directory (config.json) or a PEFT LoRA adapter directory
(adapter_config.json). Adapters are merged into their base with PEFT; the merged model is written to a
temporary directory and renamed into place, so a crash never leaves a half-merged model that a later
run trusts. The cache key hashes the adapter's bytes, so a changed adapter is never served stale.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path

from rft.gptoss.mxfp4 import MXFP4, SKIPPED_WEIGHT_COPIES, quant_method
from rft.io import atomic_write_json, pid_alive, sha256_file

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MANIFEST = "merge_manifest.json"
DEFAULT_MERGED_DIR = "/mnt/scratch/merged_models"


class MergeError(RuntimeError):
    """A model or adapter that cannot be resolved or merged; the message names the path."""


def default_merged_dir() -> Path:
    """The merged-models cache: $RFT_MERGED_DIR, else /mnt/scratch/merged_models."""
    return Path(os.environ.get("RFT_MERGED_DIR") or DEFAULT_MERGED_DIR)


def is_adapter_dir(path: str | os.PathLike) -> bool:
    """True when `path` is a directory holding a PEFT adapter_config.json."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def read_adapter_config(adapter_dir: str | os.PathLike) -> dict:
    """The adapter's adapter_config.json as a dict; a bad file raises MergeError naming it."""
    path = Path(adapter_dir) / ADAPTER_CONFIG
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise MergeError(f"{path}: cannot read the adapter config ({e})") from None


def adapter_weights_file(adapter_dir: str | os.PathLike) -> Path:
    """The adapter's weight file (safetensors preferred, .bin as OpenRLHF writes under ZeRO-3)."""
    for name in ADAPTER_WEIGHTS:
        if (Path(adapter_dir) / name).is_file():
            return Path(adapter_dir) / name
    raise MergeError(
        f"{adapter_dir}: LoRA adapter has no weights file (expected one of {', '.join(ADAPTER_WEIGHTS)})"
    )


def resolve_base(adapter_dir: str | os.PathLike, base: str | None = None, download: bool = False) -> Path:
    """The base model directory: `base` if given, else the adapter's base_model_name_or_path.

    A name that is not a local directory is looked up in the local Hugging Face cache, and fetched from the
    Hub only with `download` (eval_posthoc.py --download).
    """
    source = "--base" if base else f"{Path(adapter_dir) / ADAPTER_CONFIG} base_model_name_or_path"
    name = base or read_adapter_config(adapter_dir).get("base_model_name_or_path")
    if not name:
        raise MergeError(
            f"{Path(adapter_dir) / ADAPTER_CONFIG}: no base_model_name_or_path; pass --base PATH"
        )
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise MergeError(f"base model {path} (from {source}) has no config.json")
        return path.resolve()
    cached = hf_cache_dir(str(name), download)
    if cached is None:
        raise MergeError(
            f"base model {name!r} (from {source}) not found: not a local directory and not in the "
            f"local Hugging Face cache{_download_hint(str(name))}; or pass --base PATH"
        )
    return cached


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def hub_cache() -> str:
    """Where Hugging Face keeps (and would download) models: $HF_HUB_CACHE, from HF_HOME."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _download_hint(name: str) -> str:
    """The opt-in sentence of a not-found message, for names that are Hub ids."""
    if not HUB_ID.fullmatch(name):
        return ""
    return (
        f" ({hub_cache()}); nothing is downloaded unless asked: pass --download to fetch it into that cache "
        "(10-60 GB for a base model: keep HF_HOME on the scratch disk, see spare.toml [env])"
    )


def hf_cache_dir(name: str, download: bool = False) -> Path | None:
    """The local Hugging Face cache snapshot of repo id `name`, or None; with `download`, a Hub id missing
    from the cache is fetched into it (a failed download is a MergeError naming the cause)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:
        if not (download and HUB_ID.fullmatch(name)):
            return None
    print(f"downloading {name} into {hub_cache()} (--download)", file=sys.stderr, flush=True)
    try:
        return Path(snapshot_download(name, ignore_patterns=SKIPPED_WEIGHT_COPIES))
    except Exception as e:
        raise MergeError(f"--download: fetching {name!r} into {hub_cache()} failed: {e}") from None


def adapter_hash(adapter_dir: str | os.PathLike) -> str:
    """SHA-256 over every file at the adapter dir's top level: config, weights and a saved tokenizer.

    A tokenizer saved with the adapter travels into the merged model (`tokenizer_source`), so it is part
    of what decides the merge result.
    """
    adapter_weights_file(adapter_dir)  # no weights: a clear error, not a hash of an incomplete adapter
    h = hashlib.sha256()
    for path in sorted(p for p in Path(adapter_dir).iterdir() if p.is_file()):
        h.update(f"{path.name}:{sha256_file(path)}\n".encode())
    return h.hexdigest()


def merge_key(adapter_dir: str | os.PathLike, base_dir: Path, dtype: str, dequantize: bool) -> str:
    """Cache key: adapter content, base identity (path + config bytes), dtype, dequantize, library versions."""
    import peft
    import transformers

    parts = {
        "adapter": adapter_hash(adapter_dir),
        "base": str(base_dir),
        "base_config": sha256_file(base_dir / "config.json"),
        "dtype": dtype,
        "dequantize": dequantize,
        "peft": peft.__version__,
        "transformers": transformers.__version__,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def base_load_kwargs(base_dir: Path, dtype: str, dequantize: bool) -> dict:
    """from_pretrained kwargs for the base: plain dtype, or MXFP4 dequantized to `dtype`; else refuse."""
    import torch

    kwargs: dict = {"dtype": getattr(torch, dtype), "low_cpu_mem_usage": True}
    method = quant_method(base_dir)
    if method is None:
        return kwargs
    if method != MXFP4:
        raise MergeError(f"base model {base_dir} is quantized ({method}); merging needs an unquantized base")
    if not dequantize:
        raise MergeError(
            f"base model {base_dir} is MXFP4-quantized and --no-dequantize was given: a LoRA delta cannot be "
            "added to MXFP4 weights; drop --no-dequantize to merge into a dequantized copy"
        )
    try:
        from transformers import Mxfp4Config
    except ImportError:
        raise MergeError(
            f"base model {base_dir} is MXFP4-quantized but this transformers has no Mxfp4Config to dequantize it"
        ) from None
    kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
    return kwargs


def tokenizer_source(adapter_dir: Path, base_dir: Path) -> Path:
    """Where the merged model's tokenizer comes from: the adapter dir if training saved one, else the base."""
    return adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base_dir


def merge_into(adapter_dir: Path, base_dir: Path, out_dir: Path, dtype: str, dequantize: bool) -> None:
    """Merge the adapter into the base with PEFT and save model, tokenizer and generation config."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(base_dir, **base_load_kwargs(base_dir, dtype, dequantize))
    merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload(safe_merge=True)
    leftover = [k for k in merged.state_dict() if "lora_" in k or "base_layer" in k]
    if leftover:
        raise MergeError(f"{adapter_dir}: merge left LoRA parameters behind, e.g. {leftover[0]}")
    if hasattr(merged.config, "quantization_config"):
        del merged.config.quantization_config  # the saved weights are plain `dtype`, not MXFP4
    merged.save_pretrained(out_dir, safe_serialization=True, max_shard_size="5GB")
    AutoTokenizer.from_pretrained(tokenizer_source(adapter_dir, base_dir)).save_pretrained(out_dir)
    if (base_dir / "generation_config.json").is_file():  # eos ids vLLM stops on (gpt-oss: <|return|>)
        shutil.copyfile(base_dir / "generation_config.json", out_dir / "generation_config.json")
    if quant_method(out_dir) is not None:
        raise MergeError(f"{out_dir}: merged config still declares quantization; refusing to publish it")


TMP_PREFIX = ".tmp-"


def tmp_merge_dir(cache: Path, key: str) -> Path:
    """A fresh temporary merge dir in `cache`, named for its key, pid, time and host (see sweep_stale_merges)."""
    return cache / f"{TMP_PREFIX}{key[:24]}-{os.getpid()}-{time.time_ns()}-{socket.gethostname()}"


def sweep_stale_merges(cache: Path) -> list[Path]:
    """Delete temporary merge dirs left by merges on this host whose process is gone; returns them.

    A killed merge (OOM, Ctrl-C, node reboot) cannot clean up after itself, and each one can hold a full
    bf16 model (~40 GB for 20b, ~230 GB for 120b). Dirs of live processes or other hosts are left alone.
    """
    removed = []
    for d in cache.glob(f"{TMP_PREFIX}*"):
        parts = d.name[len(TMP_PREFIX) :].split("-", 3)
        if len(parts) != 4 or not parts[1].isdigit() or parts[3] != socket.gethostname():
            continue
        if not pid_alive(int(parts[1])):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def check_model_path(path: str | os.PathLike, download: bool = False) -> Path:
    """The model or LoRA adapter directory `path` names (a local dir, or a Hugging Face id in the local cache,
    e.g. openai/gpt-oss-20b, fetched into it only with `download`); else MergeError naming it."""
    src = Path(path).expanduser()
    if not src.is_dir():
        cached = hf_cache_dir(str(path), download) if not src.is_absolute() else None
        if cached is None:
            raise MergeError(
                f"model path {src} does not exist or is not a directory (nor a model in the local "
                f"Hugging Face cache{_download_hint(str(path))})"
            )
        src = cached
    if not is_adapter_dir(src) and not (src / "config.json").is_file():
        raise MergeError(
            f"{src}: neither a model directory (config.json) nor a LoRA adapter ({ADAPTER_CONFIG})"
        )
    return src


def model_identity(path: str | os.PathLike, base: str | None = None, download: bool = False) -> dict:
    """A cheap identity of a model argument (no merge): adapter content hash + base, or dir + config/weights stats."""
    src = check_model_path(path, download)
    if is_adapter_dir(src):
        return {"adapter_sha256": adapter_hash(src), "base": str(resolve_base(src, base, download))}
    weights = sorted([f.name, f.stat().st_size, int(f.stat().st_mtime)] for f in src.glob("*.safetensors"))
    return {
        "model_dir": str(src.resolve()),
        "config_sha256": sha256_file(src / "config.json"),
        "weights": weights,
    }


def resolve_model(
    path: str | os.PathLike,
    *,
    base: str | None = None,
    merged_dir: str | os.PathLike | None = None,
    dtype: str = "bfloat16",
    dequantize: bool = True,
    download: bool = False,
) -> tuple[Path, dict]:
    """A loadable model directory for `path` and a record of how it was obtained (merged, cache hit)."""
    src = check_model_path(path, download)
    if not is_adapter_dir(src):
        return src.resolve(), {"kind": "model", "path": str(src.resolve())}
    adapter_weights_file(src)
    base_dir = resolve_base(src, base, download)
    base_load_kwargs(base_dir, dtype, dequantize)  # refuse unsupported quantization before any heavy work
    key = merge_key(src, base_dir, dtype, dequantize)
    cache = Path(merged_dir) if merged_dir else default_merged_dir()
    final = cache / key[:24]
    record = {
        "kind": "adapter",
        "adapter": str(src.resolve()),
        "adapter_sha256": adapter_hash(src),
        "base": str(base_dir),
        "merged": str(final),
        "merge_key": key,
        "dtype": dtype,
    }
    if (final / MANIFEST).is_file():
        return final, {**record, "cache_hit": True}
    cache.mkdir(parents=True, exist_ok=True)
    sweep_stale_merges(cache)
    tmp = tmp_merge_dir(cache, key)
    try:
        merge_into(src.resolve(), base_dir, tmp, dtype, dequantize)
        atomic_write_json(tmp / MANIFEST, {**record, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / MANIFEST).is_file():  # not a concurrent merge that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final, {**record, "cache_hit": False}
