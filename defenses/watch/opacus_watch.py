"""Watch an unmodified Opacus training function run: every release it makes, recorded as it ran.

:class:`OpacusWatch` is a context manager around the user's ``train(model, x, y, seed=...)``. While it is open it
patches, at class level (restored on exit, whatever happens):

* ``DPOptimizer.pre_step`` (and every subclass's own): each call that adds noise is one *release*; inside it the
  optimizer's clipping, noise and normaliser are observed (:mod:`privaudit.defenses.watch.opacus_step`), and the
  canaries of the hook of :mod:`privaudit.defenses.dp.release.step` are added to the clipped sum before the noise;
* Opacus' ``_generate_noise`` (in every Opacus module that holds it): the std of each draw and the noise drawn;
* ``torch.utils.data``'s loader iterator (``_next_index``): the index batches drawn from the training set (a
  loader over ``population`` records), assigned to the release that follows them, and the sampler that drew them
  (Opacus' ``UniformWithReplacementSampler``: Poisson at its ``sample_rate``; torch's ``RandomSampler`` /
  ``SequentialSampler`` in a ``BatchSampler``: shuffled / sequential fixed-size batches);
* every Opacus accountant's ``step``: the (noise multiplier, sample rate) the accountant was told at each release,
  and the last accountant stepped (the claim when the training function returns none);
* a plain loop's declared releases (:mod:`privaudit.defenses.watch.declared_release`): while the watch is open it is the
  one ``privaudit.declare_release`` records into (an accountant stepped after a declared release is that release's).

:meth:`OpacusWatch.trace` turns the records into the :class:`~privaudit.accountants.trace.trace_record.TrainingTrace`
that :func:`~privaudit.accountants.trace.trace.check_trace` judges. ``stop_after`` ends the run after that many releases
(:class:`Stopped`, a ``BaseException`` a training loop's ``except Exception`` does not swallow): the replays of
:mod:`privaudit.audit.user.training.training_neighbours` need only the first steps' configuration. A
:class:`ReplayScript`
makes the run a replay: the loaders yield its batches and ``_generate_noise`` returns its noise (each draw still
made), and ``keep`` keeps each release's released gradient and noise on its record
(:mod:`privaudit.audit.user.training.release_replay`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch

from privaudit.accountants.trace import rounding
from privaudit.accountants.trace.trace_record import TrainingTrace
from privaudit.defenses.watch.declared_release import ACTIVE
from privaudit.defenses.dp.release.as_run import SamplingRecorder
from privaudit.defenses.dp.release.step import CanarySource
from privaudit.defenses.watch.opacus_ghost import GHOST_SLACK, GhostClip, ghost_classes, ghost_probe
from privaudit.defenses.watch.opacus_step import PROBE_UNITS, StepObserver, StepRecord

SHIMMED = ("clip_and_accumulate", "add_noise", "scale_grad")


@dataclass(frozen=True)
class ReplayScript:
    """What a replay of a recorded run substitutes (:mod:`privaudit.audit.user.training.release_replay`): ``batches``,
    the index lists the data loaders yield in order (in place of what the sampler draws), and ``draws``, per release
    the noise tensors ``_generate_noise`` returns in order (each still drawn, so the generator advances as it ran)."""

    batches: tuple[tuple[int, ...], ...] = ()
    draws: tuple[tuple[torch.Tensor, ...], ...] = ()


def _sized(it: Any) -> int | None:
    """The size of a data loader iterator's dataset (None when it has none)."""
    try:
        return len(it._dataset)
    except TypeError:
        return None


class Stopped(BaseException):
    """Raised from a release once ``stop_after`` releases are recorded."""


def sampler_kind(batch_sampler: Any) -> tuple[str, float | None]:
    """(kind, Opacus' configured rate) of a loader's batch sampler: ``poisson``, ``shuffled``, ``sequential`` or
    ``unknown`` (Opacus' batch splitting for physical batches is looked through)."""
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

    inner = getattr(batch_sampler, "sampler", None)
    if type(batch_sampler).__name__ == "BatchSplittingSampler" and inner is not None:
        batch_sampler = inner
    if type(batch_sampler).__name__ in ("UniformWithReplacementSampler", "DistributedUniformWithReplacementSampler"):
        return "poisson", float(batch_sampler.sample_rate)
    if isinstance(batch_sampler, BatchSampler):
        if isinstance(batch_sampler.sampler, RandomSampler):
            return "shuffled", None
        if isinstance(batch_sampler.sampler, SequentialSampler):
            return "sequential", None
    return "unknown", None


class OpacusWatch:
    """Records every release of an Opacus run (module docstring). ``population``: the training set's size;
    ``canaries``: the canary hook's source (step -> canaries or None); ``names``: parameter id -> name."""

    def __init__(self, population: int, *, canaries: CanarySource | None = None, stop_after: int | None = None,
                 names: dict[int, str] | None = None, probe: int = PROBE_UNITS, script: ReplayScript | None = None,
                 keep: bool = False):
        self.population, self.canaries, self.stop_after, self.probe = int(population), canaries, stop_after, probe
        self.script, self.keep = script, keep
        self.replaced = {"batches": 0, "draws": 0, "mismatched": 0}  # what the script replaced, and what it could not
        self.names = names or {}
        self.steps: list[StepRecord] = []
        self.sampling = SamplingRecorder(self.population)  # every release's batch, streamed in as it is drawn
        self.unsampled = 0  # releases whose batch was not seen
        self.pending: list[torch.Tensor] = []
        self.loader: dict[str, Any] | None = None
        self.optimizer: dict[str, Any] | None = None
        self.accountant: Any = None
        self.unaccounted: list[tuple[float, float]] = []
        self._current: StepObserver | None = None
        self._declared: StepRecord | None = None  # the last declared release, until an accountant steps
        self._depth = 0
        self._undo: list[Callable[[], None]] = []
        self.ghost: list[GhostClip] = []  # fast (ghost) clipping's backward passes since the last release
        self._ghost_loss: list[Any] = []  # the DPTensorFastGradientClipping whose backward is running

    # -- patching --------------------------------------------------------------------------------------
    def __enter__(self) -> "OpacusWatch":
        try:
            self._patch_optimizers()
            self._patch_noise()
            self._patch_loader()
            self._patch_accountants()
            self._patch_ghost()
        except BaseException:
            self._restore()
            raise
        ACTIVE.append(self)
        self._undo.append(lambda: ACTIVE.remove(self))
        return self

    def __exit__(self, *exc: Any) -> bool:
        self._restore()
        return exc[0] is Stopped

    def _restore(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _set(self, owner: Any, name: str, value: Any) -> None:
        old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, old))

    def _patch_optimizers(self) -> None:
        import opacus.optimizers  # noqa: F401  (every DPOptimizer subclass, so each own pre_step is found)
        from opacus.optimizers.optimizer import DPOptimizer

        for cls in [DPOptimizer, *_subclasses(DPOptimizer)]:
            if "pre_step" in cls.__dict__:
                self._set(cls, "pre_step", self._pre_step(cls.__dict__["pre_step"]))

    def _patch_noise(self) -> None:
        import opacus.optimizers.optimizer as base

        original = base._generate_noise

        def generate(std: float, reference: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            noise = original(std, reference, *args, **kwargs)  # drawn either way: the generator advances as it ran
            if self._current is not None:
                noise = self._scripted_noise(noise)
                self._current.drawn(std, reference, noise)
            return noise

        for name, module in list(sys.modules.items()):
            if name.startswith("opacus") and getattr(module, "_generate_noise", None) is original:
                self._set(module, "_generate_noise", generate)

    def _patch_loader(self) -> None:
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        original = _BaseDataLoaderIter._next_index

        def next_index(it: Any) -> Any:
            index = original(it)
            if self.script is not None and self.script.batches and _sized(it) == self.population:
                index = self._scripted_batch(index)
            self._saw_batch(it, index)
            return index

        self._set(_BaseDataLoaderIter, "_next_index", next_index)

    def _patch_accountants(self) -> None:
        import opacus.accountants  # noqa: F401  (every accountant class)
        from opacus.accountants.accountant import IAccountant

        for cls in _subclasses(IAccountant):
            if "step" in cls.__dict__:
                self._set(cls, "step", self._accountant_step(cls.__dict__["step"]))

    def _patch_ghost(self) -> None:
        """Fast (ghost) clipping's backward and coefficients (:mod:`privaudit.defenses.watch.opacus_ghost`)."""
        tensor_cls, modules = ghost_classes()
        if tensor_cls is None:
            return
        backward = tensor_cls.__dict__["backward"]

        def run_backward(loss: Any, *args: Any, **kwargs: Any) -> Any:
            self._ghost_loss.append(loss)
            try:
                return backward(loss, *args, **kwargs)
            finally:
                self._ghost_loss.pop()
        self._set(tensor_cls, "backward", run_backward)
        for cls in modules:
            self._set(cls, "get_clipping_coef", self._clipping_coef(cls.__dict__["get_clipping_coef"]))

    def _clipping_coef(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def get_clipping_coef(module: Any, *args: Any, **kwargs: Any) -> Any:
            coef = original(module, *args, **kwargs)
            if self._ghost_loss and not args and not kwargs:
                loss, self._ghost_loss[-1] = self._ghost_loss[-1], None  # probed once per backward
                if loss is not None and getattr(loss, "loss_per_sample", None) is not None:
                    opt = getattr(loss, "optimizer", None)  # the optimizer's clip and parameters, else the module's
                    clip = float(getattr(opt, "max_grad_norm", module.max_grad_norm))
                    released = list(getattr(opt, "params", None) or module.trainable_parameters)
                    seen = ghost_probe(module, loss.loss_per_sample, coef, original, clip,
                                       1000 * len(self.steps) + len(self.ghost), released)
                    self.ghost += [seen] if seen is not None else []
            return coef
        return get_clipping_coef

    # -- replaying ------------------------------------------------------------------------------------
    def _scripted_noise(self, drawn: torch.Tensor) -> torch.Tensor:
        """The script's noise for this draw of this step (same shape), else the draw itself, counted as a mismatch."""
        step, k = len(self.steps), len(self._current.draws)
        planned = self.script.draws[step] if self.script is not None and step < len(self.script.draws) else None
        if planned is None:
            return drawn
        if k < len(planned) and planned[k].shape == drawn.shape:
            self.replaced["draws"] += 1
            return planned[k].to(device=drawn.device, dtype=drawn.dtype)
        self.replaced["mismatched"] += 1
        return drawn

    def _scripted_batch(self, drawn: Any) -> Any:
        """The script's next batch (indices) in place of the one the sampler drew, while the script has one."""
        seen = self.replaced["batches"]
        if seen >= len(self.script.batches):
            return drawn
        self.replaced["batches"] += 1
        return list(self.script.batches[seen])

    # -- recording -------------------------------------------------------------------------------------
    def _saw_batch(self, it: Any, index: Any) -> None:
        size = _sized(it)
        if size != self.population or not isinstance(index, (list, tuple, torch.Tensor)):
            return
        self.pending.append(torch.as_tensor(index, dtype=torch.long).reshape(-1))
        if self.loader is None:
            kind, rate = sampler_kind(it._index_sampler)
            try:
                per_epoch = len(it._index_sampler)
            except TypeError:
                per_epoch = None
            self.loader = {"sampler": kind, "sample_rate": rate, "batches_per_epoch": per_epoch,
                           "batch_size": getattr(it._index_sampler, "batch_size", None)}

    def _accountant_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def step(acc: Any, *args: Any, **kwargs: Any) -> Any:
            z, q = kwargs.get("noise_multiplier", args[0] if args else None), kwargs.get(
                "sample_rate", args[1] if len(args) > 1 else None)
            entry = (float(z), float(q))
            if self._current is not None:
                self._current.rec.accountant.append(entry)
            elif self._declared is not None:  # a plain loop steps its accountant after its declared release
                self._declared.accountant.append(entry)
                self._declared = None
            else:
                self.unaccounted.append(entry)
            self.accountant = acc
            return original(acc, *args, **kwargs)
        return step

    def _pre_step(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def pre_step(opt: Any, *args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return original(opt, *args, **kwargs)
            self._depth += 1
            rec = StepRecord()
            observer = self._current = StepObserver(opt, len(self.steps), self.canaries, rec, self.probe, self.keep)
            shadowed = {n: opt.__dict__[n] for n in SHIMMED if n in opt.__dict__}
            try:
                for n in SHIMMED:
                    effective, shim = getattr(opt, n), getattr(observer, {"clip_and_accumulate": "clip",
                                                                          "add_noise": "noise",
                                                                          "scale_grad": "scale"}[n])
                    setattr(opt, n, (lambda s, e: lambda *a, **k: s(lambda: e(*a, **k)))(shim, effective))
                released = original(opt, *args, **kwargs)
            finally:
                for n in SHIMMED:
                    opt.__dict__.pop(n, None)
                opt.__dict__.update(shadowed)
                self._current, self._depth = None, 0
            if rec.noise_norm is not None:
                self._ghost_clipped(rec)
                self._released(rec, lambda: {
                    "expected_batch_size": getattr(opt, "expected_batch_size", None),
                    "loss_reduction": getattr(opt, "loss_reduction", None), "class": type(opt).__name__,
                    "tensors": [(self.names.get(id(p), f"param{j}"), int(p.numel())) for j, p in enumerate(opt.params)]})
            return released
        return pre_step

    def _ghost_clipped(self, rec: StepRecord) -> None:
        """Fold the fast-clipping backward passes since the last release into the release's clipping columns."""
        if self.ghost:
            rec.units += sum(g.units for g in self.ghost)
            rec.unit_norm_max = max([g.unit_norm_max for g in self.ghost] + [rec.unit_norm_max or 0.0])
            rec.unit_norm_slack = GHOST_SLACK
            self.ghost = []

    def record_declared(self, rec: StepRecord, numels: list[int], rate: float) -> None:
        """A release a plain loop declared (:mod:`privaudit.defenses.watch.declared_release`): its tensors take the
        model's
        parameter names when they are as many; with no data loader seen, its sampler is the declared Poisson rate."""
        if self.loader is None:
            self.loader = {"sampler": "poisson", "sample_rate": rate, "batches_per_epoch": None, "batch_size": None}
        names = list(self.names.values())
        names = names if len(names) == len(numels) else [f"tensor{j}" for j in range(len(numels))]
        self._declared = rec
        self._released(rec, lambda: {"expected_batch_size": None, "loss_reduction": None, "class": "declared release",
                                     "tensors": list(zip(names, numels))})

    def _released(self, rec: StepRecord, layout: Callable[[], dict[str, Any]]) -> None:
        """Append the release's record; its batch goes into the streamed sampling record, its indices are kept only on
        the first release and by a replay (``keep``): a release keeps O(1) memory whatever its batch."""
        if self.pending:
            if rec.indices is None:
                rec.indices = torch.cat(self.pending)
            if self.keep:
                rec.chunks = [tuple(int(i) for i in t.tolist()) for t in self.pending]
            self.pending = []
        if rec.indices is None:
            self.unsampled += 1
        else:
            rec.batch = int(rec.indices.numel())
            self.sampling.observe(rec.indices)
            if self.steps and not self.keep:
                rec.indices = None
        if self.optimizer is None:
            self.optimizer = layout()
        self.steps.append(rec)
        if self.stop_after is not None and len(self.steps) >= self.stop_after:
            raise Stopped()

    # -- the trace -------------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return sum(k for _, k in (self.optimizer or {}).get("tensors", []))

    def trace(self, claimed_rate: float) -> TrainingTrace:
        """The run's trace. An unknown sampler is read as the claim's (``claimed_rate``): its batches, recorded, are
        then judged by the measured sampling tests alone."""
        loader = self.loader or {"sampler": "unknown", "sample_rate": None, "batch_size": None}
        kind, rate = loader["sampler"], loader["sample_rate"]
        if kind == "unknown":
            kind, rate = "poisson", claimed_rate
        elif kind != "poisson":
            rate = (loader["batch_size"] or 0) / self.population
        sampling = self.sampling.to_dict() if self.steps and not self.unsampled else None
        ebs = (self.optimizer or {}).get("expected_batch_size")
        cols = {"batch_size": [r.batch if r.batch is not None else r.units for r in self.steps],
                "noise_std": [r.noise_std if r.drawn_std is None else r.drawn_std for r in self.steps],
                "sensitivity": [r.clip for r in self.steps],
                "multiplier": [r.multiplier if r.composed is None else r.composed for r in self.steps],
                "units": [r.units for r in self.steps],
                "noise_norm": [r.noise_norm for r in self.steps],
                "unit_norm_max": _in_units_of_first_clip(self.steps),
                "normalizer": [r.normalizer for r in self.steps],
                "noise_digest": [r.noise_digest for r in self.steps],
                "tensor_noise_digests": [r.tensor_digests for r in self.steps],
                "noise_law": [r.noise_law for r in self.steps]}
        cols["normalizer"] = _snap(cols["normalizer"], rounding.relative_tolerance(self.precision(rate)["normalizer"]))
        if any(r.unit_norm_slack is not None for r in self.steps):
            cols["unit_norm_slack"] = [r.unit_norm_slack for r in self.steps]
        if any(r.composed is not None for r in self.steps):
            cols["releases"] = [judged_releases(r) for r in self.steps]
        clip = self.steps[0].clip if self.steps else 0.0
        return TrainingTrace(unit="example", sampler=kind, population=self.population, sample_rate=float(rate),
                             batch_size_configured=int(ebs or loader.get("batch_size") or 0), dim=self.dim,
                             clip=float(clip), columns=cols, sampling=sampling, precision=self.precision(rate))

    def precision(self, rate: Any) -> dict[str, Any]:
        """What the trace's compared values were computed in
        (:data:`~privaudit.accountants.trace.trace_record.PRECISION`):
        the least precise dtype of each over the releases."""
        def least(key: str, default: str) -> str:
            return rounding.least_precise(*[r.dtypes.get(key) for r in self.steps]) if any(
                key in r.dtypes for r in self.steps) else default
        return {"noise": least("noise", rounding.DEFAULT), "sample_rate": rounding.dtype_name(rate),
                "unit_norm": least("unit_norm", "float32"),
                "unit_norm_terms": max([r.unit_terms for r in self.steps] + [0]),
                "normalizer": least("release", "float32")}


def judged_releases(rec: StepRecord) -> list[dict[str, Any]]:
    """A release's other Gaussian queries composed into its multiplier (the trace's ``releases`` column)."""
    return [{"name": q["name"], "std": q["std"] * q["scale"], "sensitivity": q["sensitivity"], "values": q["values"]}
            for q in rec.other_queries if q["judged"]]


def _in_units_of_first_clip(steps: list[StepRecord]) -> list[float | None]:
    """Each release's largest clipped unit times C_1 / C_t: the trace's one clip is the first release's, and a
    release whose clip moved (an adaptive clip) is checked against its own."""
    first = steps[0].clip if steps else 0.0
    return [None if r.unit_norm_max is None else (r.unit_norm_max if r.clip in (first, 0.0)
                                                  else r.unit_norm_max * first / r.clip) for r in steps]


def _snap(values: list[float | None], tolerance: float) -> list[float | None]:
    """Measured normalisers within ``tolerance`` (relative: the rounding of the released gradient's dtype; the measure
    <g, g> / <g, g'> of a division rounded once per value) of the first one, set to it (a normaliser that follows the
    data moves by 1 / batch or more)."""
    first = next((v for v in values if v is not None), None)
    if first is None:
        return values
    return [first if v is not None and abs(v - first) <= tolerance * abs(first) else v for v in values]


def _subclasses(cls: type) -> list[type]:
    out, stack = [], list(cls.__subclasses__())
    while stack:
        c = stack.pop()
        if c not in out:
            out.append(c)
            stack.extend(c.__subclasses__())
    return out
