"""One-run f-DP audit against the claim's own mechanism: ``eps_lb_mechanism``.

Why. A one-run audit against the (eps, delta) trade-off curve must beat *every* (eps, delta)-DP
mechanism, including ones far easier to detect in one run than a subsampled Gaussian composition, so even
the idealised mechanism audited with the optimal score stays well below its PLD epsilon against that
curve (docs/notes/defenses-attacks.md). A PLD claim says more than (eps, delta): it says the training run
is dominated by the pair the accountant composes, i.e. it has that pair's whole privacy profile. This
module tests that statement.

The null family. For the claim's event E (noise multipliers z_k) and a scale s > 0, E_s is E with every
Gaussian noise multiplier multiplied by s (:func:`scale_noise`); delta_s(eps) is the hockey-stick profile
of E_s's dominating pair (dp-accounting's PLD, :func:`privaudit.accountants.pld.pld.build_pld`, both directions of
add/remove or the replace-one pair). H_s is the hypothesis "the audited run is f_s-DP with respect to each
canary's coin", f_s = sup_{eps in G} f_{eps, delta_s(eps)} over a fixed grid G, with f_{eps,delta} the
(eps, delta) trade-off curve (Kairouz et al. 2015).

Soundness argument.
1. A mechanism whose profile is dominated by delta_s (is (eps, delta_s(eps))-DP for every eps >= 0) is
   f-DP for f = sup_eps f_{eps, delta_s(eps)} (Dong, Roth & Su 2022, Prop. 2.12); a sup over the finite
   grid G is pointwise smaller, so it is f_s-DP. The PLD is built with ``pessimistic_estimate=True``
   (its delta(eps) is an upper bound on the pair's), which only lowers f_s: H_s still holds.
2. Mahloujifar, Melis & Chaudhuri 2025 ("Auditing f-Differential Privacy in One Run", the recursion
   :func:`privaudit.attacks.bounds.fdp.fdp_recursion_rejects`): if the run is f-DP with respect to each of m canaries
   included by independent fair coins (or, for paired replace-one slots, choosing which of two candidates
   is trained on; :func:`privaudit.attacks.bounds.one_run.paired_one_run_bound`'s argument), then counts (r guesses, v
   correct, k fixed before the scores exist) reject f with probability at most beta.
3. The curves f_s increase with s (more noise, smaller delta_s), so the rejected scales form an interval
   [s*, inf) up to discretisation; a bisection on a fixed geometric grid of scales finds the smallest
   grid scale s* that is rejected (each tested scale is a test of H_s at level beta; the reported scale is
   one that was rejected).
4. The reported ``eps_lb_mechanism`` is eps_opt(s*) at the claim's delta, the *optimistic* PLD epsilon of
   E_s* (dp-accounting's lower discretisation: at most the exact epsilon of E_s*). It is capped at
   eps_opt(1) unless H_1 -- the claim itself -- is rejected. Hence if the audited run has the claim's
   profile, P[eps_lb_mechanism > eps_claim] <= P[H_1 rejected] <= beta for every sound accountant's
   eps_claim (eps_opt(1) <= the exact epsilon <= any sound accountant's), and more generally a run with
   E_s's profile over-claims eps(E_s) with probability at most beta.

5. Guesses come as a ladder k+, 4 k+, 16 k+ (fixed before the scores; :func:`guess_ladder`), each rung a test of
   the same hypotheses at beta / rungs; the largest rung's bound is reported, so by the union bound a run with
   E_s's profile over-claims eps(E_s) with probability at most beta. Why a ladder: one k+ saturates -- once all
   its guesses are right the counts no longer change however leaky the run is, and the bound stops at the
   design's ceiling (v = r), which for a few hundred guesses among 20000 canaries lies below an epsilon-8 claim.
   Larger rungs, all right, are stronger evidence and lift the ceiling; the ceiling is reported beside the bound.

What it refutes. eps_lb_mechanism > eps_claim means the run is **not as private as the mechanism the
claim accounts** (the noise, clipping, sampling or sensitivity differ from what the accountant composes);
it is not a lower bound on the (eps, delta) epsilon of an arbitrary mechanism, so it is kept in its own
field beside the (eps, delta) bound (method ``one-run-fdp-mechanism``). It is the natural test of a claim
whose epsilon *is* a PLD / RDP account of that event, which is every DP-SGD-style claim here.
``tests/test_mechanism_bound.py`` checks the over-claim rate on the idealised mechanism over 500 seeds.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from privaudit.accountants.events import (ComposedDpEvent, DpEvent, GaussianDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent, event_from_dict,
                                          event_to_dict)
from privaudit.accountants.pld.pld import build_pld
from privaudit.accountants.pld.pld_epsilon import epsilon_for_delta
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound, check_relation_unit
from privaudit.attacks.bounds.fdp import fdp_recursion_rejects, one_sided_counts
from privaudit.core.errors import ConfigError, check_probability

METHOD = "one-run-fdp-mechanism"
#: Noise scales tested: 2^(j/64) for j in [-192, 192] (1/8 to 8 times the claim's noise), about 1.1% apart (a
#: 4.4% grid cost 5% of the bound at the quickstart's epsilon 8; the bisection needs 9 tests either way).
SCALES = tuple(2.0 ** (j / 64) for j in range(-192, 193))
#: The epsilon grid G of the null curve f_s = sup_{eps in G} f_{eps, delta_s(eps)}.
EPS_GRID = np.concatenate([np.arange(0.0, 4.0, 0.02), np.arange(4.0, 40.0 + 1e-9, 0.05)])
#: PLD discretisation of the null (pessimistic: coarser only lowers f_s, still sound) and of the reported
#: epsilon (optimistic: a lower bound on the scaled event's exact epsilon).
NULL_INTERVAL, EPS_INTERVAL = 1e-2, 1e-3
#: Rungs of the guess ladder (:func:`guess_ladder`).
LADDER = 3


def scale_noise(event: DpEvent, s: float) -> DpEvent:
    """``event`` with every Gaussian noise multiplier multiplied by ``s`` (sampling and counts unchanged)."""
    if isinstance(event, GaussianDpEvent):
        return GaussianDpEvent(float(event.noise_multiplier) * s)
    if isinstance(event, SelfComposedDpEvent):
        return SelfComposedDpEvent(scale_noise(event.event, s), event.count)
    if isinstance(event, ComposedDpEvent):
        return ComposedDpEvent([scale_noise(e, s) for e in event.events])
    if isinstance(event, PoissonSampledDpEvent):
        return PoissonSampledDpEvent(event.sampling_probability, scale_noise(event.event, s))
    if isinstance(event, SampledWithoutReplacementDpEvent):
        return SampledWithoutReplacementDpEvent(event.source_dataset_size, event.sample_size,
                                                scale_noise(event.event, s))
    raise ConfigError(f"mechanism bound: no Gaussian noise family for event {type(event).__name__} "
                      "(supported: Gaussian noise under Poisson or without-replacement sampling, composed)")


def unsupported_reason(event: DpEvent, relation: str) -> str | None:
    """Why the claim's event has no mechanism bound here (None: it has one)."""
    from privaudit.accountants.base import NotApplicable

    try:
        if build_pld(scale_noise(event, 1.0), relation, pessimistic=True, interval=NULL_INTERVAL) is None:
            return "the claim's event releases nothing"
    except (ConfigError, NotApplicable) as err:
        return str(err)
    return None


def _key(event: DpEvent) -> str:
    return json.dumps(event_to_dict(event), sort_keys=True)


@lru_cache(maxsize=512)
def _null_curve(event_key: str, relation: str, s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(delta_j, e^eps_j, e^-eps_j) of the scaled event's pessimistic profile on :data:`EPS_GRID`."""
    pld = build_pld(scale_noise(event_from_dict(json.loads(event_key)), s), relation, pessimistic=True,
                    interval=NULL_INTERVAL)
    if pld is None:
        raise ConfigError("mechanism bound: the claim's event releases nothing")
    d = np.minimum(np.asarray(pld.get_delta_for_epsilon(EPS_GRID), dtype=np.float64), 1.0)
    return d, np.exp(EPS_GRID), np.exp(-EPS_GRID)


@lru_cache(maxsize=512)
def _epsilon_optimistic(event_key: str, relation: str, s: float, delta: float, interval: float = EPS_INTERVAL) -> float:
    pld = build_pld(scale_noise(event_from_dict(json.loads(event_key)), s), relation, pessimistic=False,
                    interval=interval)
    return max(0.0, float(epsilon_for_delta(pld, delta)))


def optimistic_epsilon(event: DpEvent, relation: str, delta: float, interval: float = EPS_INTERVAL) -> float:
    """The optimistic PLD epsilon of ``event`` at ``delta`` on a privacy-loss grid of step ``interval`` (at most its
    exact epsilon at any step; a finer step comes closer; cached per event)."""
    return _epsilon_optimistic(_key(event), relation, 1.0, float(delta), float(interval))


def blow_up_inverse(event: DpEvent, relation: str, s: float) -> Callable[[float], float]:
    """x -> f_s(1 - x), f_s(a) = max(0, max_j max(1 - delta_j - e^eps_j a, e^-eps_j (1 - delta_j - a)))."""
    d, e, ei = _null_curve(_key(event), relation, float(s))

    def inv(x: float) -> float:
        return max(0.0, float(np.max(1.0 - d - e * (1.0 - x))), float(np.max((x - d) * ei)))
    return inv


def mechanism_rejects(m: int, r: int, v: int, event: DpEvent, relation: str, s: float, *, beta: float) -> bool:
    """True when the counts reject H_s ("the run is f_s-DP", module docstring) at level ``beta``."""
    if not 0 <= v <= r <= m or m < 1:
        raise ConfigError(f"one-run counts: need 0 <= v <= r <= m and m >= 1, got m={m}, r={r}, v={v}")
    return fdp_recursion_rejects(blow_up_inverse(event, relation, s), m, r, v, beta)


def mechanism_epsilon(m: int, r: int, v: int, event: DpEvent, relation: str, *, beta: float,
                      delta: float) -> tuple[float, float | None, bool]:
    """(eps_lb_mechanism, s* or None, whether H_1 is rejected) for the counts (module docstring, 3-4)."""
    check_probability("beta", beta)
    if v == 0:
        return 0.0, None, False
    return scale_search(lambda s: mechanism_rejects(m, r, v, event, relation, s, beta=beta), event, relation,
                        delta)


def scale_search(rejects: Callable[[float], bool], event: DpEvent, relation: str,
                 delta: float) -> tuple[float, float | None, bool]:
    """(eps_lb_mechanism, s*, whether H_1 is rejected) for a test ``rejects(s)`` of H_s, each at its own level:
    the bisection of the module docstring (3) over :data:`SCALES` and the capped epsilon of (4)."""
    if not 0 < delta < 1:
        raise ConfigError(f"delta: the mechanism bound needs 0 < delta < 1, got {delta!r}")
    key = _key(event)
    hi = len(SCALES) - 1
    if not rejects(SCALES[hi]):
        return 0.0, None, False
    lo = 0
    if not rejects(SCALES[lo]):
        while hi - lo > 1:  # invariant: lo not rejected, hi rejected
            mid = (lo + hi) // 2
            if rejects(SCALES[mid]):
                hi = mid
            else:
                lo = mid
    else:
        hi = lo
    s_star = SCALES[hi]
    claim_rejected = rejects(1.0)
    eps = _epsilon_optimistic(key, relation, s_star, delta)
    if not claim_rejected:
        eps = min(eps, _epsilon_optimistic(key, relation, 1.0, delta))
    return eps, s_star, claim_rejected


def guess_ladder(k_pos: int, m: int) -> list[int]:
    """The guess counts tested: k+, 4 k+, 16 k+ (:data:`LADDER` rungs), capped at m / 2 and deduplicated. It depends
    on k+ and m alone, so it is fixed before any score exists."""
    cap = max(1, m // 2)
    return sorted({max(1, min(cap, k_pos * 4 ** j)) for j in range(LADDER)})


def _ladder_epsilons(m: int, rungs: list[tuple[int, int]], event: DpEvent, relation: str, *, beta: float,
                     delta: float) -> list[tuple[float, float | None, bool]]:
    """:func:`mechanism_epsilon` of every rung's (r, v) at beta / (number of rungs) (the union bound)."""
    level = beta / len(rungs)
    return [mechanism_epsilon(m, r, v, event, relation, beta=level, delta=delta) for r, v in rungs]


def mechanism_one_run_bound(scores: np.ndarray, membership: np.ndarray, *, k_pos: int, event: DpEvent,
                            relation: str, unit: str = "example", beta: float = 0.05, delta: float,
                            m: int | None = None) -> EpsilonLowerBound:
    """``eps_lb_mechanism`` from scores (higher = member; paired slots: higher = the first candidate) with
    the guess ladder of k+ (:func:`guess_ladder`) fixed in advance, against the claim's own event (module docstring).

    Each rung is a test at beta / rungs and the largest of their bounds is reported (a union bound: sound at
    1 - beta). A single k+ saturates: once every one of its guesses is right, the counts are the same however
    leaky the run, and the bound stops at the design's *ceiling* (the bound with v = r), which can lie below the
    claim -- a run far less private than claimed then reads "consistent". The larger rungs lift the ceiling
    (more guesses, all right, are stronger evidence); the ceiling of the ladder is reported (``ceiling``) and
    ``saturated`` says the reported bound is that ceiling (the run may be less private than any rung can show)."""
    check_relation_unit(relation, unit)
    n = m if m is not None else np.asarray(scores).size
    ks = guess_ladder(k_pos, n)
    rungs = [one_sided_counts(scores, membership, k, m)[1:] for k in ks]
    results = _ladder_epsilons(n, rungs, event, relation, beta=beta, delta=delta)
    best = int(np.argmax([e for e, _, _ in results]))
    ceiling = max(e for e, _, _ in _ladder_epsilons(n, [(k, k) for k in ks], event, relation, beta=beta, delta=delta))
    (r, v), search = rungs[best], (*results[best][:2], any(rej for _, _, rej in results))
    saturated = bool(search[0] >= ceiling)
    what = (f"one-run f-DP against the claim's mechanism (Mahloujifar et al. 2025 with the claim's own PLD trade-off "
            f"curve; {relation}, per {unit}): guesses k+ in {ks} fixed in advance, each at "
            f"{100 * (1 - beta / len(ks)):.4g}%, best k+={ks[best]}: {v}/{r} correct of m={n}; ceiling "
            f"{ceiling:.4g}{' (saturated)' if saturated else ''}")
    counts = {"m": n, "r": r, "v": v, "k_pos": ks[best], "k_neg": 0,
              "ladder": [{"k": k, "r": rr, "v": vv} for k, (rr, vv) in zip(ks, rungs)], "ceiling": ceiling,
              "saturated": saturated}
    return _result(METHOD, what, search, counts, event, relation, unit, beta, delta)


def mechanism_one_run_bound_counts(m: int, r: int, v: int, *, k_pos: int, event: DpEvent, relation: str,
                                   unit: str = "example", beta: float = 0.05, delta: float) -> EpsilonLowerBound:
    """The bound of one k+ (no ladder) from its one-sided counts (r = k+ guesses "in", v correct, of m)."""
    check_relation_unit(relation, unit)
    search = mechanism_epsilon(m, r, v, event, relation, beta=beta, delta=delta)
    what = (f"one-run f-DP against the claim's mechanism (Mahloujifar et al. 2025 with the claim's own PLD trade-off "
            f"curve; {relation}, per {unit}): k+={k_pos} fixed in advance, {v}/{r} correct of m={m}")
    return _result(METHOD, what, search, {"m": m, "r": r, "v": v, "k_pos": k_pos, "k_neg": 0}, event, relation, unit,
                   beta, delta)


def _result(method: str, what: str, search: tuple[float, float | None, bool], counts: dict[str, Any], event: DpEvent,
            relation: str, unit: str, beta: float, delta: float) -> EpsilonLowerBound:
    """The bound of a scale search (:func:`scale_search`'s result), labelled with ``what`` was counted."""
    eps, s_star, claim_rejected = search
    counts = {**counts, "noise_scale": s_star, "claim_rejected": claim_rejected, "event": event_to_dict(event)}
    scale = "none rejected" if s_star is None else f"smallest rejected noise scale s*={s_star:.3g}"
    label = (f"{what}, {scale}, eps = optimistic PLD epsilon of that mechanism at delta={delta:g}, "
             f"{100 * (1 - beta):.0f}% confidence; refutes the claim's mechanism, not every (eps, delta) one")
    return EpsilonLowerBound(eps, method, label, 1 - beta, delta, counts, relation=relation, unit=unit,
                             notes=("lower bound on the PLD epsilon of the claim's own mechanism family (its noise "
                                    "scaled): a value above the claim means the training is less private than the "
                                    "mechanism the claim accounts",))


def mechanism_one_run_epsilon(counts: dict[str, Any], *, beta: float, delta: float, relation: str) -> float:
    """The bound recomputed from its counts at another ``beta`` (the gate's family-wise level): every rung of its
    ladder at beta / rungs (a bound saved without a ladder: its one (r, v) at beta)."""
    event = event_from_dict(counts["event"])
    rungs = [(int(c["r"]), int(c["v"])) for c in counts.get("ladder") or [counts]]
    return max(e for e, _, _ in _ladder_epsilons(int(counts["m"]), rungs, event, relation, beta=beta, delta=delta))


# --------------------------------------------------------------------------------------------------
# Multi run: independent runs on a fixed neighbouring pair, tested against the claim's own curve
# --------------------------------------------------------------------------------------------------

MULTI_RUN_METHOD = "multi-run-fdp-mechanism"


def multi_run_rejects(fp: int, n_out: int, fn: int, n_in: int, event: DpEvent, relation: str, s: float, *,
                      beta: float) -> bool:
    """True when a threshold's errors on independent runs reject H_s at level ``beta``.

    The runs are on a fixed neighbouring pair (D: the canary out, ``n_out`` runs, ``fp`` scored above the
    threshold; D': in, ``n_in`` runs, ``fn`` below), the threshold fixed before these runs are scored. Under H_s
    every test's (FPR, FNR) lies on or above f_s in both orders (the profile bounds both directions). With
    Clopper-Pearson upper bounds at beta / 2 each, both hold with probability >= 1 - beta, and then
    f_s(FPR_hi) <= f_s(FPR) <= FNR <= FNR_hi (f_s is non-increasing), likewise with the roles swapped; so
    FNR_hi < f_s(FPR_hi) or FPR_hi < f_s(FNR_hi) happens with probability at most beta under H_s.
    """
    from privaudit.attacks.bounds.multi_run import clopper_pearson_upper

    fpr_hi = clopper_pearson_upper(fp, n_out, beta / 2)
    fnr_hi = clopper_pearson_upper(fn, n_in, beta / 2)
    inv = blow_up_inverse(event, relation, s)
    return fnr_hi < inv(1.0 - fpr_hi) or fpr_hi < inv(1.0 - fnr_hi)


def multi_run_mechanism_bound(in_scores: np.ndarray, out_scores: np.ndarray, *, event: DpEvent, relation: str,
                              unit: str = "example", beta: float = 0.05, delta: float,
                              seed: int = 0) -> EpsilonLowerBound:
    """``eps_lb_mechanism`` of runs on a fixed pair (higher score = the canary was in): the threshold chosen on a
    seeded half of each side's runs (:func:`privaudit.attacks.bounds.multi_run.multi_run_bound`'s ``split``), the errors
    counted on the other half, H_s tested by :func:`multi_run_rejects` and the scale searched as for one run."""
    from privaudit.attacks.bounds.multi_run import _multi_run_threshold

    check_relation_unit(relation, unit)
    check_probability("beta", beta)
    ins = np.asarray(in_scores, dtype=np.float64).ravel()
    outs = np.asarray(out_scores, dtype=np.float64).ravel()
    t, ins, outs, _, how = _multi_run_threshold(ins, outs, "split", beta, delta, seed)
    fn, fp = int(np.sum(ins < t)), int(np.sum(outs >= t))
    return _multi_run_result(fp, outs.size, fn, ins.size, t, how, event, relation, unit, beta, delta)


def multi_run_mechanism_bound_counts(fp: int, n_out: int, fn: int, n_in: int, *, event: DpEvent, relation: str,
                                     unit: str = "example", beta: float = 0.05, delta: float,
                                     threshold: float = float("nan"),
                                     how: str = "threshold fixed before these runs") -> EpsilonLowerBound:
    """``eps_lb_mechanism`` of a threshold's errors on runs it was not chosen on (``fp`` of ``n_out`` runs without
    the canary scored at or above it, ``fn`` of ``n_in`` with the canary below it): :func:`multi_run_rejects` and
    the scale search."""
    check_relation_unit(relation, unit)
    check_probability("beta", beta)
    if not (0 <= fp <= n_out and 0 <= fn <= n_in and min(n_in, n_out) >= 1):
        raise ConfigError(f"multi-run counts: need 0 <= fp <= n_out, 0 <= fn <= n_in, n >= 1; got fp={fp}, "
                          f"n_out={n_out}, fn={fn}, n_in={n_in}")
    return _multi_run_result(fp, n_out, fn, n_in, threshold, how, event, relation, unit, beta, delta)


def multi_run_mechanism_ceiling(runs_in: int, runs_out: int, *, event: DpEvent, relation: str, beta: float = 0.05,
                                delta: float) -> float:
    """The largest :func:`multi_run_mechanism_bound` these runs can give: no error on the counted half."""
    if min(runs_in, runs_out) < 4:
        raise ConfigError(f"multi-run bound: needs at least 4 runs on each side, got {runs_in} and {runs_out}")
    n_in, n_out = runs_in - runs_in // 2, runs_out - runs_out // 2
    return scale_search(lambda s: multi_run_rejects(0, n_out, 0, n_in, event, relation, s, beta=beta), event,
                        relation, delta)[0]


def _multi_run_result(fp: int, n_out: int, fn: int, n_in: int, threshold: float, how: str, event: DpEvent,
                      relation: str, unit: str, beta: float, delta: float) -> EpsilonLowerBound:
    search = scale_search(lambda s: multi_run_rejects(fp, n_out, fn, n_in, event, relation, s, beta=beta), event,
                          relation, delta)
    what = (f"multi-run f-DP against the claim's mechanism (Clopper-Pearson FPR/FNR tested against the claim's own "
            f"PLD trade-off curve; {relation}, per {unit}): {fp} FP / {n_out} and {fn} FN / {n_in} runs, {how}")
    counts = {"runs_in": n_in, "runs_out": n_out, "false_negatives": fn, "false_positives": fp,
              "threshold": threshold}
    return _result(MULTI_RUN_METHOD, what, search, counts, event, relation, unit, beta, delta)
