"""The flattened parameter space every per-unit gradient lives in.

Per-unit gradients, clipped sums, noise and canary gradients are vectors of length ``p`` (the
number of trainable parameters), laid out as the model's trainable ``named_parameters()``
concatenated in order. :class:`ParamSpace` converts between that layout and per-parameter dicts
(what ``torch.func`` returns) and writes a flat vector into ``.grad`` for the optimizer.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Mapping

import torch
import torch.nn as nn


_VALUES: dict[int, Mapping[str, torch.Tensor]] = {}


@contextmanager
def parameter_values(module: nn.Module, values: Mapping[str, torch.Tensor]) -> Iterator[None]:
    """Evaluate ``module``'s DP step at parameter ``values`` instead of its own (not detached).

    Inside, :meth:`ParamSpace.detached` returns ``values[name]`` for ``module``, so the step runs
    at those parameters and, when they require grad, the privatized quantity is differentiable
    with respect to them (the sensitivity checks' ascent on the parameters: every claim is a bound
    at *every* parameter value). The module itself is left untouched.
    """
    key = id(module)
    previous = _VALUES.get(key)
    _VALUES[key] = values
    try:
        yield
    finally:
        if previous is None:
            del _VALUES[key]
        else:
            _VALUES[key] = previous


class ParamSpace:
    """Names, shapes and offsets of a module's trainable parameters in the flat layout."""

    def __init__(self, module: nn.Module):
        self.names: list[str] = [n for n, p in module.named_parameters() if p.requires_grad]
        params = dict(module.named_parameters())
        self.shapes: list[torch.Size] = [params[n].shape for n in self.names]
        self.numels: list[int] = [math.prod(s) for s in self.shapes]
        self.size: int = sum(self.numels)

    def detached(self, module: nn.Module) -> dict[str, torch.Tensor]:
        """The current parameter values as a plain dict (for ``torch.func.functional_call``).

        Under :func:`parameter_values` for ``module``: the given values, as they are.
        """
        given = _VALUES.get(id(module))
        if given is not None:
            return {n: given[n] for n in self.names}
        params = dict(module.named_parameters())
        return {n: params[n].detach() for n in self.names}

    def flatten(self, tensors: Mapping[str, torch.Tensor], lead: int = 0) -> torch.Tensor:
        """Concatenate per-parameter tensors with ``lead`` leading batch dims into (*lead, p)."""
        parts = []
        for name in self.names:
            t = tensors[name]
            parts.append(t.reshape(*t.shape[:lead], -1))
        return torch.cat(parts, dim=-1)

    def unflatten(self, vector: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split a (p,) vector into per-parameter views."""
        if vector.shape[-1] != self.size:
            raise ValueError(f"expected a vector of length {self.size}, got {tuple(vector.shape)}")
        out, start = {}, 0
        for name, shape, numel in zip(self.names, self.shapes, self.numels):
            out[name] = vector[..., start:start + numel].reshape(*vector.shape[:-1], *shape)
            start += numel
        return out

    def write_grad(self, module: nn.Module, vector: torch.Tensor) -> None:
        """Set each trainable parameter's ``.grad`` to its slice of ``vector``."""
        params = dict(module.named_parameters())
        for name, value in self.unflatten(vector).items():
            p = params[name]
            p.grad = value.detach().to(dtype=p.dtype).clone()
