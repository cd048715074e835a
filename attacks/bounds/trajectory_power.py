"""The trajectory bound's power on a correct run, drawn from the claim alone (no training): where its shortfall lies.

A correct run's canary trials are, given the auditor's labels, independent draws of the claim's Gaussian step:
x ~ N([present], z^2) in units of the hypotheses' mean difference (:mod:`privaudit.attacks.bounds.trajectory`). At a
threshold tau fixed in advance the false positives are Binomial(n0, Phi(-tau / z)) and the false negatives
Binomial(n1, Phi((tau - 1) / z)) given the labels' counts, which are themselves binomial: the bound a correct run
gives is drawn without any observation, for thousands of runs a second, whatever the steps T. Two trial designs
(:mod:`privaudit.attacks.canaries.gradient_canary`):

* ``sampled``: the canaries' own trials, each of m canaries inserted by a fair coin and sampled with the claim's
  rate q at each step (n1 ~ Binomial(T m / 2, q) present trials, the rest absent);
* ``probes``: a per-step probe on every canary coordinate, labelled by a fresh fair coin (n1 ~ Binomial(m T, 1/2)).

Both are planned as the audit plans them (:func:`~privaudit.attacks.bounds.trajectory.plan_trajectory`), and the
per-step mu_lb is converted as the bound converts it (:func:`~privaudit.attacks.bounds.trajectory.trajectory_epsilon`).
:func:`power_row` splits the bound's ratio to a claim's epsilon into its three factors: the accountants' gap (the
mechanism's own epsilon, the PLD's, over the claim's accountant's), the conversion's grid (the bound's value at the
claim's own mu over the mechanism's epsilon) and the canaries' margin (the bound over its value at the claim's mu).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from privaudit.accountants.events import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from privaudit.attacks.bounds.trajectory import mu_lower_form, plan_trajectory, trajectory_epsilon
from privaudit.core.errors import ConfigError, one_of

DESIGNS = ("sampled", "probes")


def expected_trials(design: str, *, q: float, steps: int, m: int) -> tuple[float, float]:
    """(n0, n1): the absent and present trials a design expects over ``steps`` steps of m canaries at rate q."""
    if design == "probes":
        return m * steps / 2, m * steps / 2
    if design == "sampled":
        return m * steps * (1 - q / 2), m * steps * q / 2
    raise one_of("trajectory design", design, DESIGNS)


def simulated_counts(design: str, *, z: float, q: float, steps: int, m: int, tau: float, runs: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """(fp, n0, fn, n1), each (runs,): the counts of ``runs`` correct runs at threshold tau (module docstring)."""
    if design == "probes":
        n1 = rng.binomial(m * steps, 0.5, size=runs)
    elif design == "sampled":
        n1 = rng.binomial(steps * (m // 2), q, size=runs)
    else:
        raise one_of("trajectory design", design, DESIGNS)
    n0 = m * steps - n1
    return (rng.binomial(n0, stats.norm.sf(tau / z)), n0, rng.binomial(n1, stats.norm.cdf((tau - 1.0) / z)), n1)


def simulated_mu_lower(design: str, *, z: float, q: float, steps: int, m: int, beta: float, runs: int,
                       rng: np.random.Generator) -> np.ndarray:
    """The per-step mu_lb of ``runs`` correct runs, at the threshold and form the audit plans from the claim."""
    n0, n1 = expected_trials(design, q=q, steps=steps, m=m)
    tau, form = plan_trajectory(noise_multiplier=z, n0=n0, n1=n1, beta=beta)
    counts = simulated_counts(design, z=z, q=q, steps=steps, m=m, tau=tau, runs=runs, rng=rng)
    return np.asarray(mu_lower_form(form, *counts, beta=beta), dtype=np.float64)


@dataclass(frozen=True)
class PowerRow:
    """One setting's bound on correct runs (median over the runs) and the three factors of its ratio to the claim."""

    design: str
    steps: int
    canaries: int
    rate: float
    multiplier: float
    claimed: float  # the claim's accountant's epsilon
    mechanism: float  # the mechanism's own (PLD, pessimistic) epsilon
    at_claim: float  # the bound's conversion at the claim's own per-step mu
    bound: float  # the median bound over the runs
    mu_ratio: float  # the median mu_lb over the claim's mu
    coarsening: float = 1.0  # the conversion's grid in multiples of the bound's (:func:`trajectory_epsilon`)

    @property
    def ratio(self) -> float:
        """bound / claimed = accountants' gap x conversion x canaries' margin (:meth:`factors`)."""
        return self.bound / self.claimed

    def factors(self) -> dict[str, float]:
        """The accountants' gap (mechanism / claimed), the conversion (at_claim / mechanism) and the canaries' margin
        (bound / at_claim): their product is :attr:`ratio`."""
        return {"accountant_gap": self.mechanism / self.claimed, "conversion": self.at_claim / self.mechanism,
                "canary_margin": self.bound / self.at_claim if self.at_claim > 0 else 0.0}

    def to_dict(self) -> dict[str, float | int | str]:
        return {**asdict(self), "ratio": self.ratio, **self.factors()}


@lru_cache(maxsize=64)
def claim_epsilons(z: float, q: float, steps: int, delta: float, accountant: str) -> tuple[float, float]:
    """(the ``accountant``'s epsilon, the pessimistic PLD epsilon) of DP-SGD's claim: Poisson rate q, multiplier z,
    ``steps`` steps, add/remove, at ``delta``."""
    from privaudit.accountants import PrivacyClaim, epsilon

    claim = PrivacyClaim(event=dpsgd_event(z, q, steps), relation="add-remove", unit="example", delta=delta,
                         sampler="poisson")
    return float(epsilon(claim, accountant).epsilon), float(epsilon(claim, "pld").epsilon)


def dpsgd_event(z: float, q: float, steps: int) -> SelfComposedDpEvent:
    """T steps of the Poisson-sampled Gaussian: the claim's event."""
    return SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)


def power_row(design: str, *, z: float, q: float, steps: int, m: int, delta: float, beta: float = 0.05,
              runs: int = 5, seed: int = 0, accountant: str = "rdp", coarsening: float = 1.0) -> PowerRow:
    """The median bound of ``runs`` simulated correct runs of DP-SGD's claim (:func:`dpsgd_event`) against the claim's
    ``accountant`` epsilon at ``delta``, with the factors of the module docstring; ``coarsening``: the conversion's
    grid in multiples of the bound's (5 is the grid of 0.05 / T the bound used before)."""
    if min(steps, m, runs) < 1 or not 0 < q <= 1 or z <= 0:
        raise ConfigError(f"trajectory power: need steps, m, runs >= 1, q in (0, 1], z > 0; got steps={steps}, "
                          f"m={m}, runs={runs}, q={q}, z={z}")
    event = dpsgd_event(z, q, steps)
    claimed, mechanism = claim_epsilons(float(z), float(q), int(steps), float(delta), accountant)
    mu = simulated_mu_lower(design, z=z, q=q, steps=steps, m=m, beta=beta, runs=runs,
                            rng=np.random.default_rng(seed))
    median = float(np.median(mu))
    return PowerRow(design, steps, m, q, z, claimed, mechanism,
                    trajectory_epsilon(1.0 / z, event, "add-remove", delta, coarsening=coarsening),
                    trajectory_epsilon(median, event, "add-remove", delta, coarsening=coarsening), median * z,
                    coarsening)
