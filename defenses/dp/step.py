"""The Gaussian release of a clipped sum, with the white-box canary hook.

:func:`release` turns the clipped sum of a step into the noisy gradient the optimizer sees:

    g~ = ( sum_u w_u Clip_C(g_u)  +  sum_{k: include_k} v_k  +  N(0, (z * Delta)^2 I_p) ) / normalizer

Canary hook (Nasr et al. 2023, "Dirac canaries"; contract for the canary audits)
------------------------------------------------------------------------------
``canaries`` is a :class:`CanaryGradients` (or a callable ``step -> CanaryGradients | None``,
called once per step) holding

* ``vectors`` -- a float tensor (m, p) of gradients in the flat parameter layout of
  :class:`~defenses.dp.params.ParamSpace` (the model's trainable ``named_parameters()`` in order;
  ``Trained`` records the names under ``extras['dp']['param_names']``), each of L2 norm at most the
  mechanism's unit clip norm C (``extras['dp']['unit_clip']``; 1e-6 relative slack, else
  ``ConfigError``);
* ``include`` -- a bool tensor (m,): which canaries take part in this step.

The included vectors are added to the clipped sum *before* the noise, exactly like m extra clipped
units, and are not divided by anything else. Including or excluding one canary therefore changes the
pre-noise sum by at most C, so each canary is protected at least as well as one unit of the
mechanism (C <= Delta for every method here). The noise draw does not depend on the canaries, so
runs that differ only in ``include`` share their noise. The history records ``canaries`` (the number
included) per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import torch

from audit.errors import ConfigError
from defenses.dp.noise import gaussian


@dataclass(frozen=True)
class CanaryGradients:
    """m canary gradients (m, p) in the flat parameter layout and which of them are included."""

    vectors: torch.Tensor
    include: torch.Tensor

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2:
            raise ConfigError(f"canaries.vectors: expected shape (m, p), got {tuple(self.vectors.shape)}")
        if self.include.shape != (self.vectors.shape[0],) or self.include.dtype != torch.bool:
            raise ConfigError(f"canaries.include: expected a bool tensor of shape ({self.vectors.shape[0]},), "
                              f"got {self.include.dtype} {tuple(self.include.shape)}")

    def total(self, size: int, clip: float, *, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
        """Sum of the included vectors after checking the layout and the norm bound."""
        if self.vectors.shape[1] != size:
            raise ConfigError(f"canaries.vectors: expected {size} columns (trainable parameters), "
                              f"got {self.vectors.shape[1]}")
        norms = torch.linalg.vector_norm(self.vectors.double(), dim=1)
        if norms.numel() and float(norms.max()) > clip * (1 + 1e-6):
            raise ConfigError(f"canaries.vectors: norm {float(norms.max()):.6g} exceeds the unit clip norm {clip:.6g}")
        chosen = self.vectors[self.include.to(self.vectors.device)]
        return chosen.sum(dim=0).to(device=device, dtype=dtype)


CanarySource = Union[CanaryGradients, Callable[[int], Union[CanaryGradients, None]]]


def canaries_at(source: CanarySource | None, step: int) -> CanaryGradients | None:
    if source is None or isinstance(source, CanaryGradients):
        return source
    return source(step)


def dirac_canaries(size: int, coordinates: torch.Tensor, norm: float, include: torch.Tensor) -> CanaryGradients:
    """Dirac canaries (Nasr et al. 2023): canary k is ``norm`` times the basis vector e_{coordinates[k]}."""
    coordinates = torch.as_tensor(coordinates, dtype=torch.long)
    vectors = torch.zeros(coordinates.numel(), size)
    vectors[torch.arange(coordinates.numel()), coordinates] = norm
    return CanaryGradients(vectors, torch.as_tensor(include, dtype=torch.bool))


@dataclass
class Release:
    """The noisy gradient and what it was made of (norms for the signal-to-noise ratio)."""

    gradient: torch.Tensor  # (signal + noise) / normalizer
    signal_norm: float  # ||clipped sum + canaries||
    noise_norm: float  # ||noise||
    canaries: int

    @property
    def snr(self) -> float:
        """Gradient SNR as DP-GCL Sec. 5.2 defines it: ||clean aggregated gradient|| / ||noise||."""
        return self.signal_norm / self.noise_norm if self.noise_norm > 0 else float("inf")


def release(clipped_total: torch.Tensor, noise_std: float, generator: torch.Generator, *, normalizer: float = 1.0,
            canaries: CanaryGradients | None = None, unit_clip: float | None = None) -> Release:
    """Add the included canaries and N(0, noise_std^2 I) to the clipped sum, divide by ``normalizer``."""
    if normalizer <= 0:
        raise ValueError(f"normalizer: must be > 0, got {normalizer}")
    signal = clipped_total
    n_canaries = 0
    if canaries is not None:
        if unit_clip is None:
            raise ValueError("unit_clip is required to add canaries")
        signal = signal + canaries.total(signal.numel(), unit_clip, device=signal.device, dtype=signal.dtype)
        n_canaries = int(canaries.include.sum())
    noise = gaussian(signal.shape, noise_std, generator, device=signal.device, dtype=signal.dtype)
    return Release((signal + noise) / normalizer, float(torch.linalg.vector_norm(signal)),
                   float(torch.linalg.vector_norm(noise)), n_canaries)
