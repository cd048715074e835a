"""What a DP run did, as it ran, against its claim: the batches drawn, the clipped units, the normaliser, the noise
reuse and the replayed neighbours. The tests behind :func:`privaudit.accountants.trace.trace.check_trace`'s *as-run*
findings; each sees what the code did, not what its configuration says.

**Sampling as drawn** (the trace's ``sampling`` record: every unit's inclusion count, the overlap of each disjoint
step pair (0, 1), (2, 3), ..., and a digest of every step's index set). Under the claim's sampling:

* *Poisson at rate q* (every unit joins every step independently): the overlap of two steps is Binomial(n, q^2),
  independent across disjoint pairs, so the P pairs' total is Binomial(n P, q^2) exactly; each unit's inclusion
  count is Binomial(T, q), independent across units, so S = sum_i (c_i - T q)^2 has mean n T q (1 - q).
  Its lower tail is bounded by Maurer's inequality for sums of independent non-negative variables,
  P[S <= E S - t] <= exp(-t^2 / (2 n E Y^2)) (Maurer 2003, Thm. 1; E Y^2 the fourth central moment of the
  binomial, T q (1 - q) (1 + 3 (T - 2) q (1 - q))), its upper tail by Bernstein's (Y = (c - T q)^2 is bounded).
* *Fixed-size batches of B without replacement* (every step an independent uniform B-subset): each pair's overlap
  is Hypergeometric(n, B, B), independent across disjoint pairs; their sum's law is the exact convolution.
* *Repeated batches:* two independent Poisson draws coincide with probability (q^2 + (1 - q)^2)^n, so a repeated
  index set among T steps has probability at most C(T, 2) times that (C(T, 2) / C(n, B) without replacement).

Shuffled batches under a Poisson or without-replacement claim (disjoint within an epoch: overlap 0, every count
equal), a larger rate than claimed, and reused batches all land in a tail far below the level; each test is
two-sided where both directions break the claim.

**Clipping as applied** (the step column ``unit_norm_max``: the largest norm a clipped unit had as it entered the
sum, ``factor * ||g_u||`` with the factor the code applied): at most the clip the claim's sensitivity was derived
from (exact, at the precision the units were computed in: :func:`unit_norm_tolerance`, a few units in the last place
of the trace's ``precision['unit_norm']``, plus the rounding of a norm of ``unit_norm_terms`` terms where the recorded
norm is recomputed from the unit; or the step's own ``unit_norm_slack`` where it recorded a larger one: Opacus' ghost
clipping, whose norms are float32 sums over a sequence, :mod:`privaudit.defenses.watch.opacus_ghost`). A clip norm other
than the claimed one shows here.

**The normaliser** (the step column ``normalizer``: what the release divided the noisy sum by) must be the same
constant at every step, to the rounding of its dtype (``precision['normalizer']``): a normaliser that follows the
realised batch size depends on the data, which the claim (post-processing by a constant) does not model. Exact.

**Reused noise** (the step column ``noise_digest``: a digest of the noise vector the step drew): two steps with
equal digests drew the same noise, which a continuous Gaussian does with probability 0. Exact. The step column
``tensor_noise_digests`` (a digest of every parameter tensor's first 8 noise values) does the same across tensors
and across steps tensor by tensor: a generator re-created with one seed for every tensor (each tensor's noise the
same stream) or noise reused on one tensor only. Exact (48-bit digests: chance collisions below 1e-4 for 10^5
cells). A tensor whose first 8 noise values are all 0 at a step with a positive noise std drew no noise there (a
Gaussian draws eight zeros with probability 0): noise missing on a tensor, however small its share, exactly. It
cannot see noise that is correlated but not repeated (a shared component added to every coordinate):
that is the canaries' coordinate test (:mod:`privaudit.attacks.noise.noise_structure`).

**Replayed neighbours** (the trace's ``replays``): at a few steps the step's own privatisation (the defense's
``compute``, clipping, the release with its noise and normaliser; the same randomness) is re-run on a neighbouring
batch (a crafted record appended, the last record removed, or replaced, by the claim's relation) and the two
releases compared. Their distance times the claimed normaliser must be at most the claimed sensitivity, plus the
float32 rounding slack the replay states (saved with it). Exact up to that slack; the ratio distance / sensitivity
is the replay's power.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from privaudit.accountants.trace import rounding
from privaudit.accountants.trace.trace_record import TraceMismatch, TrainingTrace

#: How the sampling tests share their level (of the trace's alpha; the noise checks take the other half).
SAMPLING_SHARE = {"per-step": 1 / 8, "total": 1 / 8, "overlap": 1 / 8, "counts": 1 / 16, "repeats": 1 / 16}


def two_sided(lower: float, upper: float) -> float:
    """A two-sided p-value from the two one-sided tails."""
    return min(1.0, 2 * min(lower, upper))


def poisson_overlap_p(total: int, pairs: int, n: int, q: float) -> float:
    """Two-sided p of the disjoint pairs' total overlap against Binomial(n * pairs, q^2)."""
    m, r = n * pairs, q * q
    return two_sided(float(stats.binom.cdf(total, m, r)), float(stats.binom.sf(total - 1, m, r)))


def fixed_overlap_p(total: int, pairs: int, n: int, batch: int) -> float:
    """Two-sided p of the disjoint pairs' total overlap against the sum of ``pairs`` Hypergeometric(n, B, B)."""
    support = np.arange(batch + 1)
    one = stats.hypergeom.pmf(support, n, batch, batch)
    law = np.array([1.0])
    for _ in range(pairs):
        law = np.convolve(law, one)
    law = law / law.sum()
    total = int(total)
    if total >= len(law):
        return 0.0
    return two_sided(float(law[:total + 1].sum()), float(law[total:].sum()))


def count_dispersion_p(counts: Sequence[int], steps: int, q: float) -> tuple[float, float]:
    """(S / E S, two-sided p) of S = sum_i (c_i - T q)^2 over independent Binomial(T, q) counts (module
    docstring: Maurer's lower tail, Bernstein's upper tail)."""
    c = np.asarray(counts, dtype=float)
    n, mean_c, var = len(c), steps * q, steps * q * (1 - q)
    if n == 0 or var <= 0:
        return 1.0, 1.0
    s = float(((c - mean_c) ** 2).sum())
    mu4 = var * (1 + 3 * (steps - 2) * var / steps) if steps >= 2 else var * (1 - 3 * var)
    mu4 = max(mu4, var * var)
    expected, dev = n * var, n * var - s
    lower = math.exp(-dev * dev / (2 * n * mu4)) if dev > 0 else 1.0
    bound = max(mean_c, steps - mean_c) ** 2
    t = -dev
    upper = math.exp(-t * t / (2 * (n * (mu4 - var * var) + bound * t / 3))) if t > 0 else 1.0
    return s / expected, two_sided(lower, upper)


def repeat_p(steps: int, n: int, q: float | None, batch: int | None) -> float:
    """An upper bound on the chance that two of ``steps`` independent draws give the same index set."""
    pairs = steps * (steps - 1) / 2
    if q is not None:
        return min(1.0, pairs * math.exp(n * math.log(q * q + (1 - q) ** 2)))
    return min(1.0, pairs * math.exp(-(math.lgamma(n + 1) - math.lgamma(batch + 1) - math.lgamma(n - batch + 1))))


def repeated(digests: Sequence[Any]) -> tuple[int, int] | None:
    """The first two (1-based) steps with equal digests, or None (None digests are skipped)."""
    seen: dict[Any, int] = {}
    for t, d in enumerate(digests):
        if d is None:
            continue
        if d in seen:
            return seen[d] + 1, t + 1
        seen[d] = t
    return None


#: A tensor's digest entry when its leading noise values are all 0: it drew no noise
#: (:func:`privaudit.defenses.dp.release.as_run.tensor_noise_digests` writes it).
NO_NOISE = "0"


def repeated_tensor_noise(column: Sequence[Any]) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The first two (step, tensor) cells, 1-based steps and 0-based tensors in the flat layout's order, whose
    leading-noise digests are equal (column: per step, a list of digests, None where not recorded; cells that drew
    no noise are :func:`silent_tensor`'s), or None."""
    seen: dict[str, tuple[int, int]] = {}
    for t, row in enumerate(column):
        for g, d in enumerate(row or []):
            if d is None or d == NO_NOISE:
                continue
            if d in seen:
                return seen[d], (t + 1, g)
            seen[d] = (t + 1, g)
    return None


def replay_excess(replay: Mapping[str, Any]) -> float:
    """How far a replayed neighbour's release distance (times the claimed normaliser) lies above the claimed
    sensitivity plus the replay's rounding slack (<= 0: within the claim)."""
    return float(replay["distance"]) - float(replay["sensitivity"]) - float(replay.get("slack", 0.0))


def _poisson_rate(claimed: Sequence[Any], steps: int) -> float | None:
    """The claim's one Poisson rate over the first ``steps`` steps (None: not Poisson, or rates that differ)."""
    rates = {round(c.rate, 15) for c in claimed[:steps] if getattr(c, "sampler", None) == "poisson"}
    n_poisson = sum(1 for c in claimed[:steps] if getattr(c, "sampler", None) == "poisson")
    return next(iter(rates)) if len(rates) == 1 and n_poisson == steps else None


def _fixed_batch(claimed: Sequence[Any], steps: int) -> tuple[int, int] | None:
    """The claim's one (population, batch) without replacement over the first ``steps`` steps, or None."""
    sizes = {(c.population, c.batch) for c in claimed[:steps] if getattr(c, "sampler", None) == "without-replacement"}
    n_wor = sum(1 for c in claimed[:steps] if getattr(c, "sampler", None) == "without-replacement")
    return next(iter(sizes)) if len(sizes) == 1 and n_wor == steps else None


def sampling_findings(trace: TrainingTrace, claimed: Sequence[Any], alpha: float) -> list[TraceMismatch]:
    """The batches as drawn against the claim's sampling (module docstring); ``alpha``: the sampling tests' share."""
    rec, steps, n = trace.sampling or {}, trace.steps, trace.population
    if steps < 1 or n < 1:
        return []
    q, fixed = _poisson_rate(claimed, steps), _fixed_batch(claimed, steps)
    if q is None and fixed is None:
        return []
    out, sizes = [], [int(b) for b in rec.get("sizes", trace.columns["batch_size"])]
    overlaps = [int(v) for v in rec.get("overlaps", [])]
    if q is not None:
        out += _poisson_size_findings(sizes, n, q, alpha)
        if overlaps:
            p = poisson_overlap_p(sum(overlaps), len(overlaps), n, q)
            if p < alpha * SAMPLING_SHARE["overlap"]:
                out.append(_overlap_mismatch(overlaps, n * len(overlaps) * q * q, p, f"Poisson at rate {q:.6g}"))
        if rec.get("counts") is not None:
            ratio, p = count_dispersion_p(rec["counts"], steps, q)
            if p < alpha * SAMPLING_SHARE["counts"]:
                out.append(TraceMismatch(None, "sampling", 1.0, ratio,
                                         f"the units' inclusion counts over {steps} steps spread {ratio:.3g} times as "
                                         f"much as Poisson sampling at rate {q:.6g} gives (p = {p:.2g}): not "
                                         "sampled as claimed"))
    elif overlaps and fixed[0] == n:
        p = fixed_overlap_p(sum(overlaps), len(overlaps), n, fixed[1])
        if p < alpha * SAMPLING_SHARE["overlap"]:
            out.append(_overlap_mismatch(overlaps, len(overlaps) * fixed[1] ** 2 / n, p,
                                         f"independent batches of {fixed[1]} without replacement"))
    twice = repeated(rec.get("step_digests") or [])
    if twice is not None and repeat_p(steps, n, q, None if fixed is None else fixed[1]) < alpha * SAMPLING_SHARE[
            "repeats"]:
        out.append(TraceMismatch(twice[1], "sampling", None, twice[0],
                                 f"step {twice[1]} drew the same batch as step {twice[0]}: independent draws under the "
                                 "claim's sampling almost never repeat"))
    return out


def _overlap_mismatch(overlaps: Sequence[int], expected: float, p: float, law: str) -> TraceMismatch:
    return TraceMismatch(None, "sampling", expected, sum(overlaps),
                         f"the {len(overlaps)} disjoint step pairs (1, 2), (3, 4), ... share {sum(overlaps)} units; "
                         f"{law} gives {expected:.4g} on average (p = {p:.2g}): the batches are not drawn "
                         "independently as claimed")


def _poisson_size_findings(sizes: Sequence[int], n: int, q: float, alpha: float) -> list[TraceMismatch]:
    """Each step's drawn size and their total against Binomial(n, q), two-sided."""
    out, steps = [], len(sizes)
    drawn = np.asarray(sizes, dtype=np.float64)
    lower, upper = stats.binom.cdf(drawn, n, q), stats.binom.sf(drawn - 1, n, q)  # every step at once
    for t, b in enumerate(sizes):
        p = two_sided(float(lower[t]), float(upper[t]))
        if p < alpha * SAMPLING_SHARE["per-step"] / steps:
            out.append(TraceMismatch(t + 1, "batch_size", n * q, b,
                                     f"step {t + 1}: batch of {b} of {n} units; the claimed rate {q:.6g} gives "
                                     f"{n * q:.4g} on average (binomial p = {p:.2g})"))
    total = sum(sizes)
    p = two_sided(float(stats.binom.cdf(total, n * steps, q)), float(stats.binom.sf(total - 1, n * steps, q)))
    if p < alpha * SAMPLING_SHARE["total"]:
        out.append(TraceMismatch(None, "batch_size", n * steps * q, total,
                                 f"the {steps} steps drew {total} units; the claimed rate gives {n * steps * q:.4g} on "
                                 f"average (binomial p = {p:.2g}): sampled at a "
                                 f"{'larger' if total > n * steps * q else 'smaller'} rate than claimed"))
    return out


def code_findings(trace: TrainingTrace) -> list[TraceMismatch]:
    """The exact as-run checks: clipped unit norms, the normaliser, reused noise, replayed neighbours."""
    out = unit_norm_findings(trace) + normalizer_findings(trace)
    twice = repeated(trace.column("noise_digest") or [])
    if twice is not None:
        out.append(TraceMismatch(twice[1], "noise", None, twice[0],
                                 f"step {twice[1]} added the same noise as step {twice[0]}: reused noise cancels in "
                                 "their difference (epsilon is infinite)"))
    out += tensor_noise_findings(trace)
    for r in trace.replays or []:
        if replay_excess(r) > 0:
            out.append(TraceMismatch(int(r["step"]), "replay", float(r["sensitivity"]), float(r["distance"]),
                                     f"step {int(r['step'])}: the {r['neighbour']} neighbour's release differs by "
                                     f"{float(r['distance']):.6g} (times the normaliser), above the claimed "
                                     f"sensitivity {float(r['sensitivity']):.6g} (slack {float(r.get('slack', 0)):.2g})"))
    return out


def unit_norm_tolerance(trace: TrainingTrace, slack: Any = None) -> float:
    """The unit-norm check's relative tolerance: the rounding of the clipped units' dtype (and of the norm's terms,
    where the recorded norm is recomputed from the unit:
    :func:`privaudit.accountants.trace.rounding.relative_tolerance`),
    or the step's own recorded ``slack`` where larger."""
    derived = rounding.relative_tolerance(trace.computed_in("unit_norm"), int(trace.computed_in("unit_norm_terms")))
    return max(derived, float(slack or 0.0))


def unit_norm_findings(trace: TrainingTrace) -> list[TraceMismatch]:
    """The first step whose largest clipped unit exceeds the clip by more than its rounding (module docstring)."""
    norms = trace.column("unit_norm_max") or []
    slacks = trace.column("unit_norm_slack") or [None] * len(norms)
    for t, (v, s) in enumerate(zip(norms, slacks)):
        tol = unit_norm_tolerance(trace, s)
        if v is not None and rounding.above(float(v), trace.clip, tol) == "excess":
            d = rounding.digits(rounding.relative_gap(float(v), trace.clip))
            return [TraceMismatch(t + 1, "unit_norm", trace.clip, float(v),
                                  f"step {t + 1}: a clipped unit entered the sum with norm {float(v):.{d}g}, above "
                                  f"the clip {trace.clip:.{d}g} the claim's sensitivity is derived from (by "
                                  f"{rounding.relative_gap(float(v), trace.clip):.3g} relative; tolerance {tol:.2g})")]
    return []


def normalizer_findings(trace: TrainingTrace) -> list[TraceMismatch]:
    """A normaliser that differs between steps by more than the rounding of its dtype (module docstring)."""
    scales = [float(v) for v in trace.column("normalizer") or [] if v is not None]
    tol = rounding.relative_tolerance(trace.computed_in("normalizer"))
    if not scales or rounding.above(max(scales), min(scales), tol) != "excess":
        return []
    lo, hi = scales.index(min(scales)) + 1, scales.index(max(scales)) + 1
    d = rounding.digits(rounding.relative_gap(max(scales), min(scales)))
    return [TraceMismatch(hi, "normalizer", min(scales), max(scales),
                          f"the release's normaliser changes between steps (step {lo}: {min(scales):.{d}g}, step "
                          f"{hi}: {max(scales):.{d}g}; tolerance {tol:.2g}): it depends on the batch, which the claim "
                          "does not model")]


def silent_tensor(column: Sequence[Any], stds: Sequence[Any]) -> tuple[int, int] | None:
    """The first (1-based step, tensor) whose leading noise is all 0 at a step whose noise std is above 0, or None."""
    for t, (row, std) in enumerate(zip(column, stds)):
        if std is not None and float(std) > 0:
            for g, d in enumerate(row or []):
                if d == NO_NOISE:
                    return t + 1, g
    return None


def tensor_noise_findings(trace: TrainingTrace) -> list[TraceMismatch]:
    """Leading noise repeated across tensors or steps, or absent on a tensor (the step column
    ``tensor_noise_digests``): exact."""
    column = trace.column("tensor_noise_digests") or []
    silent = silent_tensor(column, trace.columns["noise_std"])
    if silent is not None:
        return [TraceMismatch(silent[0], "noise", trace.columns["noise_std"][silent[0] - 1], 0.0,
                              f"step {silent[0]}: tensor {silent[1]} drew no noise (its first values are 0 while the "
                              "step's noise std is above 0): the claim's Gaussian mechanism does not cover it")]
    twice = repeated_tensor_noise(column)
    if twice is None:
        return []
    (s0, g0), (s1, g1) = twice
    where = f"tensor {g1} at step {s1} began with the same noise as tensor {g0} at step {s0}"
    return [TraceMismatch(s1, "noise", None, f"tensor {g0} @ step {s0}",
                          f"{where}: noise reused across {'tensors' if s0 == s1 else 'steps'} (a generator re-created "
                          "with one seed) cancels in their difference along a unit's gradient (epsilon is infinite)")]


def as_run_findings(trace: TrainingTrace, claimed: Sequence[Any], alpha: float) -> list[TraceMismatch]:
    """Every as-run finding (module docstring); ``alpha``: the sampling tests' share of the trace's level."""
    return sampling_findings(trace, claimed, alpha) + code_findings(trace)
