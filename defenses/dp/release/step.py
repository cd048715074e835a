"""The Gaussian release of a clipped sum, with the white-box canary hook.

:func:`release` turns the clipped sum of a step into the noisy gradient the optimizer sees:

    g~ = ( sum_u w_u Clip_C(g_u)  +  sum_{k: include_k} v_k  +  N(0, (z * Delta)^2 I_p) ) / normalizer

Canary hook (Nasr et al. 2023, "Dirac canaries"; contract for the canary audits)
------------------------------------------------------------------------------
``canaries`` is a :class:`CanaryGradients` or :class:`DiracCanaries` (or a callable
``step -> canaries | None``, called once per step) holding

* the canary gradients in the flat parameter layout of :class:`~privaudit.defenses.dp.engine.params.ParamSpace` (the
  model's trainable ``named_parameters()`` in order; ``Trained`` records the names under
  ``extras['dp']['param_names']``): dense ``vectors`` (m, p), or Dirac ``coordinates`` (m,) with a
  common ``norm`` (Nasr et al. 2023), each of L2 norm at most the gradient mechanism's sensitivity
  Delta (``extras['dp']['canary_bound']``; 1e-6 relative slack, else ``ConfigError``);
* ``include`` -- a bool tensor (m,): which canaries take part in this step;
* ``probes`` -- optional (Dirac canaries), a value per canary added on its coordinate before the noise like a canary
  and *withdrawn* from the release right after the observer has seen it: the trajectory bound's per-step probes
  (:mod:`privaudit.attacks.canaries.gradient_canary`: +-Delta / 2 by a fresh coin each step). The observer sees them;
  the release, the normaliser and the model do not, so the run trains as it would without them;
* ``releases`` -- optional, by release name (:class:`~privaudit.defenses.dp.release.release_probes.ReleaseProbes`): the
  step's probes on a defense's other noised releases (DPCL's similarity matrix, Sec. 3.2.2, and statistics,
  Sec. 3.3.2), observed and withdrawn inside the step's own computation (the engine hands them to it through
  ``StepContext.release_probes``);
* ``observer`` -- optional, called with the step's privatised sum (signal + canaries + noise, before
  the normaliser): what a white-box auditor sees. With ``centred=True`` (Dirac canaries) it gets that
  sum minus the data's clipped sum (canaries + noise): the auditor also knows the rest of the
  training data and its batches, which removes the data gradient's interference on the canary
  coordinates. This stays a sound audit of the claim: under Poisson (or the canaries' own independent)
  sampling a canary's privacy loss does not rest on hiding the other examples' batch membership --
  given the others' contribution s_t, each step's pair is N(s_t, .) vs (1 - q) N(s_t, .) + q N(s_t + v, .),
  the dominating pair the accountant composes (adaptively), so the claim's epsilon holds against an
  adversary who knows s_t.

The included canaries are added to the clipped sum *before* the noise and are not divided by anything
else. Including or excluding one canary changes the pre-noise sum by at most Delta, the sensitivity
the noise is calibrated to: a canary is a worst-case example under the claim (an example may move
the clipped sum by Delta; a clipped unit only by C <= Delta), so a canary sampled like an example is
protected exactly as the claim says, and auditing it is sound and as tight as the claim allows. The
noise draw does not depend on the canaries, so runs that differ only in ``include`` share their
noise. The history records ``canaries`` (the number included) per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Union

import torch

from privaudit.core.errors import ConfigError
from privaudit.defenses.dp.release.as_run import noise_digest, tensor_noise_digests
from privaudit.defenses.dp.release.noise import gaussian
from privaudit.defenses.dp.release.noise_law import noise_law
from privaudit.defenses.dp.release.release_probes import ReleaseProbes


Observer = Callable[[torch.Tensor], None]


def _check_norms(norms: torch.Tensor, bound: float) -> None:
    if norms.numel() and float(norms.max()) > bound * (1 + 1e-6):
        raise ConfigError(f"canaries: norm {float(norms.max()):.6g} exceeds the mechanism's sensitivity {bound:.6g}")


@dataclass(frozen=True)
class CanaryGradients:
    """m canary gradients (m, p) in the flat parameter layout and which of them are included."""

    vectors: torch.Tensor
    include: torch.Tensor
    observer: Optional[Observer] = None

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2:
            raise ConfigError(f"canaries.vectors: expected shape (m, p), got {tuple(self.vectors.shape)}")
        if self.include.shape != (self.vectors.shape[0],) or self.include.dtype != torch.bool:
            raise ConfigError(f"canaries.include: expected a bool tensor of shape ({self.vectors.shape[0]},), "
                              f"got {self.include.dtype} {tuple(self.include.shape)}")

    def total(self, size: int, bound: float, *, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
        """Sum of the included vectors after checking the layout and the norm bound."""
        if self.vectors.shape[1] != size:
            raise ConfigError(f"canaries.vectors: expected {size} columns (trainable parameters), "
                              f"got {self.vectors.shape[1]}")
        _check_norms(torch.linalg.vector_norm(self.vectors.double(), dim=1), bound)
        chosen = self.vectors[self.include.to(self.vectors.device)]
        return chosen.sum(dim=0).to(device=device, dtype=dtype)


@dataclass(frozen=True)
class DiracCanaries:
    """m Dirac canaries: canary k is ``norm`` times the basis vector e_{coordinates[k]} (no dense (m, p) tensor)."""

    coordinates: torch.Tensor
    norm: float
    include: torch.Tensor
    observer: Optional[Observer] = None
    signs: Optional[torch.Tensor] = None  # +-1 per canary (paired replace-one canaries: +norm e_j or -norm e_j)
    centred: bool = False  # the observer gets the privatised sum minus the data's clipped sum (see release)
    probes: Optional[torch.Tensor] = None  # per canary, added before the noise and withdrawn after the observer
    releases: Optional[Mapping[str, ReleaseProbes]] = None  # probes on the step's other releases (docstring)

    def __post_init__(self) -> None:
        if self.coordinates.ndim != 1 or self.include.shape != self.coordinates.shape or self.include.dtype != torch.bool:
            raise ConfigError("canaries: coordinates and include must be 1-D of the same length, include bool")
        if self.signs is not None and self.signs.shape != self.coordinates.shape:
            raise ConfigError("canaries: signs must have the coordinates' shape")
        if self.probes is not None and self.probes.shape != self.coordinates.shape:
            raise ConfigError("canaries: probes must have the coordinates' shape")

    def total(self, size: int, bound: float, *, device: torch.device | str, dtype: torch.dtype) -> torch.Tensor:
        """The included canaries' sum in the flat layout, the probes (if any) added on their coordinates."""
        coords = self.coordinates.long()
        if coords.numel() and (int(coords.min()) < 0 or int(coords.max()) >= size):
            raise ConfigError(f"canaries.coordinates: must lie in [0, {size}) (trainable parameters)")
        _check_norms(torch.tensor([abs(float(self.norm))]), bound)
        out = torch.zeros(size, device=device, dtype=dtype)
        keep = self.include.to(coords.device)
        chosen = coords[keep].to(out.device)
        values = torch.full((chosen.numel(),), float(self.norm), device=out.device, dtype=dtype)
        if self.signs is not None:
            values = values * self.signs.to(coords.device)[keep].to(device=out.device, dtype=dtype).sign()
        out.index_add_(0, chosen, values)
        probes = self.withdrawal(size, bound, device=device, dtype=dtype)
        return out if probes is None else out + probes

    def withdrawal(self, size: int, bound: float, *, device: torch.device | str,
                   dtype: torch.dtype) -> torch.Tensor | None:
        """The probes in the flat layout (None without probes): what the release subtracts after the observer."""
        if self.probes is None:
            return None
        _check_norms(self.probes.detach().abs().double().max().reshape(1), bound)
        out = torch.zeros(size, device=device, dtype=dtype)
        return out.index_add_(0, self.coordinates.long().to(out.device), self.probes.to(device=out.device, dtype=dtype))


Canaries = Union[CanaryGradients, DiracCanaries]
CanarySource = Union[Canaries, Callable[[int], Union[Canaries, None]]]


def canaries_at(source: CanarySource | None, step: int) -> Canaries | None:
    if source is None or isinstance(source, (CanaryGradients, DiracCanaries)):
        return source
    return source(step)


def dirac_canaries(coordinates: torch.Tensor, norm: float, include: torch.Tensor,
                   observer: Observer | None = None, signs: torch.Tensor | None = None,
                   centred: bool = False, probes: torch.Tensor | None = None,
                   releases: Mapping[str, ReleaseProbes] | None = None) -> DiracCanaries:
    """Dirac canaries (Nasr et al. 2023): canary k is ``norm`` (times ``signs[k]``) times e_{coordinates[k]};
    ``probes[k]`` (optional) is added on the same coordinate and withdrawn after the observer (module docstring)."""
    return DiracCanaries(torch.as_tensor(coordinates, dtype=torch.long), float(norm),
                         torch.as_tensor(include, dtype=torch.bool), observer,
                         None if signs is None else torch.as_tensor(signs), centred,
                         None if probes is None else torch.as_tensor(probes), releases)


@dataclass
class Release:
    """The noisy gradient and what it was made of (norms for the signal-to-noise ratio)."""

    gradient: torch.Tensor  # (signal + noise) / normalizer
    signal_norm: float  # ||clipped sum + canaries||
    noise_norm: float  # ||noise||
    canaries: int
    normalizer: float = 1.0  # what the noisy sum was divided by
    noise_digest: str | None = None  # of the noise drawn (defenses.dp.release.as_run.noise_digest)
    tensor_digests: list | None = None  # of every tensor's leading noise values (defenses.dp.release.as_run)
    noise_law: dict | None = None  # the noise's joint law within the step (defenses.dp.release.noise_law)

    @property
    def snr(self) -> float:
        """Gradient SNR as DP-GCL Sec. 5.2 defines it: ||clean aggregated gradient|| / ||noise||."""
        return self.signal_norm / self.noise_norm if self.noise_norm > 0 else float("inf")


def release(clipped_total: torch.Tensor, noise_std: float, generator: torch.Generator, *, normalizer: float = 1.0,
            canaries: Canaries | None = None, canary_bound: float | None = None, added_scale: float = 1.0,
            segments: list[int] | None = None, shapes: list | None = None) -> Release:
    """Add the included canaries and N(0, noise_std^2 I) to the clipped sum, divide by ``normalizer``.

    ``canary_bound`` is the largest canary norm allowed: the gradient mechanism's sensitivity Delta.
    ``added_scale`` (1 but in positive controls) scales the noise as it is added, after its norm is recorded: a
    planted shortfall only an end-to-end measurement (the canaries' observations) can see. ``segments`` (the
    parameter tensors' sizes in the flat layout) adds each tensor's leading-noise digest to the release's record;
    ``shapes`` (the tensors' shapes) the record of the noise's joint law within the step (:func:`noise_law`).
    """
    if normalizer <= 0:
        raise ValueError(f"normalizer: must be > 0, got {normalizer}")
    signal, withdrawn = clipped_total, None
    n_canaries = 0
    if canaries is not None:
        if canary_bound is None:
            raise ValueError("canary_bound is required to add canaries")
        signal = signal + canaries.total(signal.numel(), canary_bound, device=signal.device, dtype=signal.dtype)
        n_canaries = int(canaries.include.sum())
        if isinstance(canaries, DiracCanaries):
            withdrawn = canaries.withdrawal(signal.numel(), canary_bound, device=signal.device, dtype=signal.dtype)
    noise = gaussian(signal.shape, noise_std, generator, device=signal.device, dtype=signal.dtype)
    noisy = signal + (noise if added_scale == 1.0 else added_scale * noise)
    if canaries is not None and canaries.observer is not None:
        centred = getattr(canaries, "centred", False)
        canaries.observer((noisy - clipped_total).detach() if centred else noisy.detach())
    if withdrawn is not None:  # the probes leave the release: the model trains as it would without them
        noisy, signal = noisy - withdrawn, signal - withdrawn
    return Release(noisy / normalizer, float(torch.linalg.vector_norm(signal)),
                   float(torch.linalg.vector_norm(noise)), n_canaries, float(normalizer), noise_digest(noise),
                   None if segments is None else tensor_noise_digests(noise, segments),
                   None if shapes is None else noise_law(noise, shapes))
