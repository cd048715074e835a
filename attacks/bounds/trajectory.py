"""Whole-training white-box audit from every step's canary observation: ``eps_lb_trajectory``.

Why. A one-run audit scores each canary once, over the whole run, and its bound has a ceiling set by the
number of canaries (every guess right still rejects only so much). A white-box auditor sees more: the
privatised sum of *every* step (Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis 2023,
"Tight auditing of differentially private machine learning", USENIX Security, Sec. 5: with every
intermediate update visible, each step's canary observation is a sample of the step's Gaussian mechanism,
and the per-step measurement composes). The gradient canaries of :mod:`privaudit.attacks.canaries.gradient_canary`
already give m canaries x T steps such samples; this module turns them into a sound lower bound on the
per-step privacy and composes it.

Trials. Canary i's centred observation at step t (the privatised sum minus the data's clipped sum, on its
own Dirac coordinate; :mod:`privaudit.defenses.dp.release.step`) is x = (y / D) + offset, in units of the difference
D between the two hypotheses' means: add/remove canaries (norm Delta) are *present* at (t, i) when inserted
and sampled (x ~ N(1, z^2) under the claim) and *absent* otherwise (x ~ N(0, z^2)), D = Delta, offset 0;
paired replace-one slots (+-Delta/2 e_i, D = Delta, offset 1/2) give a trial only when sampled, present for
the + candidate. With the per-step probes (:mod:`privaudit.attacks.canaries.gradient_canary`: +-D/2 on every canary's
coordinate by a fresh coin, withdrawn from the release once observed) every canary and step is one trial, present
for the + probe, the canary's own designed contribution subtracted: m T balanced trials instead of about m q T / 2
present ones, the same hypotheses. z = sigma / D is the noise the step really adds. The auditor knows every label
(it drew the coins, the probes and the sampling) and fixes a threshold tau (:func:`plan_threshold`, from the claim
alone) before training. Counts: FP = absent trials with x > tau (of n0), FN = present trials with x <= tau (of n1).

The null H(mu). Given the labels, the trials are independent (the step's noise is drawn afresh for every
coordinate and step, which is what the claim's Gaussian mechanism is; the labels come from the auditor's
own randomness, independent of the noise), and each trial's law of x given its label is mu-GDP (Dong, Roth
& Su 2022): every test of absent against present has FNR >= f_mu(FPR), f_mu(a) = Phi(Phi^-1(1 - a) - mu).
A step that adds Gaussian noise of std sigma >= z_c D to a canary of difference D satisfies H(1 / z_c).

Theorem (sound, exact finite-sample). Under H(mu), P[mu_lb > mu] <= beta, with
    mu_lb = Phi^-1(1 - A) - Phi^-1(B),  A = CP_upper(FP, n0, beta / 2),  B = CP_upper(FN, n1, beta / 2)
(one-sided Clopper-Pearson bounds). Proof. Trial j's rates (a_j, b_j) satisfy b_j >= f_mu(a_j); f_mu is
convex, so the mean rates satisfy b >= f_mu(a) (Jensen). FP is a sum of independent Bernoulli(a_j): its
law is Poisson-binomial with mean n0 a, and for counts below its mean minus 1 its lower tail is at most the
Binomial(n0, a) tail (Hoeffding 1956, Thm. 4); the Clopper-Pearson failure event {a > A} is such a lower
tail whenever P[Bin(n0, a) <= n0 a] >= beta / 2, which holds for beta / 2 <= 1/4 and a < 1 - 1/n0
(Greenberg & Mohri 2014, Lemma 1; a >= 1 - 1/n0 would be a test that is wrong on almost every absent
trial). So P[a > A] <= beta / 2, likewise P[b > B] <= beta / 2, and outside both events
f_mu(A) <= f_mu(a) <= b <= B, i.e. Phi^-1(1 - A) - mu <= Phi^-1(B): mu_lb <= mu. (With identical trials
the counts are binomial and CP is exact.) This is Nasr et al. 2023's GDP audit (their Sec. 4) applied to
the m T per-step trials. For balanced trials (paired replace-one canaries, n0 ~ n1) one interval on the pooled
error count FP + FN is tighter than two on the rates (:mod:`privaudit.attacks.bounds.pooled_gdp`, with its proof); the
form is planned from the claim alone with the threshold (:func:`plan_trajectory`), before any observation.

From steps to the run. The claim's event composes T steps of Sampled(Gaussian(z)) (the trace check,
:mod:`privaudit.accountants.trace.trace`, verifies the steps, sampling and noise training ran). The gradient
release alone at multiplier z' gives E(z') = the claim's event with its Gaussian replaced by Gaussian(z')
(:func:`gradient_event`); the reported ``eps_lb_trajectory`` is eps_opt(E(1 / mu_lb)), the *optimistic*
PLD epsilon (dp-accounting's lower discretisation: at most the exact epsilon; its grid shrinks with the step count,
:func:`conversion_interval`, so that long runs do not lose the bound to rounding). If the run is the claim's
mechanism with gradient noise z_a D (any z_a >= z_c, the claimed multiplier), H(1 / z_a) holds, so with
probability >= 1 - beta, mu_lb <= 1 / z_a and eps_lb_trajectory <= eps(E(z_a)) <= eps(E(z_c)) <= the
claim's epsilon under every sound accountant (epsilon decreases with the noise; a claim whose step
releases other mechanisms too is only less private than its gradient release). So the gate may compare
it: P[eps_lb_trajectory > eps_claim] <= beta for a true claim. What it refutes: that each step's gradient
release is the claim's Gaussian mechanism (its noise, and the sensitivity its canaries are set to); the
sensitivity itself is the step audit's witness pair (:mod:`privaudit.audit.step.audit`). The trials measure the
step's Gaussian given the labels, not its sampled form: the sampling enters from the claim's event (which the trace
verifies against the batches drawn), so how often the canaries or probes take part does not enter the bound -- the
per-step Gaussian is compared with the claim's per-step Gaussian -- and on a correct run the bound approaches the
claim's mechanism's own (optimistic PLD) epsilon, which may lie far below an RDP claim's
(:mod:`privaudit.attacks.bounds.trajectory_power` splits the shortfall).

Estimates (asymptotic, reported beside the bound, never gated): the per-step point estimate
mu_hat = Phi^-1(1 - FP / n0) - Phi^-1(FN / n1) composed like the bound; the Gaussian-moment estimate
(mean difference over the pooled standard deviation of the trials), the MLE if the noise is Gaussian; and
the whole-run Gaussian approximation of "Let's Ask Gauss" (canary-aligned signals summed over steps are
asymptotically Gaussian): mu_run = (mean in - mean out) / std out of the canaries' whole-run scores, read
as a mu_run-GDP epsilon. All are consistent as the trial count grows; none has a finite-sample guarantee.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from privaudit.accountants.events import (ComposedDpEvent, DpEvent, GaussianDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent, event_from_dict,
                                          event_to_dict)
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound, check_relation_unit
from privaudit.attacks.bounds.multi_run import cp_upper_vec
from privaudit.attacks.bounds.gdp import gdp_epsilon
from privaudit.core.errors import ConfigError, check_probability, one_of

METHOD = "white-box-trajectory"
#: Thresholds (in units of the hypotheses' mean difference) the planner chooses from.
THRESHOLDS = tuple(np.round(np.arange(0.05, 0.96, 0.05), 2))


def gradient_event(event: DpEvent, z: float) -> DpEvent:
    """``event`` with every Gaussian mechanism replaced by Gaussian(z): the gradient release alone at multiplier
    z under the claim's sampling and composition (its steps must release one Gaussian each)."""
    if isinstance(event, GaussianDpEvent):
        return GaussianDpEvent(float(z))
    if isinstance(event, SelfComposedDpEvent):
        return SelfComposedDpEvent(gradient_event(event.event, z), event.count)
    if isinstance(event, PoissonSampledDpEvent):
        return PoissonSampledDpEvent(event.sampling_probability, gradient_event(event.event, z))
    if isinstance(event, SampledWithoutReplacementDpEvent):
        return SampledWithoutReplacementDpEvent(event.source_dataset_size, event.sample_size,
                                                gradient_event(event.event, z))
    if isinstance(event, ComposedDpEvent) and len(event.events) == 1:
        return ComposedDpEvent([gradient_event(event.events[0], z)])
    raise ConfigError(f"trajectory bound: no single-Gaussian step in event {type(event).__name__} (supported: "
                      "one Gaussian per step under Poisson or without-replacement sampling, self-composed)")


def _gaussians(event: DpEvent) -> list[float]:
    if isinstance(event, GaussianDpEvent):
        return [float(event.noise_multiplier)]
    inner = getattr(event, "event", None)
    if inner is not None:
        return _gaussians(inner)
    return [z for e in getattr(event, "events", ()) for z in _gaussians(e)]


def step_multiplier(event: DpEvent, params: dict[str, Any] | None = None) -> float:
    """The claimed noise multiplier of a step's gradient release: the first of the claim's recorded
    ``noise_multipliers`` (the gradient mechanism, :mod:`privaudit.defenses.dp.accounting`), else the event's
    one Gaussian multiplier."""
    recorded = (params or {}).get("noise_multipliers")
    if isinstance(recorded, dict) and recorded:
        return float(next(iter(recorded.values())))
    zs = set(_gaussians(event))
    if len(zs) != 1:
        raise ConfigError(f"trajectory bound: the claim's event has {len(zs)} distinct Gaussian multipliers; "
                          "need one per step")
    return zs.pop()


def unsupported_reason(event: DpEvent, relation: str) -> str | None:
    """Why the claim's event has no trajectory bound here (None: it has one)."""
    from privaudit.accountants.base import NotApplicable
    from privaudit.accountants.pld.pld import build_pld

    try:
        if build_pld(gradient_event(event, 1.0), relation, pessimistic=True, interval=1e-2) is None:
            return "the claim's event releases nothing"
    except (ConfigError, NotApplicable) as err:
        return str(err)
    return None


def mu_lower(fp: np.ndarray | int, n0: np.ndarray | int, fn: np.ndarray | int, n1: np.ndarray | int, *,
             beta: float) -> np.ndarray:
    """mu_lb = Phi^-1(1 - CP_upper(FP, n0)) - Phi^-1(CP_upper(FN, n1)), each at beta / 2, floored at 0
    (module docstring: sound under H(mu)); vectorised over the counts."""
    check_probability("beta", beta)
    a, b = cp_upper_vec(fp, n0, beta / 2), cp_upper_vec(fn, n1, beta / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = stats.norm.isf(a) - stats.norm.ppf(b)
    return np.where(np.isfinite(mu), np.maximum(mu, 0.0), np.where(mu > 0, np.inf, 0.0))


#: The per-step bound's forms: a Clopper-Pearson interval on each rate (the module docstring's theorem), or one on
#: the pooled error count (:mod:`privaudit.attacks.bounds.pooled_gdp`), tighter for balanced trials.
FORMS = ("two-sided", "pooled")


def mu_lower_form(form: str, fp: np.ndarray | int, n0: np.ndarray | int, fn: np.ndarray | int,
                  n1: np.ndarray | int, *, beta: float) -> np.ndarray:
    """The per-step mu_lb of ``form`` (:data:`FORMS`), vectorised over the counts."""
    if form == "two-sided":
        return mu_lower(fp, n0, fn, n1, beta=beta)
    if form == "pooled":
        from privaudit.attacks.bounds.pooled_gdp import mu_lower_pooled

        return mu_lower_pooled(fp, n0, fn, n1, beta=beta)
    raise one_of("trajectory form", form, FORMS)


def expected_mu_lower(form: str, tau: float, *, noise_multiplier: float, n0: float, n1: float, beta: float) -> float:
    """``form``'s mu_lb at threshold tau when the counts are their expectations under the claim (x ~ N(0, z^2)
    absent, N(1, z^2) present): what planning compares, from the claim alone."""
    fp = n0 * float(stats.norm.sf(tau / noise_multiplier))
    fn = n1 * float(stats.norm.cdf((tau - 1.0) / noise_multiplier))
    return float(mu_lower_form(form, fp, n0, fn, n1, beta=beta))  # real-valued counts: no rounding ties


@functools.lru_cache(maxsize=256)
def plan_trajectory(*, noise_multiplier: float, n0: float, n1: float, beta: float) -> tuple[float, str]:
    """(threshold, form) fixed before training from the claim alone: the two-sided form at
    :func:`plan_threshold`'s threshold, unless the pooled form at some threshold of :data:`THRESHOLDS` has the
    larger expected mu_lb (balanced trials: paired replace-one canaries). A pure function of its four numbers,
    memoised (the same plan for every run of one design)."""
    tau = plan_threshold(noise_multiplier=noise_multiplier, n0=n0, n1=n1, beta=beta)
    if noise_multiplier <= 0 or min(n0, n1) < 1:
        return tau, "two-sided"
    kw = {"noise_multiplier": noise_multiplier, "n0": n0, "n1": n1, "beta": beta}
    best = (expected_mu_lower("two-sided", tau, **kw), tau, "two-sided")
    for t in sorted(THRESHOLDS, key=lambda t: abs(t - 0.5)):  # from the midpoint: a flat optimum keeps it
        pooled = expected_mu_lower("pooled", float(t), **kw)
        if pooled > best[0] * (1 + 1e-6):
            best = (pooled, float(t), "pooled")
    return best[1], best[2]


def mu_point(fp: int, n0: int, fn: int, n1: int) -> float | None:
    """The per-step point estimate Phi^-1(1 - FP / n0) - Phi^-1(FN / n1) (None when a rate is 0 or 1)."""
    if min(n0, n1) == 0 or fp in (0, n0) or fn in (0, n1):
        return None
    return float(stats.norm.isf(fp / n0) - stats.norm.ppf(fn / n1))


def plan_threshold(*, noise_multiplier: float, n0: float, n1: float, beta: float) -> float:
    """The threshold tau (:data:`THRESHOLDS`) with the smallest expected margin mu - mu_lb at the claim's own noise.

    Under the claim x ~ N(0, z^2) (absent) and N(1, z^2) (present): FPR = Phi(-tau / z), FNR = Phi((tau - 1) / z).
    The margin of each side is about Phi^-1(1 - beta / 4) sqrt(p (1 - p) / n) / phi(Phi^-1(p)) (the delta method
    on the Clopper-Pearson bound); tau minimises their sum. Only the claim (z, the expected trial counts) is read,
    so tau is fixed before any observation."""
    if noise_multiplier <= 0 or min(n0, n1) <= 0:
        return 0.5
    quantile = stats.norm.isf(beta / 4)
    taus = np.asarray(THRESHOLDS)
    p0, p1 = stats.norm.sf(taus / noise_multiplier), stats.norm.cdf((taus - 1.0) / noise_multiplier)

    def margin(p: np.ndarray, n: float) -> np.ndarray:
        p = np.clip(p, 1e-300, 1 - 1e-16)
        return quantile * np.sqrt(p * (1 - p) / n) / stats.norm.pdf(stats.norm.ppf(p))

    return float(taus[int(np.argmin(margin(p0, n0) + margin(p1, n1)))])


@dataclass
class TrajectoryCounts:
    """Running counts of the per-step trials at threshold ``threshold`` (O(1) memory whatever T and m).

    ``add(absent, present)`` takes the trials' x values (module docstring). The first and second moments are
    kept for the Gaussian-moment estimate only."""

    threshold: float
    form: str = "two-sided"
    n0: int = 0
    fp: int = 0
    n1: int = 0
    fn: int = 0
    moments: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])  # sum x0, x0^2, x1, x1^2
    noise_n: int = 0
    noise_ss: float = 0.0
    pair_n: int = 0
    pair_ss: float = 0.0
    mode_n: int = 0  # steps whose residuals' sum is counted (noise_structure's coordinate test)
    mode_ss: float = 0.0  # sum over those steps of (sum of the step's residuals)^2 / (their count)
    tensor_names: tuple[str, ...] = ()
    tensor_sums: np.ndarray | None = None  # (4, tensors): see add_noise
    held: np.ndarray | None = field(default=None, repr=False)  # the first step of the current step pair

    def add(self, absent: np.ndarray, present: np.ndarray) -> None:
        absent, present = np.asarray(absent, dtype=np.float64), np.asarray(present, dtype=np.float64)
        self.n0 += absent.size
        self.fp += int(np.count_nonzero(absent > self.threshold))
        self.n1 += present.size
        self.fn += int(np.count_nonzero(present <= self.threshold))
        for j, v in enumerate((absent.sum(), (absent ** 2).sum(), present.sum(), (present ** 2).sum())):
            self.moments[j] += float(v)

    def add_noise(self, residuals: np.ndarray, tensors: np.ndarray | None = None) -> None:
        """Count the step's released-noise residuals: every canary coordinate's observation less the canaries'
        designed contribution, in units of D (:func:`released_noise_check`), in the canaries' fixed order. Also the
        step's residual sum (the coordinate test), the step pairs' differences (steps 0 and 1, 2 and 3, ...) and, with
        ``tensors`` (each canary's index into
        ``tensor_names``), both sums per tensor (:mod:`privaudit.attacks.noise.noise_structure`)."""
        residuals = np.asarray(residuals, dtype=np.float64)
        self.noise_n += residuals.size
        self.noise_ss += float((residuals ** 2).sum())
        if residuals.size:
            self.mode_n += 1
            self.mode_ss += float(residuals.sum()) ** 2 / residuals.size
        diff2 = None
        if self.held is None:
            self.held = residuals.copy()
        else:
            if self.held.shape != residuals.shape:
                raise ConfigError("trajectory counts: a step pair's residuals differ in shape")
            diff2 = (self.held - residuals) ** 2
            self.pair_n += residuals.size
            self.pair_ss += float(diff2.sum())
            self.held = None
        if tensors is not None and self.tensor_names:
            k = len(self.tensor_names)
            step = np.zeros((4, k))  # per tensor: residuals, their squares, pair cells, squared differences
            step[0], step[1] = np.bincount(tensors, minlength=k), np.bincount(tensors, residuals ** 2, minlength=k)
            if diff2 is not None:
                step[2], step[3] = np.bincount(tensors, minlength=k), np.bincount(tensors, diff2, minlength=k)
            self.tensor_sums = step if self.tensor_sums is None else self.tensor_sums + step

    def moment_mu(self) -> float | None:
        """(mean present - mean absent) / pooled std: the MLE of mu = D / sigma if the noise is Gaussian."""
        if min(self.n0, self.n1) < 2:
            return None
        s0, q0, s1, q1 = self.moments
        m0, m1 = s0 / self.n0, s1 / self.n1
        var = ((q0 - self.n0 * m0 ** 2) + (q1 - self.n1 * m1 ** 2)) / (self.n0 + self.n1 - 2)
        return (m1 - m0) / math.sqrt(var) if var > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "form": self.form, "n0": self.n0, "fp": self.fp, "n1": self.n1,
                "fn": self.fn, "noise_n": self.noise_n, "noise_ss": self.noise_ss, "pair_n": self.pair_n,
                "pair_ss": self.pair_ss, "mode_n": self.mode_n, "mode_ss": self.mode_ss, **self._tensor_dict()}

    def _tensor_dict(self) -> dict[str, Any]:
        if not self.tensor_names:
            return {}
        sums = np.zeros((4, len(self.tensor_names))) if self.tensor_sums is None else self.tensor_sums
        return {"tensor_noise": {name: {"n": int(sums[0, g]), "ss": float(sums[1, g]), "pair_n": int(sums[2, g]),
                                        "pair_ss": float(sums[3, g])} for g, name in enumerate(self.tensor_names)}}


def composed_steps(event: DpEvent) -> int:
    """How many mechanisms ``event`` composes (self-compositions multiplied out; at least 1)."""
    if isinstance(event, SelfComposedDpEvent):
        return int(event.count) * composed_steps(event.event)
    if isinstance(event, ComposedDpEvent):
        return max(1, sum(composed_steps(e) for e in event.events))
    return 1


#: The bound's grid as the whole run's rounding budget: its step is this over T (:func:`conversion_interval`).
CONVERSION_BUDGET = 0.01
#: The asymptotic estimates (never gated) are read on a grid this many times the bound's.
ESTIMATE_COARSENING = 5.0


def conversion_interval(event: DpEvent) -> float:
    """The privacy-loss grid step of the bound's optimistic PLD: :data:`CONVERSION_BUDGET` / T for T composed steps,
    within [1e-6, 1e-3]. The optimistic discretisation rounds each step's loss down by up to one step, so the composed
    loss falls short by about T times half the step, and the epsilon with it: at 1e-3 a run of 2,000 steps (q = 0.01,
    z = 1) reads 1.58 where the exact epsilon is 2.58; at b / T it reads about b / 2 below the exact epsilon whatever
    T (0.025 at b = 0.05, 5% of an epsilon of 0.5; 0.005 at b = 0.01, for about five times the PLD's cost). Any step
    gives a sound bound."""
    from privaudit.attacks.bounds.mechanism import EPS_INTERVAL

    return min(EPS_INTERVAL, max(1e-6, CONVERSION_BUDGET / composed_steps(event)))


def trajectory_epsilon(mu: float, event: DpEvent, relation: str, delta: float, coarsening: float = 1.0) -> float:
    """eps_opt(E(1 / mu)) at ``delta``: the optimistic PLD epsilon of the claim's gradient release at multiplier
    1 / mu, on the grid :func:`conversion_interval` times ``coarsening`` (0 for mu = 0; inf for mu = inf). A coarser
    grid reads lower, never higher than the exact epsilon: a figure stated as "at least" may take one."""
    from privaudit.attacks.bounds.mechanism import optimistic_epsilon

    if coarsening < 1:
        raise ConfigError(f"coarsening: must be >= 1 (a grid at least the bound's), got {coarsening!r}")
    if mu <= 0:
        return 0.0
    if not math.isfinite(mu):
        return math.inf
    return optimistic_epsilon(gradient_event(event, 1.0 / mu), relation, delta, conversion_interval(event) * coarsening)


def trajectory_epsilon_from_counts(counts: dict[str, Any], *, beta: float, delta: float, relation: str) -> float:
    """The bound recomputed from its saved counts at another ``beta`` (the gate's family-wise level). Counts that carry
    the trials of the step's other releases (DPCL's whole step) are refused: their bound is
    :func:`privaudit.attacks.bounds.release_trajectory.combined_epsilon_from_counts`."""
    if counts.get("releases"):
        raise ConfigError("trajectory counts: these carry the trials of the step's other releases; recompute them with "
                          "release_trajectory.combined_epsilon_from_counts (the whole step's bound)")
    mu = float(mu_lower_form(counts.get("form", "two-sided"), int(counts["fp"]), int(counts["n0"]), int(counts["fn"]),
                             int(counts["n1"]), beta=beta))
    return trajectory_epsilon(mu, event_from_dict(counts["event"]), relation, delta)


def gauss_sum_mu(scores: np.ndarray, membership: np.ndarray) -> float | None:
    """Whole-run Gaussian approximation ("Let's Ask Gauss"): (mean in - mean out) / std out of the canaries'
    whole-run scores (an asymptotic estimate of the run's GDP mu; None with fewer than two of either)."""
    scores, membership = np.asarray(scores, dtype=np.float64), np.asarray(membership, dtype=bool)
    inside, outside = scores[membership], scores[~membership]
    if min(inside.size, outside.size) < 2 or float(outside.std(ddof=1)) <= 0:
        return None
    return float((inside.mean() - outside.mean()) / outside.std(ddof=1))


def _estimates(counts: TrajectoryCounts, event: DpEvent, relation: str, delta: float,
               scores: np.ndarray | None, membership: np.ndarray | None) -> dict[str, Any]:
    """The asymptotic estimates (module docstring), each with its mu and epsilon; never a bound."""
    out: dict[str, Any] = {}
    for name, mu in (("per_step_point", mu_point(counts.fp, counts.n0, counts.fn, counts.n1)),
                     ("gaussian_moments", counts.moment_mu())):
        out[name] = {"mu_step": mu, "epsilon": None if mu is None else trajectory_epsilon(
            max(mu, 0.0), event, relation, delta, coarsening=ESTIMATE_COARSENING)}
    if scores is not None and membership is not None:
        mu = gauss_sum_mu(scores, membership)
        out["gauss_whole_run"] = {"mu_run": mu, "epsilon": None if mu is None or delta <= 0
                                  else gdp_epsilon(max(mu, 0.0), delta)}
    return out


def trajectory_bound(counts: TrajectoryCounts, *, event: DpEvent, claimed_multiplier: float, relation: str,
                     unit: str = "example", beta: float = 0.05, delta: float, steps: int, canaries: int,
                     scores: np.ndarray | None = None, membership: np.ndarray | None = None) -> EpsilonLowerBound:
    """``eps_lb_trajectory`` from the per-step trial counts against the claim's event (module docstring).

    ``claimed_multiplier`` is the claim's noise multiplier of the gradient release (per-step mu = 1 / z);
    ``scores``/``membership`` (the canaries' whole-run scores) add the whole-run Gaussian estimate."""
    check_relation_unit(relation, unit)
    check_probability("beta", beta)
    if not 0 < delta < 1:
        raise ConfigError(f"delta: the trajectory bound needs 0 < delta < 1, got {delta!r}")
    mu = float(mu_lower_form(counts.form, counts.fp, counts.n0, counts.fn, counts.n1, beta=beta))
    eps = trajectory_epsilon(mu, event, relation, delta)
    mu_claim = 1.0 / claimed_multiplier
    record = {**counts.to_dict(), "mu_lower": mu, "mu_claim": mu_claim, "claim_rejected": mu > mu_claim,
              "steps": steps, "canaries": canaries, "event": event_to_dict(event),
              "estimates": _estimates(counts, event, relation, delta, scores, membership)}
    label = (f"white-box trajectory (Nasr et al. 2023: every step's canary observation a trial of the step's "
             f"mechanism; {relation}, per {unit}): {counts.n0} absent / {counts.n1} present trials over {steps} steps "
             f"and {canaries} canaries at threshold {counts.threshold:g} ({counts.form} intervals), per-step "
             f"mu_lb={mu:.4g} (claim {mu_claim:.4g}), eps = optimistic PLD epsilon of the claim's steps at multiplier 1/mu_lb, "
             f"delta={delta:g}, {100 * (1 - beta):.0f}% confidence")
    return EpsilonLowerBound(eps, METHOD, label, 1 - beta, delta, record, relation=relation, unit=unit,
                             notes=("sound if the step's noise is independent across coordinates and steps (the "
                                    "claim's Gaussian mechanism); refutes the claim's per-step gradient release, "
                                    "composed over the steps the trace verifies",
                                    "estimates (asymptotic, not bounds): " + ", ".join(record["estimates"])))
