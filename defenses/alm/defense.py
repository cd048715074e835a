"""The Additive Logistic Mechanism defense (Yang, Gohari & Topcu): post-training noise on a fine-tuned head.

Algorithm 1 (Additive Logistic Query Handler): pretrain a SimCLR encoder on the public split, encode
the private split (the members) once, fine-tune a classification head on the frozen features, and
release the head's weights plus i.i.d. noise — logistic (Def. 4.1; epsilon = Delta_1 / s, Thm. 4.1,
Remark 4.1, Prop. 4.1), or the paper's comparison mechanisms, Laplace (L1) and Gaussian (L2, with
delta). Delta is *sampled* (Algorithm 2, or the Rubinstein–Aldà sampler it cites): the claim says
so, with m, and the epsilon it states holds only at that sampled sensitivity.

Departures from the paper, each because the paper's version is not well defined or not correct:

* The head is the unique minimiser of an L2-regularised multinomial logistic loss (see
  :mod:`privaudit.defenses.alm.head`) instead of a randomly initialised Keras fine-tuning, so the weights are
  a function of the data and the sampled "sensitivity" measures the data's influence, not two
  training runs' randomness.
* Features are standardised with public-split statistics (folded into the released ``nn.Linear``,
  which is post-processing) so the regulariser treats every feature alike.
* Every release is sound in floating point (:mod:`privaudit.defenses.alm.mechanisms`): the textbook float64
  release x + s xi leaks through its last bits (Mironov 2012): most of its outputs cannot be produced from a
  neighbour (the reachability test, :mod:`privaudit.attacks.step.reachability`: 77% at epsilon 1 on digits). The
  logistic (default) and Gaussian noise are released exactly on a power-of-two grid (:mod:`privaudit.defenses.alm.grid`:
  discrete logistic, discrete Gaussian) after clamping to [-B, B]; the claimed epsilon includes the grid's cost
  (logistic: d Lambda / s; Gaussian: its zCDP at the sensitivity plus sqrt(d) Lambda). Laplace noise is released
  through Mironov's snapping mechanism (:mod:`privaudit.defenses.alm.snapping`), its overhead d 2^-49 B / lambda
  (Thm. 1) included.
* The Gaussian's guarantee is the discrete Gaussian's zCDP (Canonne, Kamath & Steinke 2020, Thm. 14) through the
  RDP accountant (``gaussian_calibration = zcdp``, default); the paper's sqrt(2 ln(1.25/delta)) Delta_2 / eps is
  only proven for eps < 1: ``classical`` sets the noise by it and claims the epsilon that noise actually gives.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import DiscreteGaussianDpEvent, LogisticDpEvent, SnappingDpEvent
from privaudit.core.datasets import MembershipData
from privaudit.core.errors import ConfigError, check_positive, check_probability, one_of
from privaudit.defenses.sensitivity_sampling import (SampledSensitivity, exhaustive_remove_one, sample_sensitivity_alm,
                                       sample_sensitivity_rubinstein_alda)
from privaudit.defenses.alm.curve import head_accuracy, privacy_utility_curve, utility_loss
from privaudit.defenses.alm.head import HeadProblem, fit_heads, head_as_linear, newton_solve
from privaudit.defenses.alm.mechanisms import (GAUSSIAN_CALIBRATIONS, MECHANISMS, NoiseCalibration, add_noise,
                                               epsilon_at, gaussian_calibration, logistic_calibration,
                                               snapped_calibration)
from privaudit.defenses.alm.snapping import default_clamp_bound
from privaudit.defenses.base import Budget, Defense, PrivatizedQuantity, Trained
from privaudit.defenses.evaluation.evaluation import embed
from privaudit.defenses.nn.model import ContrastiveModel, ModelSpec, build_model
from privaudit.defenses.nonprivate import train_contrastive
from privaudit.defenses.training.seeding import torch_generator
from privaudit.defenses.training.training import ContrastiveConfig

SENSITIVITY_SAMPLERS = ("alm", "rubinstein-alda")
ORACLE_POOLS = ("members", "public")
ENCODER_INITS = ("public", "random")
SOURCE = "ALM (Yang, Gohari & Topcu): Algorithms 1-2, Thm. 4.1, Remark 4.1, Remark 4.2, Prop. 4.1"


@dataclass(frozen=True)
class ALMConfig(ContrastiveConfig):
    """Pretraining (the contrastive fields), head fine-tuning, sensitivity sampling, noise, curve.

    ``epochs``/``batch_size``/``lr``/... configure SimCLR pretraining on the public split.
    ``head_l2``: L2 weight lambda of the head's objective. ``sensitivity_sampler``: ``alm``
    (Algorithm 2: max over ``sensitivity_m`` remove-one pairs) or ``rubinstein-alda`` (order
    statistic; ``rdp_gamma`` optional, databases drawn from ``oracle_pool``). ``exhaustive_pairs``:
    also compute the exact maximum over all remove-one pairs within the members (n head fits).
    ``curve_epsilons``/``curve_draws``: the privacy–utility curve (Sec. 6.1) stored in extras.
    ``init``: the frozen encoder: ``public`` (SimCLR on the public split, Algorithm 1) or ``random`` (its seeded
    initialisation, never trained: no public data needed; features are then standardised with the public split's
    statistics when there is one, else left as they are, since statistics of the members would be a release).
    ``clamp_bound``: B of every release, every released weight clamped to [-B, B]; None (default):
    :func:`privaudit.defenses.alm.snapping.default_clamp_bound` of the class count and ``head_l2`` (public only;
    provably never binds on the fine-tuned head). For Laplace it must exceed the noise scale lambda and stay
    below 2^46 lambda (Mironov 2012, Thm. 1).
    """

    head_l2: float = 0.1
    head_tol: float = 1e-9
    mechanism: str = "logistic"
    gaussian_calibration: str = "zcdp"
    sensitivity_sampler: str = "alm"
    sensitivity_m: int = 500
    rdp_gamma: float | None = None
    oracle_pool: str = "members"
    exhaustive_pairs: bool = True
    fit_chunk: int = 512
    curve_epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0)
    curve_draws: int = 20
    clamp_bound: float | None = None
    init: str = "public"

    def validate(self) -> None:
        super().validate()
        if self.init not in ENCODER_INITS:
            raise one_of("init", self.init, ENCODER_INITS)
        if self.mechanism not in MECHANISMS:
            raise one_of("mechanism", self.mechanism, MECHANISMS)
        if self.gaussian_calibration not in GAUSSIAN_CALIBRATIONS:
            raise one_of("gaussian_calibration", self.gaussian_calibration, GAUSSIAN_CALIBRATIONS)
        if self.sensitivity_sampler not in SENSITIVITY_SAMPLERS:
            raise one_of("sensitivity_sampler", self.sensitivity_sampler, SENSITIVITY_SAMPLERS)
        if self.oracle_pool not in ORACLE_POOLS:
            raise one_of("oracle_pool", self.oracle_pool, ORACLE_POOLS)
        for name in ("head_l2", "head_tol", "sensitivity_m", "fit_chunk", "curve_draws"):
            check_positive(name, getattr(self, name))
        if self.rdp_gamma is not None:
            check_probability("rdp_gamma", self.rdp_gamma)
        if self.clamp_bound is not None:
            b = self.clamp_bound
            if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
                raise ConfigError(f"clamp_bound: must be a finite number > 0 (or unset for the default), got {b!r}")
        for eps in self.curve_epsilons:
            if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
                raise ConfigError(f"curve_epsilons: every epsilon must be a number > 0, got {eps!r}")


@dataclass
class _Prepared:
    """Everything before the noise: encoder, standardised features, the head problem and its solution."""

    model: ContrastiveModel
    spec: ModelSpec
    history: dict[str, list[float]]
    mean: torch.Tensor
    std: torch.Tensor
    problem: HeadProblem
    reference: tuple[torch.Tensor, torch.Tensor]
    newton_iterations: int
    x_test: torch.Tensor  # standardised, bias column appended (float64)
    seconds: dict[str, float]
    device: str | torch.device = "cpu"

    def standardise(self, h: torch.Tensor) -> torch.Tensor:
        return (h.double() - self.mean) / self.std


class ALM(Defense):
    """Post-training noise on the fine-tuned head's weights, calibrated to a sampled sensitivity."""

    name = "alm"
    private = True
    Config = ALMConfig

    # -- pipeline ----------------------------------------------------------------------------------
    def _prepare(self, data: MembershipData, seed: int, device: str | torch.device, progress: bool) -> _Prepared:
        cfg = self.config
        seconds: dict[str, float] = {}
        start = time.perf_counter()
        model, spec, history = self._encoder(data, seed, device, progress)
        seconds["pretrain"] = time.perf_counter() - start
        start = time.perf_counter()
        # Encode once; the fine-tuning and every sensitivity pair reuse these features.
        mean, std = self._feature_scale(model, data, device)
        members = (embed(model.represent, data.train.x, device=device).double() - mean) / std
        test = (embed(model.represent, data.test.x, device=device).double() - mean) / std
        problem = HeadProblem.from_features(members, data.train.y, data.info.num_classes, cfg.head_l2)
        w, h, iterations = newton_solve(problem, torch.ones(problem.size, dtype=torch.float64), tol=cfg.head_tol)
        seconds["fine_tune"] = time.perf_counter() - start
        x_test = torch.cat([test, torch.ones(len(test), 1, dtype=torch.float64)], dim=1)
        return _Prepared(model, spec, history, mean, std, problem, (w, h), iterations, x_test, seconds, device)

    def _encoder(self, data: MembershipData, seed: int, device: str | torch.device,
                 progress: bool) -> tuple[ContrastiveModel, ModelSpec, dict[str, list[float]]]:
        """The frozen encoder: SimCLR on the public split, or the seeded initialisation (``init = random``)."""
        cfg = self.config
        if cfg.init == "random":
            spec = cfg.model_spec(data.info)
            return build_model(spec, seed=seed).to(device).eval(), spec, {"step": []}
        if len(data.public) == 0:
            raise ConfigError("alm: init = 'public' pretrains on the public split, which is empty here; give "
                              "splits.public > 0 or init = 'random'")
        return train_contrastive(data.public.x, data.info, cfg, seed, device=device, progress=progress,
                                 desc="alm: SimCLR on public")

    def _feature_scale(self, model: ContrastiveModel, data: MembershipData,
                       device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) the features are standardised with: the public split's, or (0, 1) without one."""
        if len(data.public) == 0:
            dim = model.encoder.rep_dim
            return torch.zeros(dim, dtype=torch.float64), torch.ones(dim, dtype=torch.float64)
        public = embed(model.represent, data.public.x, device=device).double()
        return public.mean(0), public.std(0).clamp_min(1e-6)

    def _fit_fn(self, problem: HeadProblem, reference: tuple[torch.Tensor, torch.Tensor]):
        tol = self.config.head_tol
        return lambda weights: fit_heads(problem, weights, reference=reference, tol=tol).weights.flatten(1)

    def _sample_sensitivity(self, data: MembershipData, prep: _Prepared, seed: int) -> dict[str, SampledSensitivity]:
        cfg = self.config
        gen = torch_generator(seed, "alm", "sensitivity")
        if cfg.sensitivity_sampler == "alm":
            return sample_sensitivity_alm(self._fit_fn(prep.problem, prep.reference), prep.problem.size,
                                          cfg.sensitivity_m, gen, chunk=cfg.fit_chunk)
        if cfg.oracle_pool == "members":
            pool, reference = prep.problem, prep.reference
        else:
            public = prep.standardise(embed(prep.model.represent, data.public.x, device=prep.device))
            pool = HeadProblem.from_features(public, data.public.y, data.info.num_classes, cfg.head_l2)
            reference = newton_solve(pool, torch.ones(pool.size, dtype=torch.float64), tol=cfg.head_tol)[:2]
        return sample_sensitivity_rubinstein_alda(self._fit_fn(pool, reference), pool.size, prep.problem.size, gen,
                                                  m=cfg.sensitivity_m, gamma=cfg.rdp_gamma, chunk=cfg.fit_chunk,
                                                  oracle=f"{cfg.oracle_pool} split")

    def clamp_bound_for(self, num_classes: int) -> float:
        """B of the release: ``clamp_bound`` or the public default for ``num_classes``."""
        cfg = self.config
        return float(cfg.clamp_bound) if cfg.clamp_bound is not None else default_clamp_bound(num_classes, cfg.head_l2)

    def release_noise(self, budget: Budget, l1: float, l2: float, n: int, *, num_classes: int | None = None,
                      coordinates: int | None = None) -> NoiseCalibration | None:
        """The noise the release adds at ``budget`` given the (sampled) L1 / L2 sensitivities (None: no noise).

        Every release also needs the class count (for the default clamp bound) and the number of released
        coordinates (the floating-point-safe releases pay per coordinate).
        """
        cfg = self.config
        if not budget.private:
            return None
        if num_classes is None or coordinates is None:
            raise ConfigError(f"mechanism {cfg.mechanism!r}: the release needs num_classes and coordinates")
        z = budget.noise_multiplier
        if z is not None and z <= 0:
            raise ConfigError("noise_multiplier: the ALM releases noised weights; it must be > 0")
        bound = self.clamp_bound_for(num_classes)
        if cfg.mechanism == "laplace":
            return snapped_calibration(budget.target_epsilon, l1=l1, clamp_bound=bound, coordinates=coordinates,
                                       noise_multiplier=z)
        if cfg.mechanism == "logistic":
            return logistic_calibration(budget.target_epsilon, l1=l1, clamp_bound=bound, coordinates=coordinates,
                                        noise_multiplier=z)
        return gaussian_calibration(budget.target_epsilon, l2=l2, delta=budget.resolve_delta(n), clamp_bound=bound,
                                    coordinates=coordinates, gaussian=cfg.gaussian_calibration, noise_multiplier=z)

    def _claim(self, cal: NoiseCalibration | None, sens: dict[str, SampledSensitivity],
               exhaustive: dict[str, float] | None, n: int) -> PrivacyClaim:
        cfg = self.config
        params: dict[str, Any] = {
            "sensitivity_l1": sens["l1"].value, "sensitivity_l2": sens["l2"].value,
            "sensitivity_sampler": cfg.sensitivity_sampler, "m": sens["l1"].m, "k": sens["l1"].k,
            "gamma": sens["l1"].gamma, "rho": sens["l1"].rho, "n_members": n, "head_l2": cfg.head_l2,
        }
        if cal is None:
            return PrivacyClaim.non_private(source=f"{SOURCE}; no noise requested (unprotected head)")
        norm_used = sens[cal.norm]
        notes = [norm_used.describe()]
        if cal.mechanism == "gaussian":
            notes.append(f"epsilon = {cal.epsilon:.4g} at delta = {cal.delta:.3g}: discrete Gaussian noise (Remark "
                         f"4.2) released exactly on the grid Lambda = {cal.grid:.4g} (clamp bound B = "
                         f"{cal.clamp_bound:.4g}), "
                         f"sigma = {cal.scale:.4g}; rho-zCDP with rho = (Delta_2 + sqrt(d) Lambda)^2 / (2 sigma^2) "
                         f"(Canonne, Kamath & Steinke 2020, Thm. 14; d = {cal.coordinates} coordinates, the grid adds "
                         f"{cal.grid_cost:.3g} of the sampled L2 sensitivity), converted by the RDP accountant "
                         f"({cal.calibration} calibration); valid only for neighbours whose head weights differ by at "
                         f"most the sampled L2 sensitivity")
        elif cal.mechanism == "laplace":
            notes.append(f"epsilon = (Delta_1 + d 2^-49 B) / lambda = {cal.epsilon:.4g} (pure DP): Laplace noise "
                         f"(Remark 4.2) released through Mironov's snapping mechanism (2012, Sec. 5.2, Thm. 1, per "
                         f"coordinate, composed over d = {cal.coordinates} coordinates) with lambda = {cal.scale:.4g}, "
                         f"clamp bound B = {cal.clamp_bound:.4g}, grid Lambda = {cal.grid:.4g}; the floating-point "
                         f"overhead d 2^-49 B / lambda = {cal.overhead:.3g} is included; valid only for neighbours "
                         f"whose head weights differ by at most the sampled L1 sensitivity")
        else:
            notes.append(f"epsilon = (Delta_1 + d Lambda) / s = {cal.epsilon:.4g} (pure DP, Thm. 4.1 on the grid): "
                         f"logistic noise of scale s = {cal.scale:.4g} released exactly on the grid Lambda = "
                         f"{cal.grid:.4g} (a discrete logistic, clamp bound B = {cal.clamp_bound:.4g}, d = "
                         f"{cal.coordinates} coordinates); the grid's cost d Lambda / s = {cal.overhead:.3g} is "
                         f"included; valid only for neighbours whose head weights differ by at most the sampled L1 "
                         f"sensitivity")
        if exhaustive is not None:
            worst = exhaustive[cal.norm]
            notes.append(f"the exact maximum over all {n * (n - 1) // 2} remove-one pairs within the members is "
                         f"{worst:.4g} ({worst / norm_used.value:.3g}x the sampled value): at that sensitivity the "
                         f"same noise gives epsilon {self._epsilon_at(cal, worst):.4g}")
        params.update({"mechanism": cal.mechanism, "epsilon": cal.epsilon, "scale": cal.scale,
                       "noise_multiplier": cal.noise_multiplier, "calibration": cal.calibration})
        params.update({"clamp_bound": cal.clamp_bound, "grid": cal.grid, "coordinates": cal.coordinates,
                       "grid_cost": cal.grid_cost})
        if cal.mechanism == "laplace":
            params["snapping_overhead"] = cal.overhead
            event = SnappingDpEvent(cal.noise_multiplier, cal.overhead)
        elif cal.mechanism == "logistic":
            params["grid_overhead"] = cal.overhead
            event = LogisticDpEvent(cal.noise_multiplier, cal.overhead)
        else:
            event = DiscreteGaussianDpEvent(cal.noise_multiplier)
        accountant = "pure" if cal.mechanism != "gaussian" else "rdp"
        return PrivacyClaim(event, relation="replace-one", unit="example",
                            delta=cal.delta, paper_accountant=accountant, sampler=None, source=SOURCE,
                            notes=tuple(notes), params=params)

    def _epsilon_at(self, cal: NoiseCalibration, sensitivity: float) -> float:
        return epsilon_at(cal, sensitivity)

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = True) -> Trained:
        cfg = self.config
        prep = self._prepare(data, seed, device, progress)
        n = prep.problem.size
        w_clean = prep.reference[0]

        start = time.perf_counter()
        sens = self._sample_sensitivity(data, prep, seed)
        prep.seconds["sensitivity"] = time.perf_counter() - start
        exhaustive = None
        if cfg.exhaustive_pairs:
            start = time.perf_counter()
            exhaustive = exhaustive_remove_one(self._fit_fn(prep.problem, prep.reference), n, chunk=cfg.fit_chunk)
            prep.seconds["exhaustive"] = time.perf_counter() - start

        num_classes = data.info.num_classes
        cal = self.release_noise(budget, sens["l1"].value, sens["l2"].value, n, num_classes=num_classes,
                                 coordinates=int(w_clean.numel()))
        w_released = w_clean
        if cal is not None:
            w_released = add_noise(w_clean, cal.mechanism, cal.scale, torch_generator(seed, "alm", "noise"),
                                   clamp_bound=cal.clamp_bound, grid=cal.grid)
        classifier = head_as_linear(w_released, prep.mean, prep.std).to(device)

        acc_clean = float(head_accuracy(w_clean, prep.x_test, data.test.y))
        acc_released = float(head_accuracy(w_released, prep.x_test, data.test.y))
        start = time.perf_counter()
        curve_delta = budget.resolve_delta(n)
        rows = privacy_utility_curve(w_clean, prep.x_test, data.test.y, l1=sens["l1"].value, l2=sens["l2"].value,
                                     epsilons=cfg.curve_epsilons, delta=curve_delta,
                                     gen=torch_generator(seed, "alm", "curve"), draws=cfg.curve_draws,
                                     clamp_bound=self.clamp_bound_for(num_classes))
        prep.seconds["curve"] = time.perf_counter() - start

        extras = {
            "utility": {"head_accuracy_clean": acc_clean, "head_accuracy_released": acc_released,
                        "utility_loss": utility_loss(acc_released, acc_clean)},
            "sensitivity": {"sampler": cfg.sensitivity_sampler, **{k: v.to_dict() for k, v in sens.items()},
                            "exhaustive": exhaustive},
            "release": None if cal is None else cal.to_dict(),
            "curve": {"delta": curve_delta, "draws": cfg.curve_draws, "m": sens["l1"].m,
                      "sensitivity_l1": sens["l1"].value, "sensitivity_l2": sens["l2"].value, "rows": rows},
            "head": {"l2": cfg.head_l2, "newton_iterations": prep.newton_iterations, "tol": cfg.head_tol,
                     # every fitted head is within tol / lambda of its exact minimiser (strong convexity)
                     "distance_error_l2": 2 * cfg.head_tol / cfg.head_l2,
                     "parameters": int(w_clean.numel()), "weights_l1": float(w_clean.abs().sum()),
                     "weights_l2": float(w_clean.norm())},
            "seconds": prep.seconds,
        }
        claim = self._claim(cal, sens, exhaustive, n)
        return Trained(self.name, prep.model, prep.spec, claim, prep.history, self.config_dict(), seed,
                       classifier=classifier, extras=extras)

    # -- for the sensitivity checks ----------------------------------------------------------------
    def privatized_quantities(self, data: MembershipData, seed: int = 0, *, device: str | torch.device = "cpu",
                              progress: bool = False) -> list[PrivatizedQuantity]:
        """The released head weights as a function of a labelled batch, with the sampled L1 bound.

        ``fn((x, y), randomness)`` encodes the images with the (public-pretrained) encoder and
        returns the fine-tuned head's weights, flattened (float64); fine-tuning is deterministic,
        so ``randomness`` is unused. ``bound`` returns the L1 sensitivity ALM Algorithm 2 sampled
        on the members — what the paper uses as if it were the global sensitivity.
        """
        cfg = self.config
        prep = self._prepare(data, seed, device, progress)
        sens = self._sample_sensitivity(data, prep, seed)
        num_classes = data.info.num_classes

        def fn(batch, randomness=None) -> torch.Tensor:
            x, y = batch
            h = prep.standardise(embed(prep.model.represent, x, device=device))
            problem = HeadProblem.from_features(h, y, num_classes, cfg.head_l2)
            try:  # warm start from the members' head (a neighbour of the members converges in a few steps)
                return fit_heads(problem, torch.ones(1, problem.size, dtype=torch.float64), reference=prep.reference,
                                 tol=cfg.head_tol).weights[0].flatten()
            except RuntimeError:  # far from the members: Newton from zero
                w, _, _ = newton_solve(problem, torch.ones(problem.size, dtype=torch.float64), tol=cfg.head_tol)
                return w.flatten()

        params = {"sensitivity_l1": sens["l1"].value, "sensitivity_l2": sens["l2"].value, "m": sens["l1"].m,
                  "k": sens["l1"].k, "n": prep.problem.size, "head_l2": cfg.head_l2,
                  "sampler": cfg.sensitivity_sampler}
        return [PrivatizedQuantity(
            claim_id="alm.head-weights", source=SOURCE, relation="replace-one", fn=fn,
            bound=lambda p: float(p["sensitivity_l1"]), params=params, norm="l1",
            description="weights of the head fine-tuned on the encoder's features (L2-regularised multinomial "
                        "logistic regression, standardised features, bias last); the bound is the L1 sensitivity "
                        "sampled by ALM Algorithm 2 on the members, which the paper treats as the global one")]
