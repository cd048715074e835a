"""Release probes: the white-box hook on a step's noised releases besides its gradient (DPCL Secs. 3.2.2 and 3.3.2).

DPCL releases, at every step and besides its gradient, noised statistics of the batch's embeddings: SimCLR the
similarity matrix S~ = Z Z^T + N(0, (z_S Delta_S)^2) entrywise (Delta_S = 4 sqrt(2|B| - 1), Thm. 1;
:meth:`privaudit.defenses.dpcl.DPCLSimCLR.noisy_loss`), Barlow Twins each view's per-feature mean and SSE, each noised
coordinatewise (Thms. 2 and 3; :meth:`privaudit.defenses.dpcl.DPCLBarlow.noisy_stats`). The gradient canaries'
per-step probes (:mod:`privaudit.defenses.dp.release.step`) observe the gradient release only; these probes observe the
other releases, on the same code path, so a white-box auditor can measure the whole step (Nasr et al. 2023, Sec. 5:
every intermediate release a trial of its mechanism).

Contract. The canary hook may carry, per release name (a mechanism of the claim), a :class:`ReleaseProbes`: k distinct
entries of the release (flat indices) and a value v on each (the auditor's +-Delta / 2 by a fresh coin each step,
|v| <= Delta, else ``ConfigError``). The defense calls :func:`observe_release` with the noiseless release and the
noised one its loss reads; the observer gets, on each probed entry, the release with the probe added before the
noise, centred by the noiseless entry: (x + v + N) - x = v + N (float64). The noise N is drawn without reading the
probes and enters additively, so the release with the probe added before the noise is (x + N) + v to one float
rounding: the observer reads the code path's own noised release, and the loss reads it without the probes --
withdrawn exactly, so a run with the probes trains bit for bit as one without them. Each entry's noise is an
independent draw (the releases are noised entrywise), so distinct entries are independent trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from privaudit.core.errors import ConfigError


@dataclass(frozen=True)
class ReleaseProbes:
    """k distinct entries (flat indices ``index``) of one noised release, the probe ``values`` on them and the
    ``observer`` that gets each step's centred observation v + N on those entries (module docstring)."""

    index: torch.Tensor
    values: torch.Tensor
    observer: Callable[[torch.Tensor], None]

    def __post_init__(self) -> None:
        if self.index.ndim != 1 or self.values.shape != self.index.shape:
            raise ConfigError("release probes: index and values must be 1-D of the same length")
        if self.index.long().unique().numel() != self.index.numel():
            raise ConfigError("release probes: entries must be distinct (each a trial with its own noise)")

    def observe(self, clean: torch.Tensor, noisy: torch.Tensor, sensitivity: float) -> None:
        """Hand the observer v + (noisy - clean) on the probed entries, in float64 (module docstring)."""
        if self.index.numel() and int(self.index.max()) >= clean.numel():
            raise ConfigError(f"release probes: entry {int(self.index.max())} lies outside a release of "
                              f"{clean.numel()} entries")
        if self.values.numel() and float(self.values.abs().max()) > sensitivity * (1 + 1e-6):
            raise ConfigError(f"release probes: a probe of {float(self.values.abs().max()):.6g} exceeds the release's "
                              f"sensitivity {sensitivity:.6g}")
        idx = self.index.long().to(clean.device)
        released = noisy.detach().reshape(-1)[idx].double().cpu() - clean.detach().reshape(-1)[idx].double().cpu()
        self.observer(released + self.values.double().cpu())


def observe_release(ctx: Any, name: str, clean: torch.Tensor, noisy: torch.Tensor) -> None:
    """Hand release ``name``'s probes (if the step context carries any) its noiseless and noised values."""
    probes = (getattr(ctx, "release_probes", None) or {}).get(name)
    if probes is not None:
        probes.observe(clean, noisy, float(ctx.sensitivities[name]))


def embedding_dim(model: Any) -> int:
    """The dimension of the embedding z a contrastive model's loss reads: its projection head's output, or (no head)
    its representation's."""
    head = getattr(model, "projector", None)
    last = [m for m in head.modules() if isinstance(m, torch.nn.Linear)] if head is not None else []
    return int(last[-1].out_features) if last else int(model.encoder.rep_dim)
