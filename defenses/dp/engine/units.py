"""Units of clipping: what one clipped gradient is, expressed as data.

A contrastive loss L(z_1..z_R) couples the batch, so "per-example gradient" must be defined per
method. Every unit kind the papers use has the same shape: unit u's gradient is

    g_u = sum_r J_r^T c_{u,r},        J_r = d f_theta(x_r) / d theta,

a vector-Jacobian product of the encoder with a unit-specific cotangent c_u on the embedding rows
(field notes, "per-unit gradients"). :class:`Units` stores the cotangents, and for units that touch
few rows, which rows:

* ``term``    -- the gradient of one loss term through *all* embeddings (DP-GCL Eq. 6:
  c_i = d l_i / dZ); dense cotangents over every row.
* ``view`` / ``example`` / ``group`` / ``batch`` -- the loss gradient through the unit's *own*
  rows only (c = dL/dZ restricted to the rows of one view, one example's views, one group, or the
  whole batch); DPCL Sec. 3.2.1-3.2.2, DP-GCL Eqs. 8-13, DP-GCL Eq. 7. :func:`partition_units`.
* ``pair``    -- the gradient of one similarity logit Z_ij = s(f(x_i), f(y_j)) (Logit-DP Lemma 4.1,
  Cor. 4.3): rows x_i and y_j with cotangents dZ_ij/dz. Each clipped pair gradient is then weighted
  by tau_ij = dL/dZ_ij (``weights``). :func:`pair_units`.

Gathered units are padded to equal length with a valid row and a zero cotangent, which adds
exactly zero to the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

UNIT_KINDS = ("term", "view", "example", "group", "batch", "pair")


@dataclass(frozen=True)
class Units:
    """Cotangents (and rows) defining U unit gradients over the rows of the step's sources.

    ``rows`` is None for dense units: ``cotangents[s]`` is (U, R_s, D) over every row of source s.
    Otherwise ``rows[s]`` is (U, m_s) row indices into source s and ``cotangents[s]`` is (U, m_s, D).
    ``weights`` (U,) multiplies each *clipped* unit gradient (Logit-DP's tau_ij); None means 1.
    ``ids`` (U,) names each unit (example, group, term or flattened pair index) for reporting.
    """

    kind: str
    cotangents: tuple[torch.Tensor, ...]
    rows: tuple[torch.Tensor, ...] | None = None
    weights: torch.Tensor | None = None
    ids: torch.Tensor | None = None
    # partitions only (set by partition_units): per source, every row's cotangent (R_s, D) and unit
    # index (R_s,), -1 for rows in no unit -- the layout the layerwise engine works in
    row_owners: tuple[tuple[torch.Tensor, torch.Tensor], ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in UNIT_KINDS:
            raise ValueError(f"unit kind {self.kind!r} not in {UNIT_KINDS}")
        counts = {int(c.shape[0]) for c in self.cotangents}
        if len(counts) > 1:
            raise ValueError(f"every source needs the same number of units, got {sorted(counts)}")
        if self.rows is not None and len(self.rows) != len(self.cotangents):
            raise ValueError("rows and cotangents must have one entry per source")

    @property
    def dense(self) -> bool:
        return self.rows is None

    def __len__(self) -> int:
        return int(self.cotangents[0].shape[0]) if self.cotangents else 0


def partition_units(kind: str, cotangents: Sequence[torch.Tensor], owners: Sequence[torch.Tensor]) -> Units:
    """Units that partition the rows: unit u's gradient is sum_{r: owner(r) = u} J_r^T c_r.

    ``cotangents[s]`` is dL/dZ for source s (R_s, D); ``owners[s]`` (R_s,) gives each row's unit id
    (any non-negative integer; rows with a negative owner belong to no unit). Units without rows are
    dropped; ``ids`` lists the owner id of each remaining unit in increasing order.
    """
    device = cotangents[0].device
    all_owners = torch.cat([o.to(device).long() for o in owners])
    ids = torch.unique(all_owners[all_owners >= 0])
    n_units = int(ids.numel())
    rows_out, cots_out, row_owners = [], [], []
    for cot, own in zip(cotangents, owners):
        own = own.to(device).long()
        keep = (own >= 0).nonzero().flatten()
        unit = torch.searchsorted(ids, own[keep])  # position of each row's unit
        row_unit = torch.full(own.shape, -1, dtype=torch.long, device=device)
        row_unit[keep] = unit
        row_owners.append((cot, row_unit))
        counts = torch.bincount(unit, minlength=n_units)
        width = int(counts.max()) if keep.numel() else 0
        order = torch.argsort(unit, stable=True)
        unit, keep = unit[order], keep[order]
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.arange(keep.numel(), device=device) - starts[unit]
        rows = torch.zeros(n_units, width, dtype=torch.long, device=device)
        c = torch.zeros(n_units, width, cot.shape[-1], dtype=cot.dtype, device=device)
        if width:
            # Pad with a valid row (the unit's first, or any row of the source) and a zero cotangent.
            first = torch.full((n_units,), int(keep[0]), dtype=torch.long, device=device)
            has = counts > 0
            first[has] = keep[starts[has]]
            rows[:] = first[:, None]
            rows[unit, slot] = keep
            c[unit, slot] = cot[keep]
        rows_out.append(rows)
        cots_out.append(c)
    return Units(kind, tuple(cots_out), tuple(rows_out), ids=ids, row_owners=tuple(row_owners))


def dense_units(kind: str, cotangents: Sequence[torch.Tensor], ids: torch.Tensor | None = None) -> Units:
    """Units whose cotangents span every row: ``cotangents[s]`` is (U, R_s, D)."""
    return Units(kind, tuple(cotangents), None, ids=ids)


def pair_units(a: torch.Tensor, b: torch.Tensor, weights: torch.Tensor | None = None) -> Units:
    """Logit-DP's pair units over one source laid out as rows [x_1..x_n; y_1..y_m].

    ``a`` (n, m, D) = dZ_ij/dz(x_i) and ``b`` (n, m, D) = dZ_ij/dz(y_j): unit (i, j) has rows
    (i, n + j) and gradient grad_theta Z_ij. ``weights`` (n, m) are the tau_ij = dL/dZ_ij that
    multiply each clipped pair gradient (Logit-DP Cor. 4.3, Eq. 5). Units are ordered i-major.
    """
    n, m, d = a.shape
    i = torch.arange(n, device=a.device).repeat_interleave(m)
    j = torch.arange(m, device=a.device).repeat(n)
    rows = torch.stack([i, n + j], dim=1)
    cot = torch.stack([a.reshape(n * m, d), b.reshape(n * m, d)], dim=1)
    w = None if weights is None else weights.reshape(n * m)
    return Units("pair", (cot,), (rows,), weights=w, ids=torch.arange(n * m, device=a.device))
