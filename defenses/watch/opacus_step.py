"""One Opacus release as it ran: what :class:`~privaudit.defenses.watch.opacus_watch.OpacusWatch` sees inside a
``DPOptimizer.pre_step``.

Opacus' ``pre_step`` calls, on the optimizer, ``clip_and_accumulate`` (per-sample clipping into ``p.summed_grad``),
``add_noise`` (``p.grad = p.summed_grad + N(0, (z C)^2)``), ``scale_grad`` (``p.grad /= expected_batch_size *
accumulated_iterations`` under ``loss_reduction="mean"``) and the accountant's step hook. For the duration of one
``pre_step`` the watch shadows each of the three methods *as the optimizer resolves them* (an instance attribute a
recipe set, or the class's) with a recording shim that calls it, so a recipe that replaced one of them is observed
as it ran:

* clipping (:meth:`StepObserver.clip`): before the real call the same method is run on each of the ``probe``
  units alone (the unit of largest raw norm rescaled to a drawn norm and to just below the clip:
  :data:`PROBE_UNITS`), its per-sample gradient as the only row, and the norm of what it accumulated is that unit's
  norm *after clipping as the code applied it* (``unit_norm_max``: the largest); what the probe added to the
  optimizer's own statistics (an adaptive clip's count) is measured and undone;
* noise (:meth:`StepObserver.noise`): the data's clipped sum is read, the canaries of the hook of
  :mod:`privaudit.defenses.dp.release.step` (Dirac, norm at most the clip C the noise is calibrated to) are added to it,
  the method runs, and ``p.grad - summed`` is the noise it added (its norm; per tensor, whether any was added);
  the stds of Opacus' ``_generate_noise`` draws and a digest of the drawn noise come from the watch's
  interception of that function; the noise's joint law within the release
  (:mod:`privaudit.defenses.dp.release.noise_law`:
  its correlations on what was added, its repeated values on what was drawn); the observer gets the noisy sum less
  the data's clipped sum (canaries + noise), and the trajectory probes of the hook (``probes``) are then withdrawn
  from ``p.grad``, so the normaliser and the optimizer's step see the data's clipped sum, the canaries and the noise,
  as without probes. A draw whose reference is neither a parameter's clipped sum nor of a parameter's shape noises
  another query the release answers (Opacus' AdaClipDPOptimizer: the count of unclipped units its clip update reads): it
  is kept out of the gradient's noise std and digests, linked to the optimizer attribute it noises, measured (its
  sensitivity by the clipping probe, the noise it received after the release) and composed with the gradient into the
  release's multiplier (``other_queries``, ``composed``: :mod:`privaudit.defenses.watch.opacus_queries`);
* the normaliser (:meth:`StepObserver.scale`): what the release divided the noisy sum by, measured as
  ``<g, g> / <g, g'>`` from the gradient before (g) and after (g') the call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from privaudit.accountants.trace import rounding
from privaudit.defenses.dp.release.as_run import noise_digest, tensor_noise_digests
from privaudit.defenses.dp.release.noise_law import released_law
from privaudit.defenses.dp.release.step import CanarySource, canaries_at
from privaudit.defenses.watch.opacus_queries import (BELOW_CLIP, Probe, Query, changes, compose, linked, received,
                                               restore, snapshot)

#: Units per step whose clipping is replayed alone: the step's unit of largest raw norm rescaled to a norm t C drawn
#: afresh each step, log-uniform on [C/2, max(4C, its own norm)], by a generator of the observer's own seeded by the
#: step (the user's random numbers are untouched); from 2, the same unit as it ran too. Clipping is a function of one
#: unit, so the rescaled copy is the code's own clipping at a norm the data may not reach yet: over a run the probe
#: covers every norm from C/2 to the largest the data reached, and a clipping that spares mid-norm units (a threshold
#: above the clip norm) shows even while every real unit is far above it. Besides them, the same unit just below the
#: clip (:data:`~privaudit.defenses.watch.opacus_queries.BELOW_CLIP`) is always probed: it enters the gradient whole,
#: and a statistic of the clipping (an adaptive clip's count of unclipped units) counts it. Each probe is one call of
#: the code's clipping.
PROBE_UNITS = 1


def drawn_norm(step: int, clip: float, norm: float) -> float:
    """A norm t C log-uniform on [C/2, max(4C, ``norm``)], drawn by a generator of the probe's own seeded by ``step``
    (the user's random numbers are untouched)."""
    gen = torch.Generator().manual_seed(step)
    low, high = math.log(clip / 2), math.log(max(4 * clip, norm))
    return math.exp(low + (high - low) * float(torch.rand((), generator=gen, dtype=torch.float64)))


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors flattened and concatenated (the optimizer's parameter order: the flat layout)."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


@dataclass
class StepRecord:
    """What one release did (the :class:`~privaudit.accountants.trace.trace_record.TrainingTrace` step columns)."""

    units: int = 0
    unit_norm_max: float | None = None
    unit_norm_slack: float | None = None  # the unit-norm check's relative slack, where larger than float32's
    clip: float = 0.0
    multiplier: float = 0.0
    noise_std: float = 0.0
    drawn_std: float | None = None
    noise_norm: float | None = None
    noise_digest: str | None = None
    tensor_digests: list[str | None] | None = None
    noise_law: dict[str, Any] | None = None  # the noise's joint law within the release (defenses.dp.release.noise_law)
    normalizer: float | None = None
    silent_tensors: list[int] = field(default_factory=list)
    canaries: int = 0
    accountant: list[tuple[float, float]] = field(default_factory=list)
    indices: torch.Tensor | None = None  # the batch drawn (kept by the first release and a replay's: OpacusWatch)
    batch: int | None = None  # its size
    release: torch.Tensor | None = None  # kept by a replay (``keep``): the released flat gradient, after scaling
    draws: list[torch.Tensor] | None = None  # kept by a replay: the noise tensors drawn, in order
    chunks: list[tuple[int, ...]] | None = None  # kept by a replay: the loader batches the release drew, in order
    other_queries: list[dict[str, Any]] = field(default_factory=list)  # Gaussian draws not on the gradient
    composed: float | None = None  # the release's multiplier with its judged other queries composed in
    #: what the values were computed in (:mod:`privaudit.accountants.trace.rounding`): ``noise`` (the stds' and clip's
    #: least precise dtype), ``unit_norm`` (the per-sample gradients'), ``release`` (the released gradient's)
    dtypes: dict[str, str] = field(default_factory=dict)
    unit_terms: int = 0  # the values of one unit (the terms of the norm the code clipped by)


class StepObserver:
    """The shims of one ``pre_step`` (module docstring); ``draws`` collects the ``_generate_noise`` results."""

    def __init__(self, opt: Any, step: int, canaries: CanarySource | None, record: StepRecord,
                 probe: int = PROBE_UNITS, keep: bool = False):
        self.opt, self.step, self.canaries, self.rec, self.probe, self.keep = opt, step, canaries, record, probe, keep
        self.draws: list[tuple[float, torch.Tensor]] = []
        self.gradient: list[bool] = []  # per draw: noise on the gradient (else another query the release answers)
        self.std_dtypes: list[str] = []  # per gradient draw: the dtype its std was computed in
        self.queries: list[Query] = []  # the draws not on the gradient (:mod:`privaudit.defenses.watch.opacus_queries`)
        self.probes: list[Probe] = []  # every probe unit of the release's clipping calls

    def drawn(self, std: Any, reference: Any, noise: torch.Tensor) -> None:
        """One ``_generate_noise`` draw (the watch's interception): on the gradient, or another query linked to the
        optimizer attribute it noises."""
        self.draws.append((float(std), noise.detach().clone()))
        gradient = self.is_gradient(reference)
        self.gradient.append(gradient)
        if gradient:
            self.std_dtypes.append(rounding.dtype_name(std))
        else:
            self.queries.append(linked(self.opt, std, reference, noise))

    def is_gradient(self, reference: Any) -> bool:
        """Whether a ``_generate_noise`` draw noises the gradient: its reference is a parameter's clipped sum, or has
        a parameter's shape (AdaClip's unclipped-unit count is a scalar: another query)."""
        params = self.opt.params
        if any(reference is p.summed_grad for p in params):
            return True
        shape = getattr(reference, "shape", None)
        return bool(shape) and any(tuple(p.shape) == tuple(shape) for p in params)

    def clip(self, inner: Callable[[], Any]) -> Any:
        params = self.opt.params
        samples = [p.grad_sample for p in params]
        rows = [self.opt._get_flat_grad_sample(p) for p in params]
        if len(rows) and len(rows[0]):
            self.rec.units += int(len(rows[0]))
            self.rec.dtypes["unit_norm"] = rounding.least_precise(*(rounding.dtype_name(r) for r in rows))
            self.rec.unit_terms = sum(int(r[0].numel()) for r in rows)
            self._probe(params, rows, inner)
        for p, s in zip(params, samples):
            p.grad_sample = s
        return inner()

    def _probe(self, params: list[torch.nn.Parameter], rows: list[torch.Tensor], inner: Callable[[], Any]) -> None:
        """The clipped norm of each probe unit (:meth:`_probes`) run through the code's own clipping alone, and its
        change to the optimizer's statistics (which are restored after each: the release's are the batch's alone)."""
        prior = [p.summed_grad for p in params]
        best = self.rec.unit_norm_max or 0.0
        try:
            for unit in self._probes(rows):
                for p, r in zip(params, unit):
                    p.grad_sample, p.summed_grad = r, None
                snap = snapshot(self.opt)
                try:
                    inner()
                    moved = changes(self.opt, snap)
                finally:
                    restore(self.opt, snap)
                norm = float(flat([p.summed_grad for p in params]).double().norm())
                self.probes.append(Probe(norm, moved))
                best = max(best, norm)
        finally:
            for p, s in zip(params, prior):
                p.summed_grad = s
        self.rec.unit_norm_max = best

    def _probes(self, rows: list[torch.Tensor]) -> list[list[torch.Tensor]]:
        """The probe units (:data:`PROBE_UNITS`), each as one row per parameter: the largest raw norm's unit
        rescaled to a drawn norm and to just below the clip
        (:data:`~privaudit.defenses.watch.opacus_queries.BELOW_CLIP`:
        it enters the gradient whole, and is the unit a statistic of the clipping counts as unclipped), then (from
        2) the unit as it ran."""
        raw = torch.stack([r.reshape(len(r), -1).norm(dim=1) for r in rows], dim=1).norm(dim=1)
        top = int(torch.argmax(raw))
        unit, norm = [r[top:top + 1].detach().clone() for r in rows], float(raw[top])
        if norm <= 0:
            return [unit]
        clip = float(self.opt.max_grad_norm)
        t, near = drawn_norm(self.step, clip, norm), clip * (1 - BELOW_CLIP)
        return [[u * (t / norm) for u in unit], [u * (near / norm) for u in unit]] + [unit] * (self.probe > 1)

    def noise(self, inner: Callable[[], Any]) -> Any:
        params = self.opt.params
        z, c = float(self.opt.noise_multiplier), float(self.opt.max_grad_norm)
        self.rec.clip, self.rec.multiplier, self.rec.noise_std = c, z, z * c
        data = flat([p.summed_grad for p in params]).clone()
        inserted = self._add_canaries(params, data, c)
        base = data if inserted is None else flat([p.summed_grad for p in params]).clone()
        out = inner()
        grads = flat([p.grad for p in params])
        added = grads - (data if inserted is None else data + inserted[0])
        self.rec.noise_norm = float(added.double().norm())
        self.rec.silent_tensors = _silent(added, [p.numel() for p in params])
        grad = [d for d, g in zip(self.draws, self.gradient) if g]
        if grad:
            self.rec.drawn_std = min(s for s, _ in grad)
            drawn = torch.cat([d.reshape(-1) for _, d in grad])
            self.rec.noise_digest = noise_digest(drawn)
            self.rec.tensor_digests = tensor_noise_digests(drawn, [d.numel() for _, d in grad])
        self.rec.noise_law = released_law(grads, base, [p.shape for p in params], [d for _, d in grad])
        if self.keep and self.draws:
            self.rec.draws = [d for _, d in self.draws]
        self._other_queries()
        operands = [self.opt.max_grad_norm, self.opt.noise_multiplier]
        self.rec.dtypes.update(release=rounding.dtype_name(grads), noise=rounding.least_precise(
            *self.std_dtypes, *map(rounding.dtype_name, operands),
            *(q.stat_dtype for q in self.queries if q.name is not None)))
        if inserted is not None and inserted[1].observer is not None:
            seen = (grads - data) if getattr(inserted[1], "centred", False) else grads
            inserted[1].observer(seen if inserted[2] == 1.0 else seen / inserted[2])
        if inserted is not None and inserted[3] is not None:
            _add_flat(params, -inserted[3], "grad")  # the probes leave the release before the normaliser and the step
        return out

    def _other_queries(self) -> None:
        """The draws not on the gradient: which statistic each noised and how much of the draw it received, composed
        with the gradient's release into the release's multiplier (:mod:`privaudit.defenses.watch.opacus_queries`)."""
        for q in self.queries:
            received(self.opt, q)
        if self.queries:
            std = self.rec.noise_std if self.rec.drawn_std is None else self.rec.drawn_std
            self.rec.composed = compose(self.rec.clip, std, self.probes, self.queries)
        self.rec.other_queries = [q.to_dict() for q in self.queries]

    def _add_canaries(self, params: list[torch.nn.Parameter], data: torch.Tensor, bound: float):
        """Add the step's canaries to ``p.summed_grad`` (before the noise); (their flat vector, the canaries, the
        scale). Dirac canaries planned at norm C_1 (the first release's clip) enter a release whose clip is C_t at
        norm C_t, the scale C_t / C_1, and the observer gets the release divided by it: in C_1's units the canaries are
        as planned and the noise's std is the release's multiplier times C_1 at every step (an adaptive clip,
        Opacus' AdaClipDPOptimizer, moves C_t; the scale is fixed before the step's noise is drawn)."""
        chosen = canaries_at(self.canaries, self.step)
        if chosen is None:
            return None
        planned = float(getattr(chosen, "norm", bound))
        scale = bound / planned if 0 < planned != bound else 1.0
        at = planned if scale != 1.0 else bound
        vec = chosen.total(data.numel(), at, device=data.device, dtype=data.dtype)
        vec = vec if scale == 1.0 else vec * scale
        probes = chosen.withdrawal(data.numel(), at, device=data.device, dtype=data.dtype) \
            if hasattr(chosen, "withdrawal") else None
        if probes is not None and scale != 1.0:
            probes = probes * scale
        _add_flat(params, vec, "summed_grad")
        self.rec.canaries = int(chosen.include.sum())
        return vec, chosen, scale, probes

    def scale(self, inner: Callable[[], Any]) -> Any:
        before = flat([p.grad for p in self.opt.params]).double()
        out = inner()
        after = flat([p.grad for p in self.opt.params]).double()
        cross = float(before @ after)
        self.rec.normalizer = float(before @ before) / cross if cross > 0 else None
        if self.keep:
            self.rec.release = after
        return out


def _add_flat(params: list[torch.nn.Parameter], vec: torch.Tensor, attr: str) -> None:
    """Add the flat ``vec`` (the optimizer's parameter layout) to each parameter's ``attr`` tensor in place."""
    start = 0
    for p in params:
        k = p.numel()
        target = getattr(p, attr)
        target.add_(vec[start:start + k].view_as(target))
        start += k


def _silent(added: torch.Tensor, numels: list[int]) -> list[int]:
    """The tensors (positions in the flat layout) to which exactly no noise was added."""
    out, start = [], 0
    for j, k in enumerate(numels):
        if k and not bool(added[start:start + k].any()):
            out.append(j)
        start += k
    return out
