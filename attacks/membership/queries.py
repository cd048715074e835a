"""Deterministic query augmentations: each example is queried as several shifted (and mirrored) copies.

LiRA queries every example under the training augmentations' deterministic counterparts (Carlini et
al. 2022, Sec. VI-A: mirror x shifts for CIFAR-10) and averages the per-query likelihood ratios.
Queries must resemble what the model saw in training: mirroring is used for colour datasets only
(digits and MNIST are not mirror-symmetric and their training augmentations do not flip), shifts of
one pixel for every dataset, padded with zeros (grey) or by reflection (colour, as Carlini et al.).

The order is fixed: identity first, then the four one-pixel shifts, then the diagonals; with
mirroring, each shift is followed by its mirror image. ``QuerySet(n)`` takes the first n.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from privaudit.core.datasets import DatasetInfo
from privaudit.core.errors import ConfigError, one_of

_SHIFTS = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, -1), (1, -1), (-1, 1))
PADDINGS = ("constant", "reflect")


@dataclass(frozen=True)
class QuerySet:
    """The first ``n`` query transforms of the fixed order, with or without mirror images."""

    n: int = 1
    mirror: bool = False
    padding: str = "constant"

    def __post_init__(self) -> None:
        if self.padding not in PADDINGS:
            raise one_of("queries.padding", self.padding, PADDINGS)
        limit = len(_SHIFTS) * (2 if self.mirror else 1)
        if not 1 <= self.n <= limit:
            raise ConfigError(f"queries: must lie in [1, {limit}] (mirror={self.mirror}), got {self.n!r}")

    @classmethod
    def for_dataset(cls, info: DatasetInfo, n: int, mirror: bool | None = None) -> "QuerySet":
        """Queries suited to ``info``: mirror images only for colour data unless ``mirror`` says otherwise."""
        colour = info.channels == 3
        return cls(n, colour if mirror is None else mirror, "reflect" if colour else "constant")

    def transforms(self) -> list[tuple[bool, int, int]]:
        """(mirror, dy, dx) for each query, in order."""
        out = []
        for dy, dx in _SHIFTS:
            out.append((False, dy, dx))
            if self.mirror:
                out.append((True, dy, dx))
        return out[: self.n]

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """All queries of a batch: (Q, N, C, H, W)."""
        padded = F.pad(x, (1, 1, 1, 1), mode=self.padding) if self.padding == "reflect" else F.pad(x, (1, 1, 1, 1))
        h, w = x.shape[-2:]
        out = []
        for mirror, dy, dx in self.transforms():
            q = padded[..., 1 + dy:1 + dy + h, 1 + dx:1 + dx + w]
            out.append(q.flip(-1) if mirror else q)
        return torch.stack(out)
