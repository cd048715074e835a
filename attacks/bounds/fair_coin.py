"""The fair-coin test behind every one-run bound: the one-run game assumes each example was included by a fair
coin; :func:`check_fair_coin` refuses counts that contradict it, at a share of beta (:func:`split_beta`).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from privaudit.core.errors import ConfigError, check_probability


#: The share of a one-run audit's beta spent on :func:`check_fair_coin` (the rest goes to the bound), so the
#: verdict's confidence counts both: with probability >= 1 - beta, neither a true coin is refused nor a true claim
#: refuted (union bound).
COIN_TEST_SHARE = 0.1


#: What a user can run instead when the counts contradict the fair coin (named in the refusal).
COIN_ALTERNATIVES = ("--inclusion-probability P when each example was included independently with a known "
                     "probability P",
                     "--design multi-run when every score is an independent training run on a fixed pair",
                     "privaudit audit-model --train-fn (canary runs of your training function)",
                     "a new split that includes each example by a fair coin")


def split_beta(beta: float) -> tuple[float, float]:
    """(level of the fair-coin test, beta of the bound): :data:`COIN_TEST_SHARE` of ``beta`` and the rest."""
    check_probability("beta", beta)
    return COIN_TEST_SHARE * beta, (1 - COIN_TEST_SHARE) * beta


def fair_coin_p_value(n_in: int, n_out: int, p: float = 0.5) -> float:
    """Two-sided exact binomial test of n_in ~ Binomial(n_in + n_out, p) (scipy's ``binomtest``)."""
    if n_in < 0 or n_out < 0 or n_in + n_out == 0:
        raise ConfigError(f"counts: need n_in, n_out >= 0 and at least one candidate, got {n_in}, {n_out}")
    return float(stats.binomtest(int(n_in), int(n_in + n_out), p).pvalue)


def check_fair_coin(n_in: int, n_out: int, level: float, what: str = "members and nonmembers",
                    p: float = 0.5) -> float:
    """Refuse (ConfigError, one line) when the counts contradict the one-run design's coin: the two-sided binomial
    test of n_in ~ Binomial(m, p) rejects at ``level`` (p = 1/2: the fair coin). Steinke et al.'s bound assumes each
    candidate was included by an independent fair coin; with n_in far from m / 2 the base rate alone makes
    "member" guesses right more often than half, and the bound would refute an honest claim. Returns the p-value."""
    value = fair_coin_p_value(n_in, n_out, p)
    if value < level:
        coin = "fair coin per example" if p == 0.5 else f"inclusion probability {p:g} per example"
        raise ConfigError(f"{what}: {n_in} vs {n_out} contradict the one-run design's {coin} (two-sided binomial "
                          f"test p = {value:.3g} < {level:g}); no bound is computed. Designs that apply: "
                          f"{'; '.join(COIN_ALTERNATIVES)}")
    return value


def fair_coin_subsample(membership: np.ndarray, p: float, seed: int = 0) -> np.ndarray:
    """Which candidates to keep so that, given kept, each one's membership is a fair coin (a mask, seeded).

    Reduction (rejection sampling). Candidate i is in the run with known probability p, independently; keep a
    member with probability a = min(1, (1 - p) / p) and a non-member with b = min(1, p / (1 - p)), by coins
    independent of everything else. Then P[in, kept] = p a = min(p, 1 - p) = (1 - p) b = P[out, kept], so given
    K (who is kept) and the dropped candidates' memberships (independent pairs (S_i, K_i) across i), the kept
    candidates' memberships are independent fair coins, and the run is M(the dropped members + the kept ones
    drawn by those coins): Steinke et al.'s game on the kept candidates, with the dropped members as fixed data.
    The guesses, fixed by the kept candidates' scores alone, then get the one-run bound as it stands.
    """
    check_probability("inclusion probability", p)
    membership = np.asarray(membership, dtype=bool)
    keep = np.where(membership, min(1.0, (1 - p) / p), min(1.0, p / (1 - p)))
    return np.random.default_rng(seed).random(membership.size) < keep
