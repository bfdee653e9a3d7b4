"""MXFP4 (gpt-oss) checkpoints: detection, dequantized loading under ZeRO-3, and offline conversion to bf16.

gpt-oss stores only its MoE expert weights in MXFP4: `<proj>_blocks` (uint8, two FP4 e2m1 codes per byte, low
nibble first, 32 values per block) and `<proj>_scales` (uint8 power-of-two exponents, bias 127). Every FP4 value
times a power of two in bf16's range is exactly a bf16 number, so dequantizing to bf16 is lossless.

Two routes to a trainable bf16 model:
- in process (`load_dequantized`, called by our actor.patch): rank 0 dequantizes on CPU, every rank builds the
  model under `zero.Init` and rank 0's values are copied in one parameter at a time. Host RAM: rank 0 holds one
  full bf16 copy (~218 GiB for 120b) while loading; the other ranks hold their shard.
- offline (`convert_checkpoint`, `convert_mxfp4.py`): stream the checkpoint tensor by tensor into a bf16 copy,
  then train from it through the stock zero.Init path (per-rank host RAM = one shard), vLLM keeps the original.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rft.io import atomic_write_json, sha256_file

MXFP4 = "mxfp4"
# FP4 e2m1 code -> value (codes 8-15 are the negatives of 0-7); the OCP Microscaling (MX) format.
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
SCALE_BIAS = 127
BLOCKS, SCALES = "_blocks", "_scales"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5")
INDEX_NAME = "model.safetensors.index.json"
PROVENANCE_NAME = "rft_mxfp4_conversion.json"


class NotMxfp4Error(ValueError):
    """The checkpoint is not MXFP4-quantized (nothing to dequantize)."""


class ConversionError(RuntimeError):
    """The converted checkpoint would not equal the MXFP4 original exactly."""


# ---------------------------------------------------------------- detection


def _quantization_config(path_or_config) -> object | None:
    if isinstance(path_or_config, Mapping):
        return path_or_config.get("quantization_config")
    if isinstance(path_or_config, str | os.PathLike):
        cfg = Path(path_or_config) / "config.json"
        if cfg.is_file():
            return json.loads(cfg.read_text()).get("quantization_config")
        from transformers import AutoConfig

        path_or_config = AutoConfig.from_pretrained(str(path_or_config), trust_remote_code=True)
    return getattr(path_or_config, "quantization_config", None)


def quant_method(path_or_config) -> str | None:
    """`quantization_config.quant_method` of a checkpoint dir, hub id, config object or config dict (or None)."""
    qc = _quantization_config(path_or_config)
    if qc is None:
        return None
    method = qc.get("quant_method") if isinstance(qc, Mapping) else getattr(qc, "quant_method", None)
    return str(getattr(method, "value", method)).lower() if method is not None else None


def is_mxfp4_checkpoint(path_or_config) -> bool:
    """True when the checkpoint's quantization_config says quant_method == "mxfp4"."""
    return quant_method(path_or_config) == MXFP4


# ---------------------------------------------------------------- dequantization


@functools.cache
def _byte_table(dtype: torch.dtype) -> torch.Tensor:
    """[256, 2]: the two FP4 values a byte holds, low nibble first."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    byte = torch.arange(256)
    return torch.stack((lut[byte & 0x0F], lut[byte >> 4]), dim=-1).to(dtype)


def dequantize_blocks(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """MXFP4 blocks [..., G, 16] uint8 + scales [..., G] uint8 -> values [..., G * 32] in `dtype`.

    Exact in float32 and bf16 whenever every scale is <= MAX_EXACT_SCALE (see dequantize_expert).
    """
    if blocks.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise ValueError(f"MXFP4 blocks/scales must be uint8, got {blocks.dtype}/{scales.dtype}")
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} do not match scales {tuple(scales.shape)}")
    values = _byte_table(dtype)[blocks.int()].reshape(*scales.shape, 32)
    values *= torch.exp2(scales.float() - SCALE_BIAS).to(dtype).unsqueeze(-1)
    return values.flatten(-2)


# FP4 values have <= 2 significant bits, so value * 2^(scale - 127) is an exact bf16 number down to scale 0 (smallest
# 2^-128, bf16 subnormals reach 2^-133); 6 * 2^(scale - 127) stays finite in bf16 up to scale 252.
MAX_EXACT_SCALE = 252


def dequantize_expert(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Expert blocks [E, R, G, 16] -> the bf16 parameter gpt-oss trains with, [E, G * 32, R]; exact.

    One expert at a time (temporaries stay small). ConversionError if a scale would overflow bf16 (lossy).
    """
    if blocks.dim() != 4:
        raise ValueError(f"expert blocks must be [experts, rows, groups, 16], got {tuple(blocks.shape)}")
    top = int(scales.max()) if scales.numel() else 0
    if top > MAX_EXACT_SCALE:
        bad = int((scales > MAX_EXACT_SCALE).sum())
        raise ConversionError(f"{bad} MXFP4 scale(s) up to {top} are outside bf16's exact range (<= {MAX_EXACT_SCALE})")
    n_exp, rows, groups, _ = blocks.shape
    out = torch.empty(n_exp, groups * 32, rows, dtype=torch.bfloat16)
    for e in range(n_exp):
        out[e] = dequantize_blocks(blocks[e], scales[e], torch.bfloat16).T
    return out


# ---------------------------------------------------------------- in-process loading (actor.patch)


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def _broadcast_object(obj, src: int = 0):
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def bf16_config(path: str, **kwargs):
    """The checkpoint's config with its quantization_config removed (what the dequantized model is)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, trust_remote_code=True, **kwargs)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    return config


def load_dequantized(
    path: str,
    *,
    ds_config: dict | None,
    model_class=None,
    dtype: torch.dtype = torch.bfloat16,
    attn_implementation: str = "eager",
    device_map=None,
):
    """Load an MXFP4 checkpoint dequantized to `dtype`; under ZeRO-3 every parameter is a partitioned ZeRO param.

    ZeRO-3: rank 0 loads with Mxfp4Config(dequantize=True) and device_map="cpu" (no HfDeepSpeedConfig may be alive:
    transformers refuses device_map under ZeRO-3 and skips zero.Init for quantized checkpoints), all ranks build
    the bf16 model under zero.Init, then rank 0's values are copied in parameter by parameter. deepspeed.initialize
    then sees ZeRO params and never moves the whole model onto one GPU.
    """
    from transformers import AutoModelForCausalLM, Mxfp4Config
    from transformers.integrations.deepspeed import HfDeepSpeedConfig, is_deepspeed_zero3_enabled

    model_class = model_class or AutoModelForCausalLM
    quant = Mxfp4Config(dequantize=True)
    common = dict(trust_remote_code=True, attn_implementation=attn_implementation, dtype=dtype)
    zero3 = ds_config is not None and ds_config.get("zero_optimization", {}).get("stage") == 3
    if not zero3:
        return model_class.from_pretrained(path, quantization_config=quant, device_map=device_map, **common)
    if is_deepspeed_zero3_enabled():
        raise RuntimeError(
            "load_dequantized: an HfDeepSpeedConfig (ZeRO-3) is alive; create it only after the MXFP4 load "
            "(transformers refuses device_map='cpu' under ZeRO-3 and would not partition the model)"
        )
    params = buffers = None
    if _rank() == 0:
        full = model_class.from_pretrained(path, quantization_config=quant, device_map="cpu", **common)
        params = {n: p.detach() for n, p in full.named_parameters()}
        buffers = {n: b.detach() for n, b in full.named_buffers()}
        del full  # the dicts now hold the only references: copy_into_zero3 frees them as it goes
    dschf = HfDeepSpeedConfig(ds_config)  # noqa: F841  (transformers' from_config uses zero.Init while alive)
    model = model_class.from_config(bf16_config(path), **common)
    copy_into_zero3(model, params, buffers)
    return model


def copy_into_zero3(
    model: torch.nn.Module,
    src_params: dict[str, torch.Tensor] | None,
    src_buffers: dict[str, torch.Tensor] | None = None,
) -> None:
    """Copy rank 0's full tensors into the zero.Init-partitioned `model`, one gathered parameter at a time.

    Collective: every rank calls it in the same order; only rank 0 passes the tensors (others None). Entries of
    `src_params` are popped as they are copied, so rank 0's full copy shrinks while it goes.
    """
    import deepspeed
    from tqdm import tqdm

    rank = _rank()
    params = dict(model.named_parameters())
    problem = None
    if rank == 0:
        src_params, src_buffers = src_params or {}, src_buffers or {}
        missing, extra = sorted(set(params) - set(src_params)), sorted(set(src_params) - set(params))
        shapes = [n for n in params if n in src_params and tuple(params[n].ds_shape) != tuple(src_params[n].shape)]
        if missing or extra or shapes:
            problem = f"dequantized checkpoint does not match the model: missing {missing[:5]}, "
            problem += f"unexpected {extra[:5]}, shape mismatch {shapes[:5]}"
    problem = _broadcast_object(problem)  # every rank raises together instead of hanging in a collective
    if problem:
        raise ValueError(problem)
    for name, param in tqdm(params.items(), desc="dequantized -> ZeRO-3", disable=rank != 0):
        with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
            if rank == 0:
                param.data.copy_(src_params.pop(name).to(param.dtype))
    for name, buf in model.named_buffers():
        if rank == 0 and name in src_buffers:
            buf.copy_(src_buffers[name].to(buf.dtype))
        if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            torch.distributed.broadcast(buf, src=0)


# ---------------------------------------------------------------- offline conversion


SKIPPED_WEIGHT_COPIES = ["original/*", "metal/*"]
"""What a download of a gpt-oss repo leaves out: weight copies for other runtimes that nothing here reads."""


def resolve_local(path: str) -> Path:
    """A local directory for `path` (a hub id is resolved through the Hugging Face cache / download)."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=path, ignore_patterns=SKIPPED_WEIGHT_COPIES))


def _weight_map(src: Path) -> dict[str, str]:
    """tensor name -> safetensors file name, from the index or the single model.safetensors."""
    index = src / INDEX_NAME
    if index.is_file():
        return dict(json.loads(index.read_text())["weight_map"])
    single = src / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{src}: no {INDEX_NAME} and no model.safetensors")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return {k: single.name for k in f.keys()}


def iter_converted(src: Path) -> Iterator[tuple[str, Callable[[], torch.Tensor], bool]]:
    """(bf16 name, loader of its tensor, was dequantized) for every tensor of the converted checkpoint."""
    from safetensors import safe_open

    wmap = _weight_map(src)

    def read(key: str) -> torch.Tensor:
        with safe_open(str(src / wmap[key]), framework="pt") as f:
            return f.get_tensor(key)

    for key in sorted(wmap):
        if key.endswith(SCALES):
            if key[: -len(SCALES)] + BLOCKS not in wmap:
                raise ValueError(f"{src}: {key} has no matching {BLOCKS} tensor")
            continue
        if key.endswith(BLOCKS):
            base = key[: -len(BLOCKS)]
            if base + SCALES not in wmap:
                raise ValueError(f"{src}: {key} has no matching {SCALES} tensor")
            yield base, (lambda b=key, s=base + SCALES: dequantize_expert(read(b), read(s))), True
        else:
            yield key, (lambda k=key: read(k)), False


@dataclass
class ConversionReport:
    """What convert_checkpoint wrote."""

    output: Path
    tensors: int = 0
    dequantized: list[str] = field(default_factory=list)
    bytes_written: int = 0
    side_files: list[str] = field(default_factory=list)


def _side_files(src: Path) -> list[Path]:
    """Top-level non-weight files to carry over (tokenizer, chat template, generation config, licence)."""
    skip = {"config.json", INDEX_NAME}
    return sorted(
        p for p in src.iterdir() if p.is_file() and p.name not in skip and not p.name.endswith(WEIGHT_SUFFIXES)
    )


def convert_checkpoint(
    src: str | Path,
    dst: str | Path,
    *,
    max_shard_bytes: int = 5 * 1024**3,
    verify: bool = True,
    progress: bool = True,
) -> ConversionReport:
    """Write a bf16 copy of MXFP4 checkpoint `src` at `dst` (must not exist); lossless, verified, all or nothing.

    Streams one tensor at a time (host RAM ~ one output shard). The output is built in a hidden temporary directory
    beside `dst` and renamed into place only after every tensor re-read from disk equals the exact dequantization.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file
    from tqdm import tqdm

    src_dir = resolve_local(str(src))
    config = json.loads((src_dir / "config.json").read_text())
    method = quant_method(config)
    if method != MXFP4:
        raise NotMxfp4Error(
            f"{src_dir / 'config.json'}: quantization_config.quant_method is {method!r}, not 'mxfp4' "
            "(nothing to convert: train from this checkpoint directly)"
        )
    dst = Path(dst).expanduser().absolute()
    if dst.exists():
        raise FileExistsError(f"{dst} already exists; choose a new output directory or remove it first")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.partial-", dir=dst.parent))
    report = ConversionReport(output=dst)
    try:
        items = list(iter_converted(src_dir))
        weight_map: dict[str, str] = {}
        shard: dict[str, torch.Tensor] = {}
        shard_names: list[list[str]] = []

        def flush() -> None:
            if shard:
                name = f"shard-{len(shard_names):05d}.safetensors"
                save_file(shard, str(tmp / name), metadata={"format": "pt"})
                shard_names.append(list(shard))
                shard.clear()

        size = 0
        for name, load, dequantized in tqdm(items, desc="MXFP4 -> bf16", unit="tensor", disable=not progress):
            tensor = load().contiguous()
            nbytes = tensor.numel() * tensor.element_size()
            if shard and size + nbytes > max_shard_bytes:
                flush()
                size = 0
            shard[name] = tensor
            size += nbytes
            report.bytes_written += nbytes
            if dequantized:
                report.dequantized.append(name)
        flush()
        total = len(shard_names)
        for i, names in enumerate(shard_names):
            final = f"model-{i + 1:05d}-of-{total:05d}.safetensors"
            os.replace(tmp / f"shard-{i:05d}.safetensors", tmp / final)
            weight_map.update(dict.fromkeys(names, final))
        report.tensors = len(weight_map)
        atomic_write_json(tmp / INDEX_NAME, {"metadata": {"total_size": report.bytes_written}, "weight_map": weight_map})
        config.pop("quantization_config")
        atomic_write_json(tmp / "config.json", config)
        for f in _side_files(src_dir):
            shutil.copy2(f, tmp / f.name)
            report.side_files.append(f.name)
        if verify:
            for name, load, _ in tqdm(items, desc="verify", unit="tensor", disable=not progress):
                with safe_open(str(tmp / weight_map[name]), framework="pt") as f:
                    if not torch.equal(f.get_tensor(name), load()):
                        raise ConversionError(f"{tmp / weight_map[name]}: {name} differs from the MXFP4 source")
        atomic_write_json(
            tmp / PROVENANCE_NAME,
            {
                "source": str(src_dir),
                "source_config_sha256": sha256_file(src_dir / "config.json"),
                "tensors": report.tensors,
                "dequantized": report.dequantized,
                "verified": verify,
            },
        )
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report
