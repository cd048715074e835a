"""f-DP one run (Mahloujifar, Melis & Chaudhuri 2025, "Auditing f-Differential Privacy in One Run"): the
one-run guesses tested against a trade-off curve, and the best of Steinke's and the f-DP bound
(:mod:`privaudit.attacks.bounds` states the families).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Callable

import numpy as np

from privaudit.core.errors import ConfigError, check_probability, one_of
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound, RELATION, UNIT, check_delta, check_relation_unit
from privaudit.attacks.bounds.gdp import gdp_epsilon
from privaudit.attacks.bounds.one_run import one_run_bound, one_run_epsilon, one_run_guesses


FDP_NULLS = ("approx-dp", "gdp")


def _blow_up_inverse(null: str, epsilon: float, delta: float):
    """x -> f(1 - x) for the null's trade-off curve f (the 'blow-up inverse' of the f-DP audit).

    ``approx-dp``: f_{eps,delta}(a) = max(0, 1 - delta - e^eps a, e^-eps (1 - delta - a)) (Kairouz et
    al. 2015; Dong, Roth & Su 2022, Prop. 2.5): the null is exactly "M is (eps, delta)-DP", so the
    bound is sound for any mechanism. ``gdp``: f(a) = Phi(Phi^-1(1 - a) - mu) with mu the GDP
    parameter ``epsilon`` (the null "M is mu-GDP").
    """
    if null == "gdp":
        mu, normal = epsilon, NormalDist()  # pure-Python Phi and Phi^-1: ~50x faster than scipy per scalar
        return lambda x: normal.cdf(normal.inv_cdf(x) - mu) if 0 < x < 1 else float(x >= 1)
    e = math.exp(epsilon)
    return lambda x: max(0.0, 1.0 - delta - e * (1.0 - x), (x - delta) / e)


def fdp_one_run_rejects(m: int, r: int, v: int, epsilon: float, *, beta: float, delta: float = 0.0,
                        null: str = "approx-dp") -> bool:
    """True when r guesses with v correct among m canaries reject the f-DP null at level ``beta``.

    The recursion of Mahloujifar, Melis & Chaudhuri 2025 (Alg. "audit with reconstruction and cap",
    as implemented in google-deepmind/jax_privacy ``auditing._epsilon_one_run_fdp``, read as a
    reference; this is our own code): start from r_0 = beta v / m (mass of correct guesses) and
    h_0 = beta (r - v) / m (wrong guesses); for i = v - 1, ..., 0 set h <- max(h, f(1 - r)),
    r <- min(r + i / (r_guesses - i) (h_new - h_old), 1); stop when h no longer moves. The null is
    rejected when r + h > r_guesses / m, i.e. when no mechanism whose trade-off curve is above f can
    make v of r guesses correct with probability beta. Guesses are one-sided (k- = 0) as in the
    reference implementation.
    """
    if not 0 <= v <= r <= m or m < 1:
        raise ConfigError(f"one-run counts: need 0 <= v <= r <= m and m >= 1, got m={m}, r={r}, v={v}")
    if null not in FDP_NULLS:
        raise one_of("null", null, FDP_NULLS)
    if r == 0 or v == 0:
        return False
    return fdp_recursion_rejects(_blow_up_inverse(null, epsilon, delta), m, r, v, beta)


def fdp_recursion_rejects(inv: Callable[[float], float], m: int, r: int, v: int, beta: float) -> bool:
    """The recursion of :func:`fdp_one_run_rejects` for any null trade-off curve f, given x -> f(1 - x).

    One implementation for every null: the (eps, delta) and Gaussian curves here, the claim's own
    mechanism in :mod:`privaudit.attacks.bounds.mechanism`.
    """
    if r == 0 or v == 0:
        return False
    rr, h = beta * v / m, beta * (r - v) / m
    for i in range(v - 1, -1, -1):
        h_new = max(h, inv(rr))
        if h_new == h:
            break
        rr = min(rr + (i / (r - i)) * (h_new - h), 1.0)
        h = h_new
    return rr + h > r / m


def fdp_one_run_parameter(m: int, r: int, v: int, *, beta: float = 0.05, delta: float = 0.0,
                          null: str = "approx-dp") -> float:
    """The largest null parameter (eps for ``approx-dp``, mu for ``gdp``) the counts reject (0: none)."""
    check_probability("beta", beta)
    check_delta(delta)
    if not fdp_one_run_rejects(m, r, v, 0.0, beta=beta, delta=delta, null=null):
        return 0.0
    lo, hi = 0.0, 1.0
    while fdp_one_run_rejects(m, r, v, hi, beta=beta, delta=delta, null=null):
        lo, hi = hi, hi * 2.0
        if hi > 1e3:
            return hi
    for _ in range(60):  # bisection: the rejection region is an interval [0, x*)
        mid = (lo + hi) / 2
        if fdp_one_run_rejects(m, r, v, mid, beta=beta, delta=delta, null=null):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-5:
            break
    return lo


def one_sided_counts(scores: np.ndarray, membership: np.ndarray, k_pos: int,
                     m: int | None = None) -> tuple[int, int, int]:
    """(m, r, v) of the one-sided guesses "member" on the k+ highest scores (the f-DP one-run bounds' input)."""
    guesses = one_run_guesses(scores, k_pos, 0)
    membership = np.asarray(membership, dtype=bool).ravel()
    if membership.size != guesses.size:
        raise ConfigError(f"membership: {membership.size} entries for {guesses.size} scores")
    m = guesses.size if m is None else m
    return m, int(np.count_nonzero(guesses)), int(np.sum((guesses == 1) & membership))


def fdp_one_run_bound(scores: np.ndarray, membership: np.ndarray, *, k_pos: int, beta: float = 0.05,
                      delta: float = 0.0, m: int | None = None, null: str = "approx-dp",
                      relation: str = RELATION, unit: str = UNIT) -> EpsilonLowerBound:
    """f-DP one-run bound (Mahloujifar, Melis & Chaudhuri 2025) with k+ guesses fixed in advance.

    ``approx-dp``: a sound lower bound on (eps, delta)-DP epsilon (method ``one-run-fdp``).
    ``gdp``: a lower bound mu_lb on the GDP parameter; the epsilon reported is that of mu_lb-GDP at
    delta, a lower bound on epsilon only if the mechanism's trade-off curve is Gaussian (method
    ``one-run-fdp-gdp``, never gated; mu_lb itself is sound for a mu-GDP claim).
    ``scores``/``membership`` as :func:`one_run_bound`; paired slots: the score difference and
    ``first_in`` with ``relation="replace-one"``.
    """
    check_relation_unit(relation, unit)
    m, r, v = one_sided_counts(scores, membership, k_pos, m)
    value = fdp_one_run_parameter(m, r, v, beta=beta, delta=delta, null=null)
    counts = {"m": m, "r": r, "v": v, "k_pos": k_pos, "k_neg": 0}
    conf = f"{100 * (1 - beta):.0f}% confidence"
    if null == "gdp":
        eps = gdp_epsilon(value, delta) if delta > 0 else (math.inf if value > 0 else 0.0)
        label = (f"one-run f-DP (Mahloujifar et al. 2025), Gaussian null: mu_lb={value:.3f}, k+={k_pos} fixed in "
                 f"advance, {v}/{r} correct of m={m}, {conf}; epsilon of mu_lb-GDP at delta={delta:g} "
                 "(assumes a Gaussian trade-off curve)")
        return EpsilonLowerBound(eps, "one-run-fdp-gdp", label, 1 - beta, delta, {**counts, "mu_lower": value},
                                 relation=relation, unit=unit,
                                 notes=("epsilon valid only if the trade-off curve is Gaussian; mu_lb is sound "
                                        "against a mu-GDP claim",))
    label = (f"one-run f-DP (Mahloujifar et al. 2025), (eps, delta) null: k+={k_pos} fixed in advance, "
             f"{v}/{r} correct of m={m}, {conf}, delta={delta:g}")
    return EpsilonLowerBound(value, "one-run-fdp", label, 1 - beta, delta, counts, relation=relation, unit=unit)


def best_one_run_epsilon(counts: dict[str, float], *, beta: float, delta: float) -> float:
    """The reported one-run bound: the larger of Steinke (m, r, v) and f-DP (m, r_fdp, v_fdp), each at beta / 2.

    The rule (both bounds, each at half the failure probability, report the maximum) is fixed before
    any score is seen, so the maximum holds at confidence 1 - beta (union bound).
    """
    m = int(counts["m"])
    steinke = one_run_epsilon(m, int(counts["r"]), int(counts["v"]), beta=beta / 2, delta=delta)
    fdp = fdp_one_run_parameter(m, int(counts["r_fdp"]), int(counts["v_fdp"]), beta=beta / 2, delta=delta)
    return max(steinke, fdp)


def best_one_run_bound(scores: np.ndarray, membership: np.ndarray, *, k_pos: int, k_neg: int, k_fdp: int,
                       beta: float = 0.05, delta: float = 0.0, m: int | None = None, relation: str = RELATION,
                       unit: str = UNIT) -> EpsilonLowerBound:
    """Steinke (k+, k-) and f-DP (k_fdp one-sided) one-run bounds, each at beta / 2; the larger is reported.

    Method ``one-run-best`` (sound at 1 - beta by the union bound; :func:`best_one_run_epsilon`).
    The f-DP GDP view (mu_lb) is recorded in ``counts['mu_lower']`` for reading, never gated.
    """
    st = one_run_bound(scores, membership, k_pos=k_pos, k_neg=k_neg, beta=beta / 2, delta=delta, m=m,
                       relation=relation, unit=unit)
    fd = fdp_one_run_bound(scores, membership, k_pos=k_fdp, beta=beta / 2, delta=delta, m=m, relation=relation,
                           unit=unit)
    mu = fdp_one_run_parameter(fd.counts["m"], fd.counts["r"], fd.counts["v"], beta=beta / 2, delta=delta,
                               null="gdp")
    counts = {**st.counts, "r_fdp": fd.counts["r"], "v_fdp": fd.counts["v"], "k_fdp": k_fdp,
              "eps_steinke": st.epsilon, "eps_fdp": fd.epsilon, "mu_lower": mu,
              "eps_gdp_view": gdp_epsilon(mu, delta) if delta > 0 else None}
    eps = max(st.epsilon, fd.epsilon)
    which = "f-DP" if fd.epsilon > st.epsilon else "Steinke"
    rel = "" if relation == RELATION and unit == UNIT else f" ({relation}, per {unit})"
    label = (f"one-run{rel}, max of Steinke et al. 2023 (k+={k_pos}, k-={k_neg}: {st.epsilon:.3g}) and f-DP "
             f"Mahloujifar et al. 2025 (k+={k_fdp}: {fd.epsilon:.3g}), each at {100 * (1 - beta / 2):.1f}% "
             f"(rule fixed in advance; {which} reported), m={counts['m']}, delta={delta:g}; GDP view mu_lb={mu:.3g}")
    return EpsilonLowerBound(eps, "one-run-best", label, 1 - beta, delta, counts, relation=relation, unit=unit)
