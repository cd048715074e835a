"""The noise's joint law within a step: repeated values, correlation at a lag within a tensor, correlation between
tensors of one size. The tests behind :func:`privaudit.accountants.trace.trace.check_trace`'s ``noise_law`` findings,
read from the step column ``noise_law`` (recorded from the noise as drawn by
:mod:`privaudit.defenses.dp.release.noise_law`).

Why. Every other check reads the noise one coordinate, one tensor's variance or one step at a time: noise whose
coordinates repeat (one Gaussian draw serving two halves of the gradient, a row broadcast over a matrix's rows,
a small draw tiled, the same seed for two tensors of one size, a sign-flipped copy) has every coordinate N(0, s^2)
and every step fresh, yet the difference (or sum) of the two parts carries no noise: epsilon is infinite.

The claim's mechanism draws the n noise coordinates of a step independently from N(0, s^2) (any s: the tests are
scale-free, so more noise than claimed passes them). Four tests on each step, each a union bound, exact:

* **Repeats at a lag** (``repeat``: ``count`` pairs of coordinates (i, i + L) with equal |value| at the lag L holding
  the most, counting within each group of equal |values| its members consecutive in index). Rounded to a float
  format with a p-bit significand and scaled by a constant, a Gaussian of any std gives each |value| a probability
  at most q = 2^(3 - p) (:func:`value_mass_bound`; float32: 2^-21 = 4.8e-7, about 2.8 times the largest mass that
  rounding gives, 12 phi(1) 2^-p = 1.7e-7: a float's mass is at most phi(1) 2^(1 - p) whatever the std, the product
  by the std merges at most three floats, and |x| takes both signs; torch's Box-Muller draws, whose two outputs share
  a radius and are equal in magnitude with probability at most 4 x 2^-24, stay below it). k pairs at one lag form a
  forest (every edge joins i to i + L), so all k repeat with probability at most q^k, and by the hockey-stick identity
  P[some lag holds k or more] <= sum_L C(n - L, k) q^k = C(n, k + 1) q^k (:func:`repeat_lag_p`): a birthday bound
  at a lag. An exact copy is caught from a handful of pairs, whatever its share of the noise.
* **The largest repeat** (``largest``: the most coordinates sharing one |value|): P[some g coordinates share one]
  <= C(n, g) q^(g - 1) (:func:`multiplicity_p`): a draw broadcast or tiled, or a generator of few values.
* **Correlation at a lag within a tensor** (``lag``: the tensor and lag L of the most extreme rho_L = sum_i x_i
  x_{i+L} / sum_i x_i^2 over every tensor's lags, from its FFT autocorrelation). rho_L = x'Ax / x'x with A symmetric,
  zero diagonal, ||A||_F^2 = (n - L) / 2 and ||A||_op <= 1. For x ~ N(0, s^2 I) and c > 0, Z = x'(A - cI)x has
  log E exp(theta Z) <= -theta c n + theta^2 V / (1 - 2 theta b), V = ||A||_F^2 + c^2 n, b = max(0, ||A||_op - c)
  (-log(1 - 2y) / 2 <= y + y^2 / (1 - 2y) for 0 <= y < 1/2, <= y + y^2 for y < 0), a sub-gamma law, so
  P[rho_L >= c] = P[Z >= 0] <= exp(-y) with sqrt(y) = c n / (sqrt(V + 2 b c n) + sqrt(V)) (Boucheron, Lugosi and
  Massart 2013, Sec. 2.4; :func:`tail_exponent`); the same for -A. Under the claim y ~ c^2 n / 2, the Gaussian
  tail of rho_L ~ N(0, 1 / n). The step's p is the smallest two-sided p times the number of (tensor, lag) tests
  (Bonferroni). A broadcast along an axis of a tensor's shape, or a tile, is a lag: the axis' stride.
* **Correlation between tensors of one size** (``pair``: the largest |cos| = |<x_a, x_b>| / (|x_a| |x_b|) over the
  pairs of tensors with as many coordinates m). Two independent isotropic Gaussian vectors (of any scales) have
  cos^2 ~ Beta(1/2, (m - 1) / 2) exactly (:func:`cosine_tail`); a copy gives 1, a sign-flipped copy -1; times the
  number of pairs.

A noise measured as a difference rather than intercepted as drawn (a declared release: what the block added, in
float) carries the rounding of that addition: ``slack`` bounds its effect on the statistic and |rho| - slack is
tested (eps_j bounding the rounding's norm in tensor j: 4 eps_j / |x_j| for rho_L, since |u'Au - w'Aw| <= 2 |u - w|
and |x / |x| - n / |n|| <= 2 |x - n| / |x|; 2 eps_a / |x_a| + 2 eps_b / |x_b| for the cosine); its values are not
the drawn ones, so the repeat tests are not run on it (``bits`` is None).

Level. Each of the four tests at alpha / (4 T) on each of the T steps (alpha: the share of the trace's level
:mod:`privaudit.accountants.trace.trace` gives them, a quarter): a correct run fails one with probability at most alpha.
Steps whose noise std is 0 are skipped (no noise to judge).

What it cannot see: dependence through a nonlinear map or a permutation (a copy reordered otherwise than by a fixed
offset: its correlation is at no lag and no |value| repeats at one lag, though the largest repeat may); correlation
between tensors of different sizes, or of one size at a lag other than 0 unless exact; dependence across steps (the
trace's digests see exact reuse at any two steps, the canaries' step-pair test correlation between consecutive
disjoint steps, :mod:`privaudit.attacks.noise.noise_structure`); a window it does not read (steps above
:data:`~privaudit.defenses.dp.release.noise_law.MAX_READ` coordinates read a rotating window of tensors); the noise of a
release other than the gradient's (DPCL's similarity matrix and statistics); repeats in noise of few significand bits
(float16: q = 2^-8, so it takes long copies) and in measured noise (a declared release's; an Opacus watch tests the
repeats of the draws it intercepts, the correlations of what was added).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from scipy import stats

from privaudit.accountants.trace.trace_record import TraceMismatch, TrainingTrace

#: The tests of one step and the share of the level each takes (equal).
TESTS = ("repeat", "largest", "lag", "pair")


def value_mass_bound(bits: int) -> float:
    """q = 2^(3 - p): a bound on the probability of any one |value| of a Gaussian (any std) rounded to a p-bit
    significand and scaled by a constant (module docstring)."""
    return 2.0 ** (3 - int(bits))


def log_binom(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def repeat_lag_p(count: int, n: int, q: float) -> float:
    """P[some lag among n coordinates holds ``count`` or more repeated pairs] <= C(n, count + 1) q^count."""
    if count < 1 or count + 1 > n:
        return 1.0
    return min(1.0, math.exp(log_binom(n, count + 1) + count * math.log(q)))


def multiplicity_p(largest: int, n: int, q: float) -> float:
    """P[some ``largest`` of n coordinates share one |value|] <= C(n, largest) q^(largest - 1)."""
    if largest < 2 or largest > n:
        return 1.0
    return min(1.0, math.exp(log_binom(n, largest) + (largest - 1) * math.log(q)))


def tail_exponent(c: Any, n: Any, frob2: Any, op: Any) -> Any:
    """y with P[x'Ax / x'x >= c] <= exp(-y) for x ~ N(0, s^2 I_n), A symmetric with zero diagonal, ||A||_F^2 =
    ``frob2``, ||A||_op <= ``op`` (module docstring); c > 0. Elementwise on floats, NumPy arrays or torch tensors."""
    v = frob2 + c * c * n
    b = (op - c + abs(op - c)) / 2
    t = c * n
    root = t / ((v + 2 * b * t) ** 0.5 + v ** 0.5)
    return root * root


def lag_p(corr: float, n: int, lag: int, tests: int, slack: float = 0.0) -> float:
    """The two-sided p of the most extreme lag correlation, times the step's (tensor, lag) tests."""
    c = abs(corr) - slack
    if c <= 0 or n < 2:
        return 1.0
    return min(1.0, 2 * tests * math.exp(-tail_exponent(c, n, (n - lag) / 2, 1.0)))


def cosine_tail(c: Any, m: Any) -> Any:
    """P[|cos| >= c] for the angle between two independent isotropic vectors of m coordinates (any scales): cos^2 is
    Beta(1/2, (m - 1) / 2), exactly. Elementwise on floats and NumPy arrays."""
    return stats.beta.sf(c * c, 0.5, (m - 1) / 2)


def pair_p(corr: float, m: int, tests: int, slack: float = 0.0) -> float:
    """The p of the most extreme cosine between two tensors of m coordinates (:func:`cosine_tail`), times the pairs."""
    c = abs(corr) - slack
    if c <= 0 or m < 2:
        return 1.0
    return min(1.0, tests * float(cosine_tail(c, m)))


def step_p_values(record: Mapping[str, Any]) -> dict[str, float]:
    """Each test's p (an upper bound under the claim) from one step's ``noise_law`` record; tests it cannot run are
    left out."""
    out, slack = {}, float(record.get("slack") or 0.0)
    rep = record.get("repeat")
    n = int((rep or {}).get("n") or record.get("read") or 0)
    if rep and record.get("bits"):
        q = value_mass_bound(int(record["bits"]))
        out["repeat"] = repeat_lag_p(int(rep["count"]), n, q)
        out["largest"] = multiplicity_p(int(rep["largest"]), n, q)
    lag = record.get("lag")
    if lag:
        out["lag"] = lag_p(float(lag["corr"]), int(lag["n"]), int(lag["lag"]), int(lag["tests"]),
                           float(lag.get("slack", slack)))
    pair = record.get("pair")
    if pair:
        out["pair"] = pair_p(float(pair["corr"]), int(pair["n"]), int(pair["tests"]), float(pair.get("slack", slack)))
    return out


def describe(test: str, record: Mapping[str, Any], p: float, level: float, step: int) -> str:
    """One line: what repeated or correlated, where, and how unlikely that is under the claim."""
    how = f"(p {'< 1e-300' if p < 1e-300 else f'<= {p:.3g}'} under independent Gaussian noise, level {level:.3g})"
    if test in ("repeat", "largest"):
        rep, fmt = record["repeat"], f"a {record['bits']}-bit significand"
        where = rep.get("tensors") or []
        first = f" (the first in tensors {where[0]} and {where[1]})" if len(where) == 2 else ""
        n = rep.get("n") or record["read"]
        what = (f"its |values| repeat exactly at lag {rep['lag']} on {rep['count']} of {n} coordinates{first}"
                if test == "repeat" else f"one |value| is drawn {rep['largest']} times in {n} coordinates")
        return (f"step {step}: the noise is not drawn independently across coordinates: {what}, which continuous "
                f"noise rounded to {fmt} does not do {how}: one draw serves several parts of the gradient (a copy, "
                "a sign-flipped copy, a tile or a broadcast), and their difference carries no noise (epsilon is "
                "infinite)")
    if test == "lag":
        lag = record["lag"]
        return (f"step {step}: tensor {lag['tensor']}'s noise correlates with itself at lag {lag['lag']} "
                f"(correlation {float(lag['corr']):.6g} over its {lag['n']} coordinates; {lag['tests']} (tensor, lag) "
                f"tests) {how}: a draw tiled, broadcast along an axis or repeated within the tensor, so some "
                "combination of its coordinates carries less noise than the claim states")
    pair = record["pair"]
    return (f"step {step}: tensors {pair['tensors'][0]} and {pair['tensors'][1]} ({pair['n']} coordinates each) "
            f"drew correlated noise (cosine {float(pair['corr']):.6g}: a copy gives 1, a sign-flipped copy -1; "
            f"{pair['tests']} pairs) {how}: their sum or difference carries less noise than the claim states")


#: How a finding names each test.
TEST_NAMES = {"repeat": "repeats at a lag", "largest": "the largest repeat", "lag": "correlation at a lag",
              "pair": "correlation between tensors"}


def noise_law_findings(trace: TrainingTrace, alpha: float,
                       records: Sequence[Any] | None = None) -> list[TraceMismatch]:
    """At most one finding over the run (``noise_law`` column, or ``records``; every test at alpha / (4 T) on every
    step): the earliest failing step's smallest p, with how many steps failed and which other tests did."""
    column = trace.column("noise_law") if records is None else records
    if not column:
        return []
    level = alpha / (len(TESTS) * max(1, trace.steps))
    failing = []
    for t, (record, std) in enumerate(zip(column, trace.columns["noise_std"])):
        if record and std is not None and float(std) > 0:
            bad = [(p, test) for test, p in step_p_values(record).items() if p < level]
            if bad:
                failing.append((t + 1, record, bad))
    if not failing:
        return []
    step, record, bad = failing[0]
    p, test = min(bad, key=lambda b: b[0])
    others = sorted({TEST_NAMES[name] for _, _, b in failing for _, name in b} - {TEST_NAMES[test]})
    where = f" (failed at {len(failing)} of {trace.steps} steps" + (f"; also {', '.join(others)}" if others else "")
    return [TraceMismatch(step, "noise_law", level, p, describe(test, record, p, level, step) + where + ")")]
