"""The declared release: how a plain PyTorch loop that adds its own noise shows privaudit where it releases.

A loop that does not go through Opacus' ``DPOptimizer`` wraps the line that adds its noise in
``privaudit.declare_release``::

    with privaudit.declare_release(sums, noise_multiplier=z, clip_norm=C, sample_rate=q, batch=idx,
                                   normalizer=B, units=clipped):
        for s in sums:
            s.add_(torch.normal(0.0, z * C, s.shape, generator=gen))

``sums``: the tensors released (the clipped per-unit gradients summed, one per parameter, in the parameters'
order), noised *in place* inside the block. Outside an audit the block does nothing. Inside
:class:`~privaudit.defenses.watch.opacus_watch.OpacusWatch` (``privaudit audit-training``) it is one *release*, observed
as Opacus' are (:mod:`privaudit.defenses.watch.opacus_step`):

* on entry the tensors (the data's clipped sum) are read and the canaries of the hook of
  :mod:`privaudit.defenses.dp.release.step` (Dirac, norm at most ``clip_norm``) are added to them in place;
* on exit what the block added (the tensors less the clipped sum and the canaries) is the noise: its norm (checked
  against chi^2 at the declared std ``noise_multiplier * clip_norm``) and every tensor it left exactly unchanged;
  the canaries' observer gets the noisy sum less the data's clipped sum, and the trajectory probes (the hook's
  ``probes``) are then withdrawn from the tensors, so the loop goes on with its own release. The noise is measured
  as a float difference, not intercepted as drawn, so no digest is recorded: reused noise is seen by the canaries'
  noise-independence check (:mod:`privaudit.attacks.noise.noise_structure`), not by the trace's digest check. Its joint
  law within the release (:mod:`privaudit.defenses.dp.release.noise_law`: correlation at a lag within a tensor and
  between tensors of one size) is recorded less the rounding of the addition; its repeated values are not (a
  difference's values are not the ones drawn).

Declared, not measured: ``noise_multiplier``, ``clip_norm`` and ``sample_rate`` (the claim the loop makes, Python
numbers: the trace compares them at float64's rounding; the noise measured and the batches drawn are checked against
them), ``normalizer`` (what the loop divides the noisy sum by
afterwards: a value that follows the batch or the dataset's size is found by the trace and the neighbours replayed).
``batch``: the indices into the training set the step drew (the sampling checks); ``units``: the clipped per-unit
gradients that were summed, one tensor (units, *shape) per released tensor (their norms are the clip as applied;
without them the clip is not observed).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch

from privaudit.accountants.trace import rounding
from privaudit.core.errors import ConfigError
from privaudit.defenses.dp.release.step import canaries_at

#: The watches open now (innermost last); a declared release is recorded by the innermost.
ACTIVE: list[Any] = []


def _flat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _check(tensors: Sequence[torch.Tensor], noise_multiplier: float, clip_norm: float, sample_rate: float,
           normalizer: float) -> list[torch.Tensor]:
    """The declaration's fields, each named when it cannot describe a Gaussian release."""
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    tensors = list(tensors)
    if not tensors or not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in tensors):
        raise ConfigError("declare_release: tensors: expected a floating-point tensor or a list of them")
    for name, value, low in (("noise_multiplier", noise_multiplier, 0.0), ("clip_norm", clip_norm, 0.0),
                             ("normalizer", normalizer, 0.0)):
        if not (isinstance(value, (int, float)) and float(value) > low):
            raise ConfigError(f"declare_release: {name}: expected a number > 0, got {value!r}")
    if not (isinstance(sample_rate, (int, float)) and 0 < float(sample_rate) <= 1):
        raise ConfigError(f"declare_release: sample_rate: expected a number in (0, 1], got {sample_rate!r}")
    return tensors


@contextmanager
def declare_release(tensors: torch.Tensor | Sequence[torch.Tensor], *, noise_multiplier: float, clip_norm: float,
                    sample_rate: float, normalizer: float = 1.0, batch: torch.Tensor | None = None,
                    units: Sequence[torch.Tensor] | None = None) -> Iterator[None]:
    """One release of a plain loop (module docstring): add the noise to ``tensors`` in place inside the block."""
    tensors = _check(tensors, noise_multiplier, clip_norm, sample_rate, normalizer)
    if not ACTIVE:
        yield
        return
    step = DeclaredStep(ACTIVE[-1], tensors, float(noise_multiplier), float(clip_norm), float(sample_rate),
                        float(normalizer), batch, units)
    step.enter()
    yield
    step.exit()


class DeclaredStep:
    """One declared release under a watch: the canaries added on entry, the noise measured on exit."""

    def __init__(self, watch: Any, tensors: list[torch.Tensor], z: float, clip: float, rate: float,
                 normalizer: float, batch: torch.Tensor | None, units: Sequence[torch.Tensor] | None):
        from privaudit.defenses.watch.opacus_step import StepRecord

        self.watch, self.tensors, self.rate = watch, tensors, rate
        self.rec = StepRecord(clip=clip, multiplier=z, noise_std=z * clip, normalizer=normalizer,
                              dtypes={"noise": rounding.DEFAULT, "normalizer": rounding.DEFAULT,
                                      "release": rounding.least_precise(*(rounding.dtype_name(t) for t in tensors))})
        if batch is not None:
            self.rec.indices = torch.as_tensor(batch, dtype=torch.long).reshape(-1)
        self._units(units)
        self.data: torch.Tensor | None = None
        self.inserted: Any = None

    def _units(self, units: Sequence[torch.Tensor] | None) -> None:
        """The clipped units' count and largest norm (over all released tensors together)."""
        if units is None:
            self.rec.units = 0 if self.rec.indices is None else int(self.rec.indices.numel())
            return
        units = [units] if isinstance(units, torch.Tensor) else list(units)
        if len(units) != len(self.tensors) or any(u.shape[1:] != t.shape for u, t in zip(units, self.tensors)):
            raise ConfigError("declare_release: units: expected one tensor (units, *shape) per released tensor")
        rows = torch.cat([u.detach().reshape(len(u), -1) for u in units], dim=1)
        self.rec.dtypes["unit_norm"] = rounding.least_precise(*(rounding.dtype_name(u) for u in units))
        self.rec.unit_terms = int(rows.shape[1])  # the norm is recomputed here from the loop's clipped units
        rows = rows.double()
        self.rec.units = int(rows.shape[0])
        self.rec.unit_norm_max = float(rows.norm(dim=1).max()) if rows.shape[0] else None

    def enter(self) -> None:
        self.data = _flat(self.tensors).clone()
        self.base = self.data
        chosen = canaries_at(self.watch.canaries, len(self.watch.steps))
        if chosen is None:
            return
        vec = chosen.total(self.data.numel(), self.rec.clip, device=self.data.device, dtype=self.data.dtype)
        start = 0
        with torch.no_grad():
            for t in self.tensors:
                t.add_(vec[start:start + t.numel()].view_as(t))
                start += t.numel()
        self.rec.canaries = int(chosen.include.sum())
        probes = chosen.withdrawal(self.data.numel(), self.rec.clip, device=self.data.device, dtype=self.data.dtype) \
            if hasattr(chosen, "withdrawal") else None
        self.inserted = (vec, chosen, probes)
        self.base = _flat(self.tensors).clone()

    def exit(self) -> None:
        from privaudit.defenses.watch.opacus_step import _silent

        after = _flat(self.tensors)
        added = after - (self.data if self.inserted is None else self.data + self.inserted[0])
        self.rec.noise_norm = float(added.double().norm())
        self.rec.silent_tensors = _silent(added, [t.numel() for t in self.tensors])
        self.rec.noise_law = self._law(after)
        if self.inserted is not None and self.inserted[1].observer is not None:
            self.inserted[1].observer(after - self.data)
        if self.inserted is not None and self.inserted[2] is not None:  # the probes leave the loop's release
            start, probes = 0, self.inserted[2]
            with torch.no_grad():
                for t in self.tensors:
                    t.sub_(probes[start:start + t.numel()].view_as(t))
                    start += t.numel()
        self.watch.record_declared(self.rec, [int(t.numel()) for t in self.tensors], self.rate)

    def _law(self, after: torch.Tensor) -> dict | None:
        """The noise's joint law on what the block added
        (:func:`~privaudit.defenses.dp.release.noise_law.released_law`)."""
        from privaudit.defenses.dp.release.noise_law import released_law

        return released_law(after, self.base, [t.shape for t in self.tensors])
