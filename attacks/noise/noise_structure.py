"""Where and when the release added its noise: fresh across steps, on every parameter tensor, independent across
coordinates.

Why. The released-noise check (:mod:`privaudit.attacks.noise.released_noise`) pools every canary residual into one
chi-square: it tests the noise's marginal variance. Noise re-drawn from the same seed at every step has the
claimed variance (its epsilon is infinite: two steps' difference cancels it), and a tensor released without noise
is lost among the others when it is small (a model's biases). Two more tests on the same residuals (each canary
coordinate's centred observation less the canaries' designed contribution, in units of D; z_c the claimed
multiplier of the gradient release):

* **independence across steps** (``pair_n``, ``pair_ss``): the steps are paired disjointly, (0, 1), (2, 3), ...
  (an odd last step is left out). Under the claim the residuals are independent N(0, z_c^2) over coordinates and
  steps, so the differences r_t - r_{t+1} of the M (coordinate, pair) cells are independent N(0, 2 z_c^2) and
  S = sum (r_t - r_{t+1})^2 / (2 z_c^2) ~ chi^2_M exactly; rejecting when P[chi^2_M <= S] < alpha fails a
  correct release with probability alpha. More noise (std >= z_c), or a canary contribution other than the designed
  one, only makes S stochastically larger (a difference of mean m has E = m^2 + 2 z^2). Noise reused from one step
  to the next makes the differences 0, a correlation rho > 0 shrinks their variance to 2 z^2 (1 - rho): the lower
  tail rejects. It cannot see reuse between steps it does not pair (steps 1 and 2, or 0 and 5), nor correlation
  across coordinates within a step; reuse confined to a tensor too small to move the pooled sum is left to the
  per-tensor test.
* **coverage of every parameter tensor** (``tensor_noise``: per tensor the residual count n_g and sum of squares
  ss_g, and its step pairs' count and squared differences): on each tensor's residuals the pooled check,
  S_g = ss_g / z_c^2 ~ chi^2_{n_g} under the claim, and the step-pair test above, every one of the L tests at
  alpha / L (Bonferroni: a correct release fails some tensor with probability at most alpha). A tensor without
  noise has residuals ~0 (float rounding), so a few of its canaries over two steps reject far below any level the
  gate uses, and noise reused on one tensor only is seen there. A tensor with no canary is not covered (it is
  listed as such); the canaries are placed so that every tensor holds some
  (:mod:`privaudit.attacks.canaries.canary_strata`).

* **independence across coordinates** (``mode_n``, ``mode_ss`` beside the pooled ``noise_n``, ``noise_ss``): each
  step's residuals r_t (m_t canary coordinates) split into their sum's share, s_t^2 / m_t (the squared projection on
  the unit vector 1 / sqrt(m_t)), and the rest, ||r_t||^2 - s_t^2 / m_t (the orthogonal complement, m_t - 1
  dimensions). For independent N(0, sigma^2) noise on every coordinate -- *any* sigma -- the two are independent
  sigma^2 chi^2_1 and sigma^2 chi^2_{m_t - 1}, so over the T steps F = (A / T) / (B / (N - T)), A = sum_t s_t^2 / m_t,
  B = sum_t (||r_t||^2 - s_t^2 / m_t), N = sum_t m_t, is F(T, N - T) exactly; the upper tail rejects (p = P[F(T, N -
  T) >= F] < alpha). The test is scale-free: a release that adds more noise than the claim (more private, not a
  violation) passes it, which a chi-square of A against the claimed z_c would not (at 1.5 times the claimed std its
  statistic's mean is 2.25 T: it rejects correct runs far above its level, the more so the more steps; the shared test
  plants that variant). Noise with a component shared by the coordinates (pairwise correlation rho) makes Var s_t =
  m_t sigma^2 (1 + (m_t - 1) rho) and shrinks the rest by 1 - rho: with m_t ~ 10^4 canaries a correlation of 10^-3
  already multiplies F by about 11. Such noise hides less along a unit's gradient than the claim states (its
  Mahalanobis sensitivity is Delta / sqrt(1 - rho) for a Dirac unit). Noise repeated between tensors (each tensor's
  noise from one re-created generator) correlates only the canary coordinates at the same offset in two tensors, which
  F sees weakly; the trace's leading-noise digests see it exactly (:mod:`privaudit.accountants.trace.as_run`). It cannot
  see correlation that sums to zero over the canary coordinates (a contrast between two tensors), nor correlation
  confined to coordinates without canaries.

All three are exact under the claim's mechanism (fresh Gaussian noise on every coordinate and step) and read only the
counts a run saves, so the gate recomputes them against the cell's own claim.
"""

from __future__ import annotations

from typing import Any, Mapping

import math

from scipy import stats

from privaudit.attacks.noise.released_noise import NOISE_ALPHA, check_noise_args, chi_square_lower_tail

#: What the gate calls each check (its messages and ``caught_by``).
INDEPENDENCE, PER_TENSOR = "noise independence across steps", "noise per tensor"
COORDINATES = "noise independence across coordinates"


def coordinate_check(counts: Mapping[str, Any], claimed_multiplier: float, *,
                     alpha: float = NOISE_ALPHA) -> dict[str, Any] | None:
    """The coordinate test of the module docstring from ``mode_n``, ``mode_ss``, ``noise_n`` and ``noise_ss``; None
    without them, unjudged when no step holds two residuals. ``std_ratio`` is sqrt(F): the steps' residual sums'
    std over sqrt(m_t) times the coordinates' own std (1 for independent coordinates, whatever the noise level)."""
    check_noise_args(claimed_multiplier, alpha)
    n, ss = int(counts.get("mode_n") or 0), float(counts.get("mode_ss") or 0.0)
    if n < 1:
        return None
    rest_n, rest_ss = int(counts.get("noise_n") or 0) - n, float(counts.get("noise_ss") or 0.0) - ss
    if rest_n < 1 or not rest_ss > 0:
        return {"unjudged": "no step holds two canary residuals: no spread within a step to scale the test by",
                "rejected": False}
    statistic = (ss / n) / (rest_ss / rest_n)
    p = float(stats.f.sf(statistic, n, rest_n))
    return {"n": n, "df_within": rest_n, "std_ratio": math.sqrt(statistic), "p": p, "alpha": alpha,
            "rejected": p < alpha, "claimed_multiplier": float(claimed_multiplier)}


def independence_check(counts: Mapping[str, Any], claimed_multiplier: float, *,
                       alpha: float = NOISE_ALPHA) -> dict[str, Any] | None:
    """The step-pair test of the module docstring from ``pair_n`` and ``pair_ss``; None without pairs. ``std_ratio``
    is the differences' measured std over sqrt(2) z_c (0 when the noise is reused)."""
    check_noise_args(claimed_multiplier, alpha)
    n, ss = int(counts.get("pair_n") or 0), float(counts.get("pair_ss") or 0.0)
    if n < 1:
        return None
    return {**chi_square_lower_tail(n, ss / (2 * float(claimed_multiplier) ** 2), alpha),
            "claimed_multiplier": float(claimed_multiplier)}


def tensor_checks(counts: Mapping[str, Any], claimed_multiplier: float, *,
                  alpha: float = NOISE_ALPHA) -> dict[str, Any] | None:
    """The per-tensor tests of the module docstring from ``tensor_noise`` ({name: {"n", "ss", "pair_n",
    "pair_ss"}}); None without it.

    Returns ``tensors`` (each covered tensor's ``variance`` test and, with step pairs, its ``pairs`` test, every one
    at ``alpha_each`` = alpha / L over the L tests), ``uncovered`` (tensors without a residual) and ``rejected`` (the
    names of the tensors with a failing test; the family fails when any does)."""
    check_noise_args(claimed_multiplier, alpha)
    per = counts.get("tensor_noise")
    if not per:
        return None
    z2 = float(claimed_multiplier) ** 2
    covered = {name: c for name, c in per.items() if int(c.get("n") or 0) > 0}
    tests = sum(1 + (int(c.get("pair_n") or 0) > 0) for c in covered.values())
    each = alpha / max(1, tests)
    tensors = {}
    for name, c in covered.items():
        tensors[name] = {"variance": chi_square_lower_tail(int(c["n"]), float(c["ss"]) / z2, each)}
        if int(c.get("pair_n") or 0) > 0:
            tensors[name]["pairs"] = chi_square_lower_tail(int(c["pair_n"]), float(c["pair_ss"]) / (2 * z2), each)
    return {"tensors": tensors, "uncovered": sorted(set(per) - set(covered)), "alpha": alpha, "tests": tests,
            "alpha_each": each, "claimed_multiplier": float(claimed_multiplier),
            "rejected": sorted(name for name, t in tensors.items() if any(v["rejected"] for v in t.values()))}


def structure_checks(counts: Mapping[str, Any], claimed_multiplier: float) -> dict[str, dict[str, Any]]:
    """The three checks at the gate's level, each as its result or ``{"unjudged": why}`` (evidence from before the
    check existed holds no such counts)."""
    pairs = independence_check(counts, claimed_multiplier)
    tensors = tensor_checks(counts, claimed_multiplier)
    coordinates = coordinate_check(counts, claimed_multiplier)
    return {"independence": pairs or {"unjudged": "no step-pair residual counts recorded", "rejected": False},
            "tensors": tensors or {"unjudged": "no per-tensor residual counts recorded", "rejected": []},
            "coordinates": coordinates or {"unjudged": "no per-step residual sums recorded", "rejected": False}}


def describe_failures(structure: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(check name, one line) for each failing check of :func:`structure_checks`."""
    out = []
    pairs = structure.get("independence") or {}
    if pairs.get("rejected"):
        out.append((INDEPENDENCE, f"{INDEPENDENCE}: the differences of its canary residuals over disjoint "
                                  f"step pairs ({pairs['n']} coordinate-pair cells) have {pairs['std_ratio']:.4g} of the std fresh noise gives "
                                  f"(chi-square p = {pairs['p']:.3g}, level {pairs['alpha']:g}): its release reuses "
                                  "or correlates its noise across steps"))
    coordinates = structure.get("coordinates") or {}
    if coordinates.get("rejected"):
        out.append((COORDINATES, f"{COORDINATES}: its canary residuals summed over each step's coordinates "
                                 f"({coordinates['n']} steps) have {coordinates['std_ratio']:.4g} times the std "
                                 f"independent noise gives (F upper tail p = {coordinates['p']:.3g}, level "
                                 f"{coordinates['alpha']:g}): its release correlates its noise across coordinates"))
    tensors = structure.get("tensors") or {}
    rows = [(name, tensors["tensors"][name]) for name in tensors.get("rejected") or []]
    level = f"level {tensors.get('alpha', 0):g} / {tensors.get('tests')} tests each"
    low = [f"tensor {name!r} ({t['variance']['std_ratio']:.3g} of the claimed std on {t['variance']['n']} residuals, "
           f"p = {t['variance']['p']:.3g})" for name, t in rows if t["variance"]["rejected"]]
    if low:
        out.append((PER_TENSOR, f"{PER_TENSOR}: {len(low)} of {len(tensors['tensors'])} tensors hold less noise than "
                                f"the claim states (chi-square lower tail, {level}): " + "; ".join(low)))
    same = [f"tensor {name!r} ({t['pairs']['std_ratio']:.3g} of fresh noise's std over {t['pairs']['n']} step pairs, "
            f"p = {t['pairs']['p']:.3g})" for name, t in rows if (t.get("pairs") or {}).get("rejected")]
    if same:
        out.append((PER_TENSOR, f"{PER_TENSOR}: {len(same)} of {len(tensors['tensors'])} tensors' residual differences "
                                f"over disjoint step pairs are smaller than fresh noise gives: the release reuses, "
                                f"correlates or omits their noise across steps ({level}): " + "; ".join(same)))
    return out
