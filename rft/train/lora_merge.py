"""Merge sync, vLLM worker side: write ``round(W0 + scaling * B @ A)`` into a vLLM model's base weights.

Each vLLM worker keeps a pristine copy of every base parameter it touches (taken on the first sync) and writes
``round(W0 + scaling * B @ A)`` with the product formed in fp32 and rounded once, so successive syncs never
accumulate. Placement inside vLLM's fused / tensor-parallel parameters is learned once from the model's own
``load_weights`` (probe tensors through the real loaders), so fused ``qkv_proj`` / ``gate_up_proj``, GQA head
splits and row/column-parallel narrowing are exactly vLLM's. The payload comes from ``rft.train.lora_payload``.

vLLM engine actor (``LLMRayActor.apply_lora_update(self, payload)``, vllm_engine.patch)::

    return await self.llm.collective_rpc("apply_lora_update", args=(payload,))

vLLM worker (``WorkerWrap.apply_lora_update(self, payload)``, vllm_worker_wrap.patch)::

    applier = getattr(self, "_rft_lora_applier", None) or LoraMergeApplier(self.model_runner.model)
    self._rft_lora_applier = applier
    return applier.apply(payload)                       # plain dict report, see LoraMergeApplier.apply

Notes: the first ``apply`` probes each target through ``load_weights`` (the touched weights are briefly
overwritten, then restored), so no generation may run during a sync; call ``reset_prefix_cache`` after it.
W0 copies cost the touched weights once more per GPU (``snapshot_device="cpu"`` moves them to host).
``bf16_rounding_report`` measures how much of ΔW survives rounding into a bf16 W0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from rft.train.lora_payload import LoraSyncError, check_same_targets, decode_payload

_PROBE_BASE = 256  # integers 1..256 are exact in bf16, fp16 and fp32
_LAYER_RE = re.compile(r"\.(?:layers|block|h)\.(\d+)\.")


Index = slice | torch.Tensor


@dataclass
class _Placement:
    """Where one HF weight lands: ``param[dst_rows, dst_cols] = full[src_rows, src_cols]``."""

    param: str
    dst_rows: Index
    dst_cols: Index
    src_rows: Index
    src_cols: Index
    shape: tuple[int, int]  # full (unsharded) HF shape


def _as_index(idx: torch.Tensor) -> Index:
    """A contiguous ascending index as a slice (cheap views), otherwise the index tensor itself."""
    if idx.numel() and bool((idx[1:] - idx[:-1] == 1).all()):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def _region(t: torch.Tensor, rows: Index, cols: Index) -> tuple:
    if isinstance(rows, slice) and isinstance(cols, slice):
        return (rows, cols)
    r = torch.arange(t.shape[0], device=t.device)[rows] if isinstance(rows, slice) else rows.to(t.device)
    c = torch.arange(t.shape[1], device=t.device)[cols] if isinstance(cols, slice) else cols.to(t.device)
    return (r.unsqueeze(1), c.unsqueeze(0))


def _take(t: torch.Tensor, dim: int, idx: Index) -> torch.Tensor:
    if isinstance(idx, slice):
        return t.narrow(dim, idx.start, idx.stop - idx.start)
    return t.index_select(dim, idx.to(t.device))


class LoraMergeApplier:
    """Writes ``W0 + scaling * B @ A`` into a vLLM model's (fused, TP-sharded) base weights.

    ``model`` needs ``named_parameters()`` and vLLM's ``load_weights(iterable of (hf_name, full tensor))``
    returning the set of vLLM parameter names it loaded. ``snapshot_device`` holds W0 (default: the
    parameter's own device). ``tp_size``: the engine's tensor-parallel size; a rank must use at least 1/tp_size
    of every dimension of an adapter's weight, so a too-large adapter cannot be silently cut to fit.
    """

    def __init__(
        self, model: torch.nn.Module, *, snapshot_device: str | torch.device | None = None, tp_size: int = 1
    ):
        self.model = model
        self.tp_size = tp_size
        self.snapshot_device = snapshot_device
        self.params: dict[str, torch.nn.Parameter] = dict(model.named_parameters())
        self.placements: dict[str, _Placement] = {}
        self.pristine: dict[str, torch.Tensor] = {}

    # -- probing -------------------------------------------------------------------------------------------
    def _load(self, name: str, full: torch.Tensor) -> set[str]:
        """vLLM's own loader on one full HF tensor; a loader that refuses it (shape) is a LoraSyncError."""
        try:
            loaded = self.model.load_weights(weights=[(name, full)])
        except LoraSyncError:
            raise
        except Exception as e:  # noqa: BLE001  (vLLM loaders assert, raise ValueError, KeyError, ...)
            raise LoraSyncError(
                f"{name}: vLLM's load_weights refused a {tuple(full.shape)} tensor ({type(e).__name__}: {e}); "
                "the adapter does not fit the served model"
            ) from e
        return set(loaded or ())

    def _candidates(self, hf_name: str) -> list[str]:
        """Parameters a probe for ``hf_name`` may land in: 2-D float params of the same layer."""
        m = _LAYER_RE.search(hf_name)
        tok = re.compile(rf"\.{m.group(1)}\.") if m else None
        return [
            n
            for n, p in self.params.items()
            if p.dim() == 2 and p.is_floating_point() and (tok is None or tok.search(n))
        ]

    def _probe(self, hf_name: str, shape: tuple[int, int], snap: dict[str, torch.Tensor]) -> _Placement:
        """Learn where vLLM's own loader puts each element of ``hf_name`` (integer-coded probes, then a check)."""
        out_f, in_f = shape
        if max(out_f, in_f) > _PROBE_BASE * _PROBE_BASE:
            raise LoraSyncError(f"{hf_name}: dimension {max(shape)} too large to probe")
        some = next(iter(snap.values()))
        dtype, device = some.dtype, some.device
        rows = torch.arange(out_f, device=device)
        cols = torch.arange(in_f, device=device)

        def probe(codes: torch.Tensor, along_rows: bool) -> torch.Tensor:
            col = codes.to(dtype).unsqueeze(1 if along_rows else 0)
            return col.expand(out_f, in_f).contiguous()

        digits = [
            (rows % _PROBE_BASE + 1, True),
            (rows // _PROBE_BASE + 1, True),
            (cols % _PROBE_BASE + 1, False),
            (cols // _PROBE_BASE + 1, False),
        ]
        first = probe(*digits[0])
        loaded = self._load(hf_name, first)
        hit = [n for n in loaded if n in self.params]
        if not hit:
            raise LoraSyncError(
                f"vLLM's load_weights did not load {hf_name!r} (unknown name, silently skipped)"
            )
        if len(hit) != 1 or hit[0] not in snap:
            raise LoraSyncError(f"{hf_name!r} loaded into {sorted(loaded)}, expected one weight of its layer; "
                                "weights outside that layer may now be corrupt: restart the engine")
        pname = hit[0]
        param = self.params[pname]
        decoded, mask = [], None
        for codes, along_rows in digits:
            param.data.zero_()
            self._load(hf_name, probe(codes, along_rows))
            got = param.data.float().clone()
            m = got != 0
            if mask is None:
                mask = m
            elif not torch.equal(mask, m):
                raise LoraSyncError(f"{hf_name}: vLLM loader wrote different regions for different probes")
            decoded.append(got)
        row_hit, col_hit = mask.any(1), mask.any(0)
        if not row_hit.any() or not torch.equal(mask, row_hit.unsqueeze(1) & col_hit.unsqueeze(0)):
            raise LoraSyncError(f"{hf_name}: vLLM loader did not write a row x column block of {pname}")
        dst_r = row_hit.nonzero().squeeze(1)
        dst_c = col_hit.nonzero().squeeze(1)
        blocks = [d[dst_r][:, dst_c] for d in decoded]
        src_r_grid = (blocks[0] - 1) + _PROBE_BASE * (blocks[1] - 1)
        src_c_grid = (blocks[2] - 1) + _PROBE_BASE * (blocks[3] - 1)
        src_r, src_c = src_r_grid[:, 0], src_c_grid[0, :]
        if not (
            torch.equal(src_r_grid, src_r.unsqueeze(1).expand_as(src_r_grid))
            and torch.equal(src_c_grid, src_c.unsqueeze(0).expand_as(src_c_grid))
        ):
            raise LoraSyncError(f"{hf_name}: vLLM loader is not a plain row/column narrowing (cannot merge)")
        src_r, src_c = src_r.long(), src_c.long()
        for used, full, what in ((len(src_r), out_f, "rows"), (len(src_c), in_f, "columns")):
            if used * self.tp_size < full:
                raise LoraSyncError(
                    f"{hf_name}: vLLM's loader keeps {used} of the adapter weight's {full} {what} "
                    f"(tensor parallel {self.tp_size}): the adapter does not fit the served model"
                )
        if int(src_r.min()) < 0 or int(src_c.min()) < 0 or int(src_r.max()) >= out_f or int(src_c.max()) >= in_f:
            raise LoraSyncError(f"{hf_name}: vLLM loader is not a plain row/column narrowing (index out of range)")
        # final check with random values: the loader must be exactly param[dst] = full[src], nothing else
        gen = torch.Generator(device=device).manual_seed(0)  # leave the engine's global RNG alone
        rnd = torch.randn(out_f, in_f, device=device, generator=gen).to(dtype)
        param.data.zero_()
        self._load(hf_name, rnd)
        expect = torch.zeros_like(param.data)
        expect[dst_r.unsqueeze(1), dst_c.unsqueeze(0)] = rnd[src_r][:, src_c].to(expect.dtype)
        if not torch.equal(param.data, expect):
            raise LoraSyncError(f"{hf_name}: vLLM loader is not a plain row/column narrowing (cannot merge)")
        return _Placement(
            pname,
            _as_index(dst_r.cpu()),
            _as_index(dst_c.cpu()),
            _as_index(src_r.cpu()),
            _as_index(src_c.cpu()),
            (out_f, in_f),
        )

    def _discover(self, shapes: Mapping[str, tuple[int, int]]) -> None:
        """First sync: probe every target (layer by layer) and keep W0 of each parameter touched."""
        by_layer: dict[str, list[str]] = {}
        for name in shapes:
            m = _LAYER_RE.search(name)
            by_layer.setdefault(m.group(1) if m else "", []).append(name)
        placements: dict[str, _Placement] = {}
        pristine: dict[str, torch.Tensor] = {}
        for names in by_layer.values():
            snap = {n: self.params[n].data.clone() for n in self._candidates(names[0])}
            if not snap:
                raise LoraSyncError(f"no 2-D float parameter in the vLLM model could hold {names[0]!r}")
            try:
                for name in names:
                    placements[name] = self._probe(name, shapes[name], snap)
            finally:
                for n, w in snap.items():
                    self.params[n].data.copy_(w)
            for pl in placements.values():
                if pl.param in snap and pl.param not in pristine:
                    pristine[pl.param] = snap[pl.param].to(self.snapshot_device or snap[pl.param].device)
        self._check_disjoint(placements)
        self.placements, self.pristine = placements, pristine

    @staticmethod
    def _check_disjoint(placements: Mapping[str, _Placement]) -> None:
        seen: dict[str, torch.Tensor] = {}
        for name, pl in placements.items():
            rows = (
                torch.arange(pl.dst_rows.stop)[pl.dst_rows] if isinstance(pl.dst_rows, slice) else pl.dst_rows
            )
            prev = seen.get(pl.param)
            if prev is not None and bool(torch.isin(rows, prev).any()):
                raise LoraSyncError(f"{name}: overlaps another target in {pl.param}")
            seen[pl.param] = rows if prev is None else torch.cat([prev, rows])

    # -- applying ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def apply(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Write W0 + ΔW for every module; returns ``{"version", "modules", "params", "elements", "max_abs_delta"}``
        and, for each scale c in the payload's optional ``kept_scales``, ``kept[i]`` = ``kept_sums`` at c."""
        mods = decode_payload(payload)
        shapes = {n: (b.shape[0], a.shape[1]) for n, (_, a, b) in mods.items()}
        if not self.placements:
            self._discover(shapes)
        check_same_targets(self.placements, mods)
        for name, shape in shapes.items():
            if shape != self.placements[name].shape:
                raise LoraSyncError(
                    f"{name}: adapter implies weight {shape}, vLLM holds {self.placements[name].shape}"
                )
        by_param: dict[str, list[str]] = {}
        for name in mods:
            by_param.setdefault(self.placements[name].param, []).append(name)
        written, elements, max_abs = 0, 0, 0.0
        scales = [float(c) for c in payload.get("kept_scales") or ()]
        kept = [[0.0, 0.0] for _ in scales]
        for pname, names in by_param.items():
            param = self.params[pname]
            acc = self.pristine[pname].to(param.device, torch.float32, copy=True)
            for name in names:
                scaling, a, b = mods[name]
                pl = self.placements[name]
                b_loc = _take(b.to(param.device), 0, pl.src_rows).float()
                a_loc = _take(a.to(param.device), 1, pl.src_cols).float()
                delta = (b_loc @ a_loc).mul_(scaling)
                acc[_region(acc, pl.dst_rows, pl.dst_cols)] += delta
                elements += delta.numel()
                max_abs = max(max_abs, float(delta.abs().max()) if delta.numel() else 0.0)
                written += 1
            for c, sums in zip(scales, kept, strict=True):
                num, den = kept_sums(self.pristine[pname].to(param.device), acc, c)
                sums[0] += num
                sums[1] += den
            param.data.copy_(acc.to(param.dtype))
        if written != payload["num_modules"]:
            raise LoraSyncError(f"updated {written} modules, payload declares {payload['num_modules']}")
        return {
            "version": payload["version"],
            "modules": written,
            "params": len(by_param),
            "elements": elements,
            "max_abs_delta": max_abs,
            **({"kept": kept} if scales else {}),
        }


# ----------------------------------------------------------------------------------------------------------
# bf16 rounding


def kept_sums(w0: torch.Tensor, merged_exact: torch.Tensor, scale: float = 1.0) -> tuple[float, float]:
    """(<round(W0 + cΔW) - W0, cΔW>, ||cΔW||²) with ΔW = merged_exact - W0: their ratio is the share of the
    update (scaled by c) that survives rounding into W0's dtype (the probe's expected engine change, in
    rft.train.sync_probe); sums over parameters and TP shards add up."""
    w0f = w0.float()
    d = (merged_exact.float() - w0f).mul_(scale)
    realized = (w0f + d).to(w0.dtype).float() - w0f
    return float((realized * d).sum()), float((d * d).sum())


def bf16_rounding_report(w0: torch.Tensor, delta: torch.Tensor) -> dict[str, float]:
    """How much of ``delta`` survives ``round_to(w0.dtype)(w0 + delta)``, over elements with delta != 0.

    ``swallowed``: fraction where the rounded weight equals W0; ``realized_norm_ratio``:
    ||round(W0+ΔW) - W0|| / ||ΔW||; ``rel_error``: ||(round(W0+ΔW) - W0) - ΔW|| / ||ΔW||.
    """
    w0f = w0.float()
    d = delta.float()
    merged = (w0f + d).to(w0.dtype)
    realized = merged.float() - w0f
    nz = d != 0
    n = int(nz.sum())
    if n == 0:
        return {
            "swallowed": float("nan"),
            "realized_norm_ratio": float("nan"),
            "rel_error": float("nan"),
            "elements": 0,
        }
    dn = float(d[nz].norm())
    return {
        "swallowed": float((merged[nz] == w0[nz]).float().mean()),
        "realized_norm_ratio": float(realized[nz].norm()) / dn,
        "rel_error": float((realized[nz] - d[nz]).norm()) / dn,
        "elements": n,
    }
