"""The DP training skeleton every DP contrastive defense shares.

A method (DP-SGD on InfoNCE, batch clipping, DPCL, DP-GCL, Logit-DP) supplies four things:

* :meth:`DPDefense.plan` -- how batches are sampled (Poisson by default; DPCL samples fixed-size
  batches without replacement) and whether its sensitivity needs a batch-size cap;
* :meth:`DPDefense.mechanisms` -- the Gaussian mechanisms of one step with the sensitivity each is
  calibrated with (the paper's claim, or the sound bound, ``sensitivity='paper'|'sound'``) and their
  budget shares; the first one is the clipped gradient sum;
* :meth:`DPDefense.compute` -- for one batch and one :class:`StepRandomness`, everything before the
  gradient noise: the other mechanisms' noisy releases, the loss, the per-unit clipped sum;
* notes for the claim.

This class owns the rest: the model, calibration of the noise to ``Budget.target_epsilon`` through
:mod:`accountants`, the claim, the noisy release with the canary hook (:mod:`privaudit.defenses.dp.release.step`), the
training loop (:func:`privaudit.defenses.training.training.run_training`), the history (loss, clipped fraction, gradient
SNR) and the privatized quantities, which call the same :meth:`compute` the training step calls.

The history holds non-private diagnostics (true loss, norms, clipped fraction); they are not covered
by the claim and must not be released with the model.
"""

from __future__ import annotations

import dataclasses
import math
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping

import torch
import torch.nn as nn

from privaudit.accountants import PrivacyClaim
from privaudit.accountants.trace import rounding
from privaudit.accountants.registry import ACCOUNTANTS
from privaudit.accountants.trace.trace import TrainingTrace
from privaudit.core.datasets import DatasetInfo, MembershipData
from privaudit.core.errors import ConfigError, check_positive, one_of
from privaudit.defenses.training.augment import Augmentation, augmentation_for
from privaudit.defenses.base import Budget, Defense, PrivatizedQuantity, Trained
from privaudit.defenses.dp.accounting import (Mechanism, SamplingPlan, build_claim, calibrate_multiplier,
                                              effective_multiplier, noise_multipliers, plan_sampling)
from privaudit.defenses.dp.engine.contrastive import tracking
from privaudit.defenses.dp.engine.embedder import Embedder
from privaudit.defenses.dp.engine.gradients import ENGINES, ClippedSum, engine_reason, zero_sum
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.dp.release.as_run import SamplingRecorder, crafted_record, replay, replay_steps
from privaudit.defenses.dp.release.step import CanarySource, Release, canaries_at, release
from privaudit.defenses.nn.model import ContrastiveModel, ModelSpec, build_model
from privaudit.defenses.training.pretrain import check_init, initial_state, load_into
from privaudit.defenses.training.sampling import make_batches
from privaudit.defenses.training.seeding import derive_seed, torch_generator
from privaudit.defenses.training.training import ContrastiveConfig, make_optimizer, run_training

SENSITIVITY_MODES = ("paper", "sound")

# How the DP defaults were chosen (recorded with every trained model's init, and so in every report).
DEFAULTS_NOTE = (
    "defaults chosen on non-private data only: each method DP-trained at epsilon 8 on the shadow split (a random "
    "half as members) from the public-pretrained init and probed on the public split, never on the private pool or "
    "the test set (digits, seed 0). Noise calibrated with the PLD accountant's upper bound (tightest sound). Clip: "
    "at the defaults nearly every unit is clipped (clip below the median unit norm), which makes each update a sum "
    "of unit directions whose signal-to-noise ratio does not depend on C; the learning rate is the knob: "
    "fine-tuning a public init at lr 3e-4 (DP-SGD, batch clipping, DPCL SimCLR, DP-GCL: Adam or SGD) kept or "
    "improved the init (Logit-DP: within 0.004 at 3e-4 and 1e-4 alike), while the random-init learning rates (1e-3 "
    "to 0.05) let the noise undo it; DPCL Barlow's noised means and variances swamp its update, so it moves least "
    "(SGD lr 1e-5: 3e-4 fell to 0.807, 3e-5 to 0.941 from 0.944)")


@dataclass(frozen=True)
class DPConfig(ContrastiveConfig):
    """Hyper-parameters shared by the DP defenses (on top of :class:`ContrastiveConfig`).

    ``clip`` is the unit clip norm (per term, view, example, group, batch or similarity pair).
    ``sensitivity`` picks the bound the noise is calibrated with: the paper's claim or the sound one.
    ``unit_chunk`` bounds memory: unit gradients are materialised ``unit_chunk`` at a time.
    ``overflow_tolerance`` caps the probability that a Poisson batch exceeds the batch size a
    batch-size-dependent bound was computed for (such a batch releases noise only).
    ``freeze`` lists parameter-name prefixes kept at their initial values (neither trained nor
    noised), e.g. ``("encoder.net.1", "encoder.net.4")``; the clip and noise act on the rest.
    ``signal=False`` is a diagnostic control: the clipped sum is replaced by zeros, so only the noise
    moves the weights and no data is used. Comparing a run with its noise-only control separates
    what the model learned from the effect of re-randomising the weights with noise.
    ``init`` is where training starts: ``public`` (SimCLR on the public split for ``pretrain_epochs``
    epochs, the papers' recipe, cached per dataset and split seed), ``random`` or a safetensors path
    (:mod:`privaudit.defenses.training.pretrain`). ``accountant`` calibrates the noise: ``pld`` (default) is the
    tightest sound one for every sampler here (Poisson add/remove and without-replacement replace-one).
    ``engine`` computes the per-unit clipped sums: ``auto`` (the layerwise engine of
    :mod:`privaudit.defenses.dp.engine.layerwise` where it applies, ``vmap`` otherwise), ``layerwise`` or ``vmap``
    (the ``torch.func`` reference); the numbers agree to float tolerance, only the speed differs.
    """

    clip: float = 1.0
    sensitivity: str = "sound"
    accountant: str = "pld"
    init: str = "public"
    pretrain_epochs: int = 30
    unit_chunk: int = 64
    overflow_tolerance: float = 1e-9
    freeze: tuple[str, ...] = ()
    signal: bool = True
    engine: str = "auto"

    def validate(self) -> None:
        super().validate()
        check_positive("clip", self.clip)
        check_positive("unit_chunk", self.unit_chunk)
        check_positive("pretrain_epochs", self.pretrain_epochs)
        check_init(self.init)
        if self.engine not in ENGINES:
            raise one_of("engine", self.engine, ENGINES)
        if self.sensitivity not in SENSITIVITY_MODES:
            raise one_of("sensitivity", self.sensitivity, SENSITIVITY_MODES)
        if self.accountant not in ACCOUNTANTS:
            raise one_of("accountant", self.accountant, ACCOUNTANTS)
        if not 0 < self.overflow_tolerance < 1:
            raise ConfigError(f"overflow_tolerance: must lie in (0, 1), got {self.overflow_tolerance!r}")


@dataclass
class StepContext:
    """What :meth:`DPDefense.compute` needs besides the batch: model, parameters, noise levels."""

    model: nn.Module
    embedder: Embedder
    params: dict[str, torch.Tensor]
    augment: Augmentation
    plan: SamplingPlan
    multipliers: dict[str, float]
    sensitivities: dict[str, float]
    chunk: int
    release_probes: Any = None  # the step's probes on its other releases (defenses.dp.release.release_probes), by name

    @property
    def device(self) -> torch.device:
        return next(iter(self.params.values())).device

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.params.values())).dtype

    def noise_std(self, mechanism: str) -> float:
        return self.multipliers[mechanism] * self.sensitivities[mechanism]


@dataclass
class StepOutput:
    """Everything before the gradient noise: the clipped sum, the true loss, pre-noise quantities."""

    clipped: ClippedSum
    loss: float
    quantities: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class PreparedRun:
    """A run ready to train: model, batches, the step function, optimizer and the claim."""

    model: nn.Module
    step: Callable[[torch.Tensor], dict[str, float]]
    batches: Any
    plan: SamplingPlan
    optimizer: torch.optim.Optimizer
    claim: PrivacyClaim
    extras: dict[str, Any]


class DPDefense(Defense):
    """Base class of the DP defenses; see the module docstring for what subclasses provide."""

    private = True
    Config = DPConfig
    sampler: ClassVar[str] = "poisson"
    paper_accountant: ClassVar[str] = "rdp"
    source: ClassVar[str] = ""
    unit_kind: ClassVar[str] = ""

    # -- what a method provides -----------------------------------------------------------------------
    def plan(self, n: int) -> SamplingPlan:
        cfg = self.config
        return plan_sampling(self.sampler, n, cfg.batch_size, cfg.epochs, bounded=self.batch_bounded(),
                             overflow_tolerance=cfg.overflow_tolerance)

    def batch_bounded(self) -> bool:
        """True when the calibrated sensitivity grows with the batch size (needs ``max_batch``)."""
        return False

    @abstractmethod
    def mechanisms(self, plan: SamplingPlan) -> list[Mechanism]:
        """The step's mechanisms; the first is the clipped gradient sum."""

    @abstractmethod
    def compute(self, ctx: StepContext, x: torch.Tensor, rnd: StepRandomness) -> StepOutput:
        """Everything of one step on inputs ``x`` before the gradient noise."""

    def normalizer(self, plan: SamplingPlan) -> float:
        """The data-independent constant the noisy sum is divided by (post-processing)."""
        return 1.0

    def notes(self, plan: SamplingPlan, mechanisms: list[Mechanism]) -> list[str]:
        return []

    def min_batch(self) -> int:
        """Batches smaller than this release noise only (the loss is undefined or zero)."""
        return 1

    def unit_clip(self) -> float:
        """Largest norm one clipped unit contributes."""
        return self.config.clip

    def model_spec(self, info: DatasetInfo) -> ModelSpec:
        return self.config.model_spec(info)

    def release_normalizer(self, plan: SamplingPlan, batch: int) -> float:
        """What a step divides its noisy sum by: :meth:`normalizer`'s constant, whatever the realised ``batch`` size
        (recorded per step and replayed on neighbours, :mod:`privaudit.accountants.trace.as_run`, so a normaliser that
        followed the batch would show)."""
        return self.normalizer(plan)

    def step_noise_std(self, step: int, noise_std: float) -> float:
        """The gradient noise std step ``step`` adds (recorded in the trace): the calibrated one. Positive controls
        (:mod:`privaudit.defenses.controls`) override it to plant a bug."""
        return noise_std

    def added_noise_scale(self) -> float:
        """The fraction of the drawn noise the release adds (1: all of it). Only positive controls change it, to
        plant a shortfall that no record shows (:mod:`privaudit.defenses.controls`)."""
        return 1.0

    def engine_note(self, embedder: Embedder) -> str:
        """Which engine computes the step's per-unit gradients (recorded in ``extras['dp']['engine']``)."""
        reason = engine_reason(embedder)
        return "layerwise" if reason is None else f"vmap ({reason})"

    def make_model(self, spec: ModelSpec, seed: int) -> nn.Module:
        return build_model(spec, seed=seed)

    def build(self, spec: ModelSpec, seed: int) -> nn.Module:
        """:meth:`make_model` with the ``freeze`` prefixes excluded from training."""
        model = self.make_model(spec, seed)
        names = [n for n, _ in model.named_parameters()]

        def frozen(name: str, prefix: str) -> bool:
            return name == prefix or name.startswith(prefix + ".")

        for prefix in self.config.freeze:
            if not any(frozen(n, prefix) for n in names):
                raise ConfigError(f"freeze: no parameter is or lies under {prefix!r}; parameters: {', '.join(names)}")
        for n, p in model.named_parameters():
            if any(frozen(n, prefix) for prefix in self.config.freeze):
                p.requires_grad_(False)
        if not any(p.requires_grad for p in model.parameters()):
            raise ConfigError("freeze: every parameter is frozen")
        return model

    def released(self, model: nn.Module) -> ContrastiveModel:
        """The encoder that is released (and evaluated) from the trained model."""
        assert isinstance(model, ContrastiveModel)
        return model

    def params_summary(self, plan: SamplingPlan) -> dict[str, Any]:
        """Method-specific parameters recorded in the claim."""
        return {"clip": self.config.clip, "unit": self.unit_kind, "sensitivity_mode": self.config.sensitivity}

    # -- shared machinery -----------------------------------------------------------------------------
    def variant(self, **overrides: Any) -> "DPDefense":
        """The same defense with some hyper-parameters replaced."""
        return type(self)({**self.config_dict(), **overrides})

    def claim_for(self, plan: SamplingPlan, mechanisms: list[Mechanism], gradient_multiplier: float,
                  delta: float) -> PrivacyClaim:
        claim = self._claim_for(plan, mechanisms, gradient_multiplier, delta)
        if not self.config.signal:
            claim = claim.with_notes("diagnostic noise-only control (signal=False): the updates are pure noise")
        return claim

    def _claim_for(self, plan: SamplingPlan, mechanisms: list[Mechanism], gradient_multiplier: float,
                   delta: float) -> PrivacyClaim:
        sampler_note = None
        if plan.max_batch is not None:
            sampler_note = (f"batches over {plan.max_batch} examples release noise only; "
                            f"probability over the run {plan.overflow:.2g}")
        return build_claim(plan, mechanisms, gradient_multiplier, delta, paper_accountant=self.paper_accountant,
                           source=self.source, notes=self.notes(plan, mechanisms),
                           params=self.params_summary(plan), sampler_note=sampler_note)

    def calibrate(self, plan: SamplingPlan, mechanisms: list[Mechanism], budget: Budget, delta: float) -> float:
        if budget.noise_multiplier is not None:
            return float(budget.noise_multiplier)
        if budget.target_epsilon is None:
            raise ConfigError(f"defense {self.name!r} is private: give --target-epsilon or --noise-multiplier")
        return calibrate_multiplier(lambda z: self.claim_for(plan, mechanisms, z, delta), budget.target_epsilon,
                                    self.config.accountant)

    def probed_releases(self, plan: SamplingPlan, model: nn.Module) -> dict[str, int]:
        """The step's noised releases besides the gradient that a white-box audit can probe, each with its number of
        entries (:mod:`privaudit.defenses.dp.release.release_probes`; a defense that calls ``observe_release`` for
        them):
        none here."""
        return {}

    def context(self, model: nn.Module, plan: SamplingPlan, multipliers: Mapping[str, float],
                mechanisms: list[Mechanism], augment: Augmentation, engine: str | None = None) -> StepContext:
        embedder = Embedder(model)
        # Privatized quantities (sensitivity checks, step audits) run through vmap unless the layerwise
        # engine is asked for: their differentiable (tracked) and plain evaluations then agree bit for bit.
        # ``engine`` overrides that for a caller with no differentiable evaluation to agree with.
        embedder.engine = engine or ("vmap" if self.config.engine == "auto" else self.config.engine)
        return StepContext(model, embedder, embedder.params(), augment, plan, dict(multipliers),
                           {m.name: m.sensitivity for m in mechanisms}, self.config.unit_chunk)

    def starting_model(self, data: MembershipData, seed: int, device: str | torch.device) -> tuple[nn.Module, dict]:
        """The model at the configured ``init`` (public pretraining, random or a file) and the record of it."""
        cfg = self.config
        spec = self.model_spec(data.info)
        model = self.build(spec, seed).to(device)
        state, init_record = initial_state(cfg.init, data, cfg, cfg.pretrain_epochs, device=device)
        init_record = {**init_record, "defaults": DEFAULTS_NOTE}
        if state is not None:
            load_into(model, state, f"{cfg.init!r}")
        return model, init_record

    def make_embedder(self, model: nn.Module) -> Embedder:
        """The model's embedder with the configured engine; 'layerwise' where it does not apply is an error."""
        embedder = Embedder(model)
        embedder.engine = self.config.engine
        if self.config.engine == "layerwise" and engine_reason(embedder) is not None:
            raise ConfigError(f"engine: 'layerwise' does not apply to this model ({engine_reason(embedder)}); "
                              "use 'auto' or 'vmap'")
        return embedder

    def prepare(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
                canaries: CanarySource | None = None) -> PreparedRun:
        """Build the model, calibrate the noise, and return the step function and the claim."""
        cfg = self.config
        x = data.train.x.to(device)
        n = len(x)
        plan = self.plan(n)
        mechanisms = self.mechanisms(plan)
        delta = budget.resolve_delta(n)
        z_grad = self.calibrate(plan, mechanisms, budget, delta)
        multipliers = noise_multipliers(mechanisms, z_grad)
        claim = self.claim_for(plan, mechanisms, z_grad, delta)

        model, init_record = self.starting_model(data, seed, device)
        augment = augmentation_for(data.info, cfg.augmentation)
        optimizer = make_optimizer(cfg.optimizer, [p for p in model.parameters() if p.requires_grad], cfg.lr,
                                   cfg.momentum, cfg.weight_decay)
        batches, _ = make_batches(plan.sampler, n, plan.batch_size, cfg.epochs, torch_generator(seed, "batches"))
        gradient = mechanisms[0]
        noise_std = multipliers[gradient.name] * gradient.sensitivity
        normalizer = self.normalizer(plan)
        unit_clip = self.unit_clip()
        canary_bound = gradient.sensitivity
        run_seed = derive_seed(seed, "dp-step")
        counter = {"t": 0, "overflowed": 0, "engines": {}}
        embedder = self.make_embedder(model)
        engine_note = self.engine_note(embedder)

        sampling, digests, tensor_digests, laws, replays = SamplingRecorder(n), [], [], [], []
        to_replay = replay_steps(plan.steps) if len(mechanisms) == 1 else set()
        low, high = x.amin(0), x.amax(0)

        def clip_step(ctx: StepContext, xb: torch.Tensor, rnd: StepRandomness) -> StepOutput:
            if len(xb) < self.min_batch():
                return StepOutput(zero_sum(embedder, ctx.params, cfg.clip, self.unit_kind), float("nan"))
            return self.compute(ctx, xb, rnd)

        def release_step(out: StepOutput, t: int, rnd: StepRandomness, batch: int, canaries_t,
                         law: bool = False) -> tuple[Release, float]:
            total = out.clipped.total if cfg.signal else torch.zeros_like(out.clipped.total)
            std = self.step_noise_std(t, noise_std)
            rel = release(total, std, rnd.generator("noise", gradient.name),
                          normalizer=self.release_normalizer(plan, batch), canaries=canaries_t,
                          canary_bound=canary_bound, added_scale=self.added_noise_scale(),
                          segments=embedder.space.numels, shapes=embedder.space.shapes if law else None)
            return rel, std

        def privatize(ctx: StepContext, t: int, rnd: StepRandomness) -> Callable[[torch.Tensor], tuple]:
            def run(xb: torch.Tensor) -> tuple:
                out = clip_step(dataclasses.replace(ctx, release_probes=None), xb, rnd)  # observed once
                return out.clipped, release_step(out, t, rnd, len(xb), None)[0]
            return run

        def step(idx: torch.Tensor) -> dict[str, float]:
            t = counter["t"]
            counter["t"] += 1
            sampling.observe(idx)
            rnd = StepRandomness(run_seed, t)
            if plan.max_batch is not None and len(idx) > plan.max_batch:
                counter["overflowed"] += 1
                idx = idx[:0]
            canaries_t = canaries_at(canaries, t)  # before the step's computation: it observes the release probes
            ctx = StepContext(model, embedder, embedder.params(), augment, plan, multipliers,
                              {m.name: m.sensitivity for m in mechanisms}, cfg.unit_chunk,
                              getattr(canaries_t, "releases", None))
            xb = x[idx.to(x.device)]
            out = clip_step(ctx, xb, rnd)
            _count_engine(counter, out.clipped)
            rel, std = release_step(out, t, rnd, len(xb), canaries_t, law=True)
            digests.append(rel.noise_digest)
            tensor_digests.append(rel.tensor_digests)
            laws.append(rel.noise_law)
            if t in to_replay and len(xb) > self.min_batch():
                base = release_step(out, t, rnd, len(xb), None)[0]
                replays.extend(replay(t, xb, crafted_record(xb, low, high), claim.relation, (out.clipped, base),
                                      privatize(ctx, t, rnd), normalizer=normalizer, sensitivity=gradient.sensitivity))
            embedder.space.write_grad(model, rel.gradient)
            used = effective_multiplier({**multipliers, gradient.name: std / gradient.sensitivity})
            return {"loss": out.loss, "clipped_fraction": out.clipped.clipped_fraction, "grad_snr": rel.snr,
                    "signal_norm": rel.signal_norm, "noise_norm": rel.noise_norm, "batch_size": float(len(idx)),
                    "units": float(out.clipped.n_units), "canaries": float(rel.canaries), "noise_std": std,
                    "sensitivity": gradient.sensitivity, "multiplier": used,
                    "unit_norm_max": out.clipped.entered_max, "normalizer": rel.normalizer}

        counter.update(sampling=sampling, noise_digests=digests, tensor_noise_digests=tensor_digests, noise_laws=laws,
                       replays=replays,
                       replayed=bool(to_replay) or f"not replayed: the step releases {len(mechanisms)} mechanisms",
                       **_release_record(mechanisms, multipliers, embedder))
        extras = {"dp": {"noise_multipliers": multipliers, "gradient_noise_std": noise_std, "normalizer": normalizer,
                         "unit_clip": unit_clip, "canary_bound": canary_bound, "unit": self.unit_kind, "param_names": embedder.space.names,
                         "param_numels": embedder.space.numels,
                         "param_count": embedder.space.size, "overflow_counter": counter,
                         "engine": engine_note},
                  "init": init_record}
        return PreparedRun(model, step, batches, plan, optimizer, claim, extras)

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = True, canaries: CanarySource | None = None) -> Trained:
        """Train on ``data.train`` under ``budget``; ``canaries`` is the white-box canary hook (see step.py)."""
        run = self.prepare(data, budget, seed, device=device, canaries=canaries)
        run.model.train()
        history = run_training(run.batches, run.plan.steps, run.step, run.optimizer,
                               desc=f"{self.name} ({self.config.loss})", progress=progress)
        run.model.eval()
        dp = dict(run.extras["dp"])
        counter = dp.pop("overflow_counter")
        dp["overflowed_steps"] = counter["overflowed"]
        dp["engine_steps"] = dict(counter["engines"])  # steps per engine (auto picks per step, see gradients)
        if "chunks" in counter:  # steps the layerwise engine ran in chunks, by plan (defenses.dp.engine.chunked)
            dp["engine_chunks"] = dict(counter["chunks"])
        snr = history.get("grad_snr", [])
        dp["grad_snr_first"] = snr[0] if snr else None
        frac = [v for v in history.get("clipped_fraction", []) if not math.isnan(v)]
        dp["mean_clipped_fraction"] = sum(frac) / len(frac) if frac else None
        released = self.released(run.model)
        if isinstance(counter.get("replayed"), str):
            dp["replay_note"] = counter["replayed"]
        releases = {"releases": [counter["releases"]] * len(history["batch_size"])} if counter["releases"] else {}
        trace = TrainingTrace.from_history({**history, "noise_digest": counter["noise_digests"],
                                            "tensor_noise_digests": counter["tensor_noise_digests"],
                                            "noise_law": counter["noise_laws"], **releases},
                                           unit=self.unit_kind,
                                           sampler=run.plan.sampler, population=run.plan.n,
                                           sample_rate=run.plan.sample_rate,
                                           batch_size_configured=run.plan.batch_size, dim=int(dp["param_count"]),
                                           clip=float(self.config.clip), sampling=counter["sampling"].to_dict(),
                                           replays=list(counter["replays"]), precision=counter["precision"])
        return Trained(self.name, released, self.model_spec(data.info), run.claim, history, self.config_dict(), seed,
                       extras={"dp": dp, "init": run.extras.get("init", {"init": self.config.init}),
                               "trace": trace.to_dict()})

    # -- privatized quantities ------------------------------------------------------------------------
    def quantity_function(self, data: MembershipData, model: nn.Module | None = None, *,
                          noise_multiplier: float = 1.0, seed: int = 0, engine: str | None = None
                          ) -> Callable[[str], Callable[[torch.Tensor, Any], torch.Tensor]]:
        """A factory ``key -> fn(batch, randomness)`` evaluating this defense's :meth:`compute`.

        ``key`` names a pre-noise quantity of :class:`StepOutput`: ``'gradient'`` is the clipped sum,
        ``'norms'`` the unit gradient norms it was clipped from, other keys the method's intermediates.
        ``model`` defaults to the seeded initial model; ``noise_multiplier`` is the gradient
        mechanism's multiplier (the others follow the budget split), used for the noise of the
        mechanisms released before the gradient (DPCL's similarity matrix and statistics). ``engine`` (``auto``,
        ``layerwise``, ``vmap``; default: vmap unless the config names one) for a caller that evaluates nothing
        differentiably (:meth:`context`).
        """
        plan = self.plan(len(data.train))
        mechanisms = self.mechanisms(plan)
        multipliers = noise_multipliers(mechanisms, noise_multiplier)
        if model is None:
            model = self.build(self.model_spec(data.info), seed)
        augment = augmentation_for(data.info, self.config.augmentation)

        def factory(key: str) -> Callable[[torch.Tensor, Any], torch.Tensor]:
            def fn(batch: torch.Tensor, randomness: Any) -> torch.Tensor:
                ctx = self.context(model, plan, multipliers, mechanisms, augment, engine)
                x = batch.to(ctx.device, ctx.dtype)
                rnd = StepRandomness.resolve(randomness)
                out = self.compute(ctx, x, rnd)
                if key == "gradient":
                    value = out.clipped.total
                elif key == "norms":
                    value = out.clipped.norms
                else:
                    value = out.quantities[key]
                return value.reshape(-1) if tracking() else value.detach().reshape(-1)
            return fn

        return factory

    def base_params(self, plan: SamplingPlan) -> dict[str, float]:
        cfg = self.config
        return {"C": cfg.clip, "B": plan.batch_size, "tau": cfg.temperature, "N": plan.n}


def _count_engine(counter: dict[str, Any], clipped: ClippedSum) -> None:
    """Count the step under the engine that computed its clipped sum, and under its chunk plan where the
    layerwise engine cut the step into chunks for memory (:mod:`privaudit.defenses.dp.engine.chunked`)."""
    engines = counter["engines"]
    engines[clipped.engine] = engines.get(clipped.engine, 0) + 1
    if clipped.detail:
        chunks = counter.setdefault("chunks", {})
        chunks[clipped.detail] = chunks.get(clipped.detail, 0) + 1


def quantity(claim_id: str, source: str, relation: str, fn: Callable[..., torch.Tensor],
             bound: Callable[[Mapping[str, float]], float], params: Mapping[str, float], description: str, *,
             corrected_bound: Callable[[Mapping[str, float]], float] | None = None, variant: str = "") -> PrivatizedQuantity:
    """A :class:`PrivatizedQuantity` (helper keeping the defenses' lists short)."""
    return PrivatizedQuantity(claim_id=claim_id, source=source, relation=relation, fn=fn, bound=bound,
                              params=dict(params), description=description, corrected_bound=corrected_bound,
                              variant=variant)


def _release_record(mechanisms: list, multipliers: Mapping[str, float], embedder: Any) -> dict[str, Any]:
    """What the trace records of a step's releases beside the gradient's (each auxiliary Gaussian query's std and
    sensitivity, composed into the step's as-run mechanism) and the precision its exact checks compare at."""
    return {"releases": [{"name": m.name, "std": multipliers[m.name] * m.sensitivity, "sensitivity": m.sensitivity}
                         for m in mechanisms[1:]],
            "precision": {"noise": rounding.DEFAULT, "sample_rate": rounding.DEFAULT,
                          "unit_norm": rounding.dtype_name(next(iter(embedder.params().values()))),
                          "unit_norm_terms": 0, "normalizer": rounding.DEFAULT}}
