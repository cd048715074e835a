"""Functional access to a model's embeddings, for per-unit gradients with ``torch.func``.

The rows of a step (augmented views, extra negative views, one or two modalities) are grouped in
*sources*: a tensor of inputs and the tower that embeds them (``None`` for a single-encoder model,
0 / 1 for the two towers of :class:`TwoTower`). Every unit kind is expressed through the sources'
rows, so one engine serves SimCLR-style, DP-GCL and dual-encoder training alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
import torch.nn as nn
from torch.func import functional_call

from privaudit.defenses.dp.engine.params import ParamSpace
from privaudit.defenses.nn.model import ContrastiveModel


@dataclass(frozen=True)
class Source:
    """Rows that go through one tower: inputs ``x`` (R, ...) and the tower index (None: the model)."""

    x: torch.Tensor
    tower: int | None = None

    def __len__(self) -> int:
        return int(self.x.shape[0])


class TwoTower(nn.Module):
    """Two contrastive models E1, E2 for paired two-modality data (DP-GCL Sec. 3.4.1, Eqs. 14-16).

    ``forward(x, tower)`` embeds ``x`` with tower 0 (E1) or 1 (E2); the released encoder is E1.
    """

    def __init__(self, first: ContrastiveModel, second: ContrastiveModel):
        super().__init__()
        self.towers = nn.ModuleList([first, second])

    def forward(self, x: torch.Tensor, tower: int = 0) -> torch.Tensor:
        return self.towers[tower](x)


class Embedder:
    """Embeds sources functionally: ``embed(params, x, tower)`` is ``model(x)`` at ``params``."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.space = ParamSpace(model)
        # the step's recorded forward pass (defenses.dp.engine.layerwise.Tape), consumed by clipped_sum
        self.tape = None
        self.engine = "auto"  # per-unit gradient engine of clipped_sum: auto | layerwise | vmap
        self._dims: dict[tuple, int] = {}  # the embedding's dimension per input shape and dtype

    def params(self) -> dict[str, torch.Tensor]:
        return self.space.detached(self.model)

    def embed(self, params: Mapping[str, torch.Tensor], x: torch.Tensor, tower: int | None = None) -> torch.Tensor:
        kwargs = {} if tower is None else {"tower": tower}
        return functional_call(self.model, dict(params), (x,), kwargs)

    def embedding_dim(self, params: Mapping[str, torch.Tensor], x: torch.Tensor) -> int:
        """The embedding's dimension D for inputs shaped like ``x``'s rows (one forward of one row, once per shape)."""
        key = (tuple(x.shape[1:]), x.dtype)
        if key not in self._dims:
            with torch.no_grad():
                self._dims[key] = int(self.embed(params, x[:1]).shape[-1])
        return self._dims[key]

    def embed_sources(self, params: Mapping[str, torch.Tensor], sources: Sequence[Source]) -> tuple[torch.Tensor, ...]:
        return tuple(self.embed(params, s.x, s.tower) for s in sources)
