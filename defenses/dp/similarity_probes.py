"""DPCL's similarity probes: the white-box hook on the noised similarity matrix (DPCL Sec. 3.2.2, Thm. 1).

DPCL-SimCLR releases, at every step and besides its gradient, S~ = Z Z^T + N(0, (z_S Delta_S)^2) entrywise
(Delta_S = 4 sqrt(2|B| - 1), Thm. 1; :meth:`privaudit.defenses.dpcl.DPCLSimCLR.noisy_loss`). The gradient canaries'
per-step probes (:mod:`privaudit.defenses.dp.step`) observe the gradient release only; these probes observe the
similarity release, on the same code path, so a white-box auditor can measure the whole step (Nasr et al. 2023,
Sec. 5: every intermediate release a trial of its mechanism).

Contract. :class:`SimilarityProbes` names k distinct off-diagonal entries (i, j) of the 2|B| x 2|B| matrix and a
value v on each (the auditor's +-Delta_S / 2, by a fresh coin each step; |v| <= Delta_S, else ``ConfigError``).
``noisy_loss`` calls :meth:`SimilarityProbes.observe` with the noiseless matrix S and the noised one S + N the loss
reads; the observer gets, on each entry, the release with the probe added before the noise, centred by the
noiseless entry: (S + v + N) - S = v + N (float64). The noise N is drawn without reading the probes and enters
additively, so the release with the probe added before the noise is (S + N) + v to one float rounding: the observer
reads the code path's own noised matrix, and the loss reads it without the probes -- withdrawn exactly, so a run
with the probes trains bit for bit as one without them. Each entry's noise is an independent draw (the matrix is
noised entrywise, not symmetrised), so distinct entries are independent trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from privaudit.core.errors import ConfigError


@dataclass(frozen=True)
class SimilarityProbes:
    """k distinct off-diagonal entries (``rows[l]``, ``cols[l]``) of the similarity matrix, the probe ``values`` on
    them and the ``observer`` that gets each step's centred observation v + N on those entries (module docstring)."""

    rows: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor
    observer: Callable[[torch.Tensor], None]

    def __post_init__(self) -> None:
        k = self.rows.shape
        if self.rows.ndim != 1 or self.cols.shape != k or self.values.shape != k:
            raise ConfigError("similarity probes: rows, cols and values must be 1-D of the same length")
        if bool((self.rows == self.cols).any()):
            raise ConfigError("similarity probes: entries must be off the diagonal (i != j)")
        flat = self.rows.long() * (int(self.cols.max()) + 1 if k[0] else 1) + self.cols.long()
        if flat.unique().numel() != k[0]:
            raise ConfigError("similarity probes: entries must be distinct (each a trial with its own noise)")

    def observe(self, clean: torch.Tensor, noisy: torch.Tensor, sensitivity: float) -> None:
        """Hand the observer v + (noisy - clean) on the probed entries, in float64 (module docstring)."""
        n = clean.shape[0]
        if self.rows.numel() and int(torch.maximum(self.rows.max(), self.cols.max())) >= n:
            raise ConfigError(f"similarity probes: entries must lie in a {n} x {n} similarity matrix")
        if self.values.numel() and float(self.values.abs().max()) > sensitivity * (1 + 1e-6):
            raise ConfigError(f"similarity probes: a probe of {float(self.values.abs().max()):.6g} exceeds the "
                              f"similarity sensitivity {sensitivity:.6g}")
        idx = (self.rows.long().to(clean.device), self.cols.long().to(clean.device))
        released = noisy.detach()[idx].double().cpu() - clean.detach()[idx].double().cpu()
        self.observer(released + self.values.double().cpu())
