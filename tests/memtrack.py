"""Peak bytes of tensor storage allocated while a function runs, on any device.

A ``TorchDispatchMode`` sees every operator's outputs (below ``torch.func`` transforms, so batched
per-unit gradients count at their real size). Each output storage is counted once, while any tensor
produced on it is alive (weak references); the peak of the running total is reported. Tensors that
existed before the call (parameters, inputs) are not counted.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class PeakMemory(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[tuple[str, int], int] = {}
        self.sizes: dict[tuple[str, int], int] = {}
        self.current = 0
        self.peak = 0

    def _release(self, key: tuple[str, int]) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.current -= self.sizes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                continue
            key = (t.device.type, storage.data_ptr())
            if key not in self.refs:
                self.refs[key] = 0
                self.sizes[key] = storage.nbytes()
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
            self.refs[key] += 1
            weakref.finalize(t, self._release, key)
        return out


def peak_bytes(fn: Callable[[], Any]) -> int:
    """Run ``fn`` once and return the peak bytes of tensor storage it held at any time."""
    tracker = PeakMemory()
    with tracker:
        result = fn()
    del result
    return tracker.peak
