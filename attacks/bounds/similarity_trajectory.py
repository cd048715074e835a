"""The white-box trajectory bound of DPCL-SimCLR's whole step: gradient and similarity trials combined.

DPCL-SimCLR (Sec. 3.2.2) releases two Gaussians per step on one batch: the clipped gradient sum (multiplier z_g,
sensitivity Delta_g) and the similarity matrix (z_S, Delta_S = 4 sqrt(2|B| - 1), Thm. 1). The claim composes them as
one Gaussian of z_eff = (z_g^-2 + z_S^-2)^-1/2: two Gaussian mechanisms of mu_g = 1 / z_g and mu_S = 1 / z_S on the
same input are together mu-GDP with mu = sqrt(mu_g^2 + mu_S^2) (Dong, Roth & Su 2022, Cor. 3.3), exactly 1 / z_eff.
The gradient canaries' per-step probes give trials of the gradient release (:mod:`privaudit.attacks.gradient_canary`),
the similarity probes trials of the similarity release (:mod:`privaudit.attacks.similarity_probes`), each
x ~ N(label, z^2) in units of its own sensitivity under the claim (Nasr et al. 2023, Sec. 5).

The bound. mu_g,lb and mu_S,lb are each the trajectory bound's per-step lower bound (:func:`~privaudit.attacks.bounds.
trajectory.mu_lower_form`, its form and threshold planned from the claim alone) at beta / 2;
mu_lb = sqrt(mu_g,lb^2 + mu_S,lb^2) and eps_lb_trajectory = eps_opt(E(1 / mu_lb)), E the claim's event with its
Gaussian at that multiplier (:func:`~privaudit.attacks.bounds.trajectory.trajectory_epsilon`).

Soundness. Suppose the run adds at least the claimed noise to both releases: std >= z_g Delta_g on every gradient
canary coordinate and >= z_S Delta_S on every similarity entry, fresh at every step and coordinate. Then the gradient
trials satisfy H(1 / z_g) and the similarity trials H(1 / z_S) (trajectory.py's theorem: given the labels each
trial is a draw of a mu-GDP pair, the trials independent), so P[mu_g,lb > 1 / z_g] <= beta / 2 and
P[mu_S,lb > 1 / z_S] <= beta / 2; by the union bound (no independence between the two sets is needed), with
probability >= 1 - beta both hold and mu_lb <= sqrt(z_g^-2 + z_S^-2) = 1 / z_eff. Outside that event
eps_opt(E(1 / mu_lb)) <= eps_opt(E(z_eff)) <= the claim's epsilon under every sound accountant (epsilon decreases
with the multiplier; the optimistic PLD is at most the exact epsilon). So the gate compares it with the WHOLE claim:
P[eps_lb_trajectory > eps_claim] <= beta for a claim whose releases add their claimed noise.

What it can see: either release's noise level (a tenth of z_S on the similarity matrix refutes the claim here where
the gradient trials alone cannot), noise missing on some entries (a probed entry without noise is separated
exactly), and noise reused across steps only through the recorded residuals (each entry's step-pair differences,
``pair_ss``; the threshold counts keep their mean under reuse). What it cannot: the sensitivities themselves (the
probes sit at the claimed Delta_g and Delta_S): Thm. 1's Delta_S is the sensitivity check's ``dpcl.similarity-matrix``
and the gradient's the step audit's witness pairs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from privaudit.accountants.events import event_from_dict
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound
from privaudit.attacks.bounds.trajectory import TrajectoryCounts, mu_lower_form, trajectory_epsilon
from privaudit.core.errors import check_probability


def _mu(c: Mapping[str, Any], beta: float) -> float:
    return float(mu_lower_form(c.get("form", "two-sided"), int(c["fp"]), int(c["n0"]), int(c["fn"]), int(c["n1"]),
                               beta=beta))


def combined_mu_lower(counts: Mapping[str, Any], *, beta: float) -> tuple[float, float, float]:
    """(mu_lb, mu_g,lb, mu_S,lb) from a saved record: the gradient trials' counts at its top level, the similarity
    trials' under ``similarity``, each bound at beta / 2, combined as sqrt(mu_g,lb^2 + mu_S,lb^2) (module docstring)."""
    check_probability("beta", beta)
    mu_g, mu_s = _mu(counts, beta / 2), _mu(counts["similarity"], beta / 2)
    return math.hypot(mu_g, mu_s), mu_g, mu_s


def combined_epsilon_from_counts(counts: Mapping[str, Any], *, beta: float, delta: float, relation: str) -> float:
    """The combined bound recomputed from its saved counts at ``beta`` (the gate's family-wise level)."""
    mu, _, _ = combined_mu_lower(counts, beta=beta)
    return trajectory_epsilon(mu, event_from_dict(counts["event"]), relation, delta)


def combined_trajectory_bound(gradient: EpsilonLowerBound, similarity: TrajectoryCounts, *,
                              multipliers: Mapping[str, float], beta: float) -> EpsilonLowerBound:
    """The gradient trajectory bound ``gradient`` (its counts keep their own fields) with the similarity trials added:
    epsilon = eps_opt(E(1 / mu_lb)), mu_lb combined at beta / 2 each, compared with the whole claim (docstring)."""
    z_g, z_s = float(multipliers["gradient"]), float(multipliers["similarity"])
    record = {**gradient.counts, "similarity": {**similarity.to_dict(), "multiplier": z_s}}
    mu, mu_g, mu_s = combined_mu_lower(record, beta=beta)
    mu_claim = math.hypot(1 / z_g, 1 / z_s)
    record["combined"] = {"mu_lower": mu, "mu_lower_gradient": mu_g, "mu_lower_similarity": mu_s,
                          "mu_claim": mu_claim, "claim_rejected": mu > mu_claim, "beta_each": beta / 2}
    eps = trajectory_epsilon(mu, event_from_dict(record["event"]), gradient.relation, gradient.delta)
    label = (f"white-box trajectory of DPCL's whole step (Nasr et al. 2023; DPCL Sec. 3.2.2): gradient trials "
             f"mu_g,lb={mu_g:.4g} (claim {1 / z_g:.4g}) and {similarity.n0 + similarity.n1} similarity trials "
             f"mu_S,lb={mu_s:.4g} (claim {1 / z_s:.4g}), each at beta/2, combined mu_lb={mu:.4g} (claim z_eff: "
             f"{mu_claim:.4g}); eps = optimistic PLD epsilon of the claim's steps at multiplier 1/mu_lb, "
             f"delta={gradient.delta:g}, {100 * (1 - beta):.0f}% confidence")
    note = ("the similarity probes observe DPCL's noised similarity matrix: the bound tests both releases and is "
            "compared with the whole claim (sound if each release adds at least its claimed noise, fresh per entry "
            "and step)")
    return dataclasses.replace(gradient, epsilon=eps, label=label, counts=record, notes=gradient.notes + (note,))
