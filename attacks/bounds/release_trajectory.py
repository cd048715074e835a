"""The white-box trajectory bound of a whole DPCL step: the gradient's trials and its other releases' combined.

DPCL releases several Gaussians per step on one batch: the clipped gradient sum (multiplier z_g, sensitivity
Delta_g) and noised statistics -- SimCLR's similarity matrix (z_S, Delta_S = 4 sqrt(2|B| - 1), Thm. 1; Sec. 3.2.2),
Barlow Twins' per-view means and SSEs (Thms. 2 and 3; Sec. 3.3.2). The claim composes them as one Gaussian of
z_eff = (sum_r z_r^-2)^-1/2: Gaussian mechanisms of mu_r = 1 / z_r on the same input are together mu-GDP with
mu = sqrt(sum_r mu_r^2) (Dong, Roth & Su 2022, Cor. 3.3), exactly 1 / z_eff. The gradient canaries' per-step probes
give trials of the gradient release (:mod:`privaudit.attacks.canaries.gradient_canary`), the release probes trials of
the others (:mod:`privaudit.attacks.canaries.release_probes`), pooled in G groups of releases with equal multipliers
(group j: m_j releases at z_j), each trial x ~ N(label, z^2) in units of its own release's sensitivity under the claim
(Nasr et al. 2023, Sec. 5).

The bound. mu_g,lb and each group's mu_j,lb are the trajectory bound's per-step lower bound
(:func:`~privaudit.attacks.bounds.trajectory.mu_lower_form`, form and threshold planned from the claim alone) at
beta / (1 + G); mu_lb = sqrt(mu_g,lb^2 + sum_j m_j mu_j,lb^2) and eps_lb = eps_opt(E(1 / mu_lb)), E the claim's event
with its Gaussian at that multiplier (:func:`~privaudit.attacks.bounds.trajectory.trajectory_epsilon`).

Soundness. Suppose the run adds at least the claimed noise to every release: std >= z_r Delta_r on every probed
coordinate, fresh at every step and coordinate. Then the gradient trials satisfy H(1 / z_g) and group j's H(1 / z_j)
(trajectory.py's theorem: given the labels each trial is a draw of a mu-GDP pair, the trials independent; a group's
releases share the law), so each of the 1 + G bounds exceeds its claimed mu with probability at most beta / (1 + G);
by the union bound (no independence between the groups is needed), with probability >= 1 - beta none does and
mu_lb <= sqrt(z_g^-2 + sum_j m_j z_j^-2) <= 1 / z_eff (the claim may compose more releases than are probed). Outside
that event eps_opt(E(1 / mu_lb)) <= eps_opt(E(z_eff)) <= the claim's epsilon under every sound accountant (epsilon
decreases with the multiplier; the optimistic PLD is at most the exact epsilon). So the gate compares it with the
WHOLE claim: P[eps_lb > eps_claim] <= beta for a claim whose releases add their claimed noise.

What it can see: any release's noise level (a quarter of the similarity noise refutes the claim where the gradient
trials alone cannot) and noise missing on some entries; the released-noise checks read the same residuals for the
level and freshness across steps (:func:`privaudit.audit.gate.judge.release_noise_checks`). What it cannot: the
sensitivities themselves (the probes sit at the claimed Delta_r): Thms. 1-3 are the sensitivity checks'
(``dpcl.similarity-matrix``, ``dpcl.mean``, ``dpcl.sse``) and the gradient's the step audit's witness pairs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

from privaudit.accountants.events import event_from_dict
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound
from privaudit.attacks.bounds.trajectory import mu_lower_form, trajectory_epsilon
from privaudit.core.errors import check_probability


def _mu(c: Mapping[str, Any], beta: float) -> float:
    return float(mu_lower_form(c.get("form", "two-sided"), int(c["fp"]), int(c["n0"]), int(c["fn"]), int(c["n1"]),
                               beta=beta))


def combined_mu_lower(counts: Mapping[str, Any], *, beta: float) -> tuple[float, float, list[float]]:
    """(mu_lb, mu_g,lb, [mu_j,lb per group]) from a saved record: the gradient trials' counts at its top level, each
    group's under ``releases`` (with its ``multiplicity``), each bound at beta / (1 + G) (module docstring)."""
    check_probability("beta", beta)
    groups: Sequence[Mapping[str, Any]] = counts["releases"]
    share = beta / (1 + len(groups))
    mu_g, mus = _mu(counts, share), [_mu(g, share) for g in groups]
    total = mu_g ** 2 + sum(int(g["multiplicity"]) * m ** 2 for g, m in zip(groups, mus))
    return math.sqrt(total), mu_g, mus


def combined_epsilon_from_counts(counts: Mapping[str, Any], *, beta: float, delta: float, relation: str) -> float:
    """The whole step's bound recomputed from its saved counts at ``beta`` (the gate's family-wise level)."""
    mu, _, _ = combined_mu_lower(counts, beta=beta)
    return trajectory_epsilon(mu, event_from_dict(counts["event"]), relation, delta)


def combined_trajectory_bound(gradient: EpsilonLowerBound, groups: Sequence[Mapping[str, Any]], *,
                              gradient_multiplier: float, beta: float) -> EpsilonLowerBound:
    """The gradient trajectory bound ``gradient`` (its counts keep their own fields) with the release groups' trials
    (:meth:`privaudit.attacks.canaries.release_probes.ReleaseTrials.to_dict` each) added: epsilon = eps_opt(E(1 /
    mu_lb)),
    each bound at beta / (1 + G), compared with the whole claim (module docstring)."""
    record = {**gradient.counts, "releases": [dict(g) for g in groups]}
    mu, mu_g, mus = combined_mu_lower(record, beta=beta)
    mu_claim = math.sqrt(gradient_multiplier ** -2 + sum(g["multiplicity"] * g["multiplier"] ** -2 for g in groups))
    record["combined"] = {"mu_lower": mu, "mu_lower_gradient": mu_g, "mu_lower_releases": mus, "mu_claim": mu_claim,
                          "claim_rejected": mu > mu_claim, "beta_each": beta / (1 + len(groups))}
    eps = trajectory_epsilon(mu, event_from_dict(record["event"]), gradient.relation, gradient.delta)
    parts = "; ".join(f"{', '.join(g['names'])}: {g['n0'] + g['n1']} trials, mu_lb={m:.4g} (claim {1 / g['multiplier']:.4g} "
                      f"each)" for g, m in zip(groups, mus))
    label = (f"white-box trajectory of the whole step (Nasr et al. 2023; DPCL Secs. 3.2.2, 3.3.2): gradient trials "
             f"mu_g,lb={mu_g:.4g} (claim {1 / gradient_multiplier:.4g}); {parts}; each at beta/{1 + len(groups)}, "
             f"combined mu_lb={mu:.4g} (claim: {mu_claim:.4g}); eps = optimistic PLD epsilon of the claim's steps at "
             f"multiplier 1/mu_lb, delta={gradient.delta:g}, {100 * (1 - beta):.0f}% confidence")
    note = ("the release probes observe the step's other noised releases: the bound tests them all and is compared "
            "with the whole claim (sound if each release adds at least its claimed noise, fresh per entry and step)")
    return dataclasses.replace(gradient, epsilon=eps, label=label, counts=record, notes=gradient.notes + (note,))
