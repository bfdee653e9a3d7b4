"""Peak live tensor bytes of a CPU computation, counted at the ATen level: every storage an op allocates (not a view of its inputs) is live until
its last tensor is freed. What the memory plan's activation coefficients are measured with
(tests/plan/test_memory_plan.py); the same ops allocate the same tensors on a GPU, less the allocator's rounding."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class PeakBytes(TorchDispatchMode):
    """Inside the context: `live` (bytes of storages made inside and still referenced) and `peak` since `reset`."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: dict[int, int] = {}
        self.live = 0
        self.peak = 0

    def reset(self) -> int:
        """Start a new peak at what is live now; returns it."""
        self.peak = self.live
        return self.live

    def _gone(self, key: int) -> None:
        self.live -= self.sizes.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self.sizes and key not in inputs:  # a view or in-place op allocates nothing
                    self.sizes[key] = storage.nbytes()
                    self.live += storage.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(storage, self._gone, key)
        return out
