"""The one statistical check of every soundness test, and its power: against a doubled over-claim rate, and
against a planted over-claim.

A lower bound at confidence 1 - beta is sound when, on a mechanism whose epsilon (or mu) is known, it exceeds
the truth on at most a beta fraction of independent runs. Over n runs the number of over-claims of a sound
bound is stochastically at most Binomial(n, beta), so the check rejects the bound ("unsound") when that count
reaches :func:`critical`, the smallest c with P[Binomial(n, beta) >= c] < :data:`FALSE_ALARM` = 1e-6: a
sound bound fails the check with probability below 1e-6 (one-sided binomial test).

Power against a doubled over-claim rate (any bound, whatever its values). A bound that exceeds the truth on a
fraction 2 beta of runs (:data:`RATE_FACTOR` = 2) is rejected with probability
P[Binomial(n, 2 beta) >= critical(n, beta)] (:func:`power_against_doubled_rate`), which depends on n and beta
only. At beta = 0.05 it is 0.04 at n = 200 and 0.40 at n = 500; it reaches :data:`TARGET_POWER` = 0.9 from
n = :func:`runs_for_power` (0.05) = 950 runs. Every check prints it; a test whose runs are cheap (bounds
evaluated on simulated counts) runs that many, and asserts it (``assert_sound(..., min_power=TARGET_POWER)``);
a test whose runs are dear states its own figure in its docstring.

Power against a planted over-claim. The planted unsound variant is the bound times :data:`PLANTED` = 1.2. On the
same runs it over-claims on the fraction p1 where the honest bound exceeds truth / 1.2, and the check rejects it
with probability P[Binomial(n, p1) >= critical(n, beta)] (:func:`power`). At n = 200 and beta = 0.05,
critical = 28, and the power is above 0.9999 for every p1 >= 0.25; each test states its p1 and asserts a power of
at least :data:`MIN_POWER`, which needs the audit to be tight (the honest bound within 1.2x of the truth on many
runs).

Runs are simulated for all seeds at once (arrays of seeds x canaries); a bound that is a function of its
counts is evaluated once per distinct count (:func:`per_counts`), so no Python loop runs over seeds.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy import stats

FALSE_ALARM = 1e-6
PLANTED = 1.2
MIN_POWER = 0.999
RATE_FACTOR = 2.0
TARGET_POWER = 0.9


def critical(n: int, beta: float) -> int:
    """The smallest over-claim count c with P[Binomial(n, beta) >= c] < :data:`FALSE_ALARM`."""
    counts = np.arange(n + 2)
    return int(counts[np.argmax(stats.binom.sf(counts - 1, n, beta) < FALSE_ALARM)])


def over_claims(values: np.ndarray, truth: float) -> int:
    """How many runs' bounds exceed the truth (beyond float rounding)."""
    return int(np.sum(np.asarray(values) > truth * (1 + 1e-9) + 1e-12))


def rejects(values: np.ndarray, truth: float, beta: float) -> bool:
    """True when the check calls the bound unsound: its over-claims reach :func:`critical`."""
    return over_claims(values, truth) >= critical(len(values), beta)


def power(p1: float, n: int, beta: float) -> float:
    """The probability that the check rejects a variant over-claiming on a fraction ``p1`` of n runs."""
    return float(stats.binom.sf(critical(n, beta) - 1, n, p1))


def power_against_doubled_rate(n: int, beta: float) -> float:
    """The probability that the check on n runs rejects a bound whose over-claim rate is :data:`RATE_FACTOR` x beta."""
    return power(min(1.0, RATE_FACTOR * beta), n, beta)


def runs_for_power(beta: float, target: float = TARGET_POWER) -> int:
    """The fewest runs (a multiple of 50) at which :func:`power_against_doubled_rate` reaches ``target``."""
    n = 50
    while power_against_doubled_rate(n, beta) < target:
        n += 50
    return n


def per_counts(bound: Callable[..., float], rows: np.ndarray) -> np.ndarray:
    """``bound(*row)`` for each row of integer counts (one row per run), evaluated once per distinct row."""
    rows = np.asarray(rows, dtype=np.int64)
    distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    values = np.array([bound(*map(int, row)) for row in distinct], dtype=np.float64)
    return values[np.asarray(inverse).reshape(-1)]


def rr_runs(rng: np.random.Generator, seeds: int, m: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(coins, scores), each (seeds, m): randomized response on each canary's fair coin (kept with probability
    e^eps / (1 + e^eps), so exactly eps-DP w.r.t. the coin, under add/remove inclusion coins or replace-one slots
    alike), scored 1 / 0 with ties broken at random (independently of the coins)."""
    coins = rng.random((seeds, m)) < 0.5
    keep = rng.random((seeds, m)) < np.exp(eps) / (1 + np.exp(eps))
    return coins, np.where(keep, coins, ~coins) + 1e-3 * rng.random((seeds, m))


def guess_counts(scores: np.ndarray, coins: np.ndarray, k_pos: int, k_neg: int) -> np.ndarray:
    """Correct guesses per run (row): "in" on the k+ highest scores, "out" on the k- lowest (ties by position, as
    :func:`privaudit.attacks.bounds.one_run.one_run_guesses`)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    top = np.take_along_axis(coins, order[:, :k_pos], 1).sum(1)
    bottom = (~np.take_along_axis(coins, order[:, scores.shape[1] - k_neg:], 1)).sum(1) if k_neg else 0
    return top + bottom


def check(name: str, values: np.ndarray, truth: float, beta: float) -> tuple[int, float, float]:
    """Print and return (over-claims, planted over-claim rate p1, power of the check against the planted
    variant) of ``values`` on ``len(values)`` runs, printing the power against a doubled over-claim rate too;
    the tests assert on them."""
    n = len(values)
    over = over_claims(values, truth)
    p1 = over_claims(PLANTED * np.asarray(values), truth) / n
    pw = power(p1, n, beta)
    print(f"\n{name}: {over}/{n} over-claims (critical {critical(n, beta)} at false alarm {FALSE_ALARM:g}), mean "
          f"power {np.mean(values) / truth:.3f}; power against over-claims on {RATE_FACTOR:g} x beta: "
          f"{power_against_doubled_rate(n, beta):.3f}; x{PLANTED} planted: over-claims on {p1:.3f}, power {pw:.6f}")
    return over, p1, pw


def assert_sound(name: str, values: Sequence[float], truth: float, beta: float, *, min_power: float = 0.0) -> None:
    """The honest bound passes the check, and (``min_power``) the check on this many runs rejects a bound that
    over-claims on :data:`RATE_FACTOR` x beta of them with at least that probability."""
    values = np.asarray(values, dtype=np.float64)
    over, _, _ = check(name, values, truth, beta)
    assert not rejects(values, truth, beta), f"{name}: {over} over-claims in {len(values)} runs: unsound"
    doubled = power_against_doubled_rate(len(values), beta)
    assert doubled >= min_power, f"{name}: power {doubled:.3f} against a doubled over-claim rate (< {min_power})"


def assert_planted_rejected(name: str, values: Sequence[float], truth: float, beta: float) -> None:
    """The planted variant (the bound times :data:`PLANTED`) fails the same check, and the check's power against it
    (from its measured over-claim rate) is at least :data:`MIN_POWER`."""
    values = np.asarray(values, dtype=np.float64)
    _, p1, pw = check(name, values, truth, beta)
    assert rejects(PLANTED * values, truth, beta), f"{name}: the x{PLANTED} variant passes the check"
    assert pw >= MIN_POWER, f"{name}: power {pw:.4f} against the x{PLANTED} variant (p1 = {p1:.3f})"
