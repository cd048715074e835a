"""Step-level audit of a one-shot additive release: ALM's noised head (the maths:
:mod:`privaudit.attacks.step.step_distinguisher`).

ALM (Yang, Gohari & Topcu) has one privatised "step": the release theta_hat = theta(D) + s xi of the
fine-tuned head's weights theta(D), xi_j i.i.d. Logistic(0, 1) (Def. 4.1; Algorithm 1), with s calibrated
so that eps = Delta_1 / s (Thm. 4.1, Remark 4.1 for vector outputs, Prop. 4.1 for trained weights),
where Delta_1 is the L1 sensitivity *sampled* by Algorithm 2. Replace-one per example (Def. 4.3).

For a neighbouring pair of fine-tuning sets with noiseless heads m0 = theta(D), m1 = theta(D'),
:func:`audit_release` draws the release many times per side through ALM's own noise code
(:func:`privaudit.defenses.alm.mechanisms.add_noise`, at the scale :meth:`ALM.release_noise` calibrates), scores each
draw with the log-likelihood ratio of the noise along the difference (the Neyman-Pearson optimal test) and
turns the scores into the step audit's sound lower bounds
(:func:`privaudit.attacks.step.step_distinguisher.step_bounds`):

* **Clopper-Pearson epsilon at delta = 0** -- the sound bound for this claim. The claim is pure DP
  (Def. 3.1 with delta = 0; Thm. 4.1): every event R has P[M(D) in R] <= e^eps P[M(D') in R], so every
  threshold test has TPR <= e^eps FPR and TNR <= e^eps FNR, and log(TPR_lo / FPR_hi) with one-sided
  Clopper-Pearson bounds (threshold chosen on a separate half) is a lower bound on eps with probability
  >= 1 - alpha, for *any* mechanism. Unlike a Gaussian release (whose pure epsilon is infinite, so its
  bound is taken at the claim's delta > 0), the logistic privacy loss is bounded: its log-likelihood
  ratio along one coordinate is increasing in y and tends to +-Delta / s in the tails (the proof of
  Thm. 4.1, App. C.1: the loss is at most gamma / s with gamma = |f(x) - f(y)|), so the tail events'
  ratio approaches e^eps and the delta-0 bound can approach the claim from below.
* **GDP mu** (the f-DP view): a sound lower bound on the tightest mu of the pair, reported beside the
  tightest mu of the claim's canonical pair (a logistic shift of exactly eps; not gated: the claim is a
  pure-DP statement, and the one-coordinate pair is not shown to be the worst of the L1 ball for f-DP).

Floating point. The bound is about the release as computed, and every score is a function of the released
value, so it stays sound for the code as run. A plain float64 Laplace release (m + b xi) leaks through its
last bits (Mironov 2012, "On significance of the least significant bits for differential privacy"): its
log-likelihood ratio is flat (+-eps) in both tails, and a threshold on that plateau separates draws by the
release's low-order bits (near m0, releases from D and from D' fall on different float grids).
``mechanism = "laplace"`` is therefore released through Mironov's snapping mechanism
(:mod:`privaudit.defenses.alm.snapping`): outputs on the grid of multiples of Lambda (the smallest power of two >=
lambda) within [-B, B], claimed eps = Delta_1 / lambda + d 2^-49 B / lambda (Thm. 1). Its scorer is the exact log-mass
of the released grid point (:func:`privaudit.defenses.alm.snapping.snapped_log_mass`: the real Laplace mass of the
point's rounding cell), the likelihood ratio of the discrete release; the Clopper-Pearson bound is sound for it
as for any statistic of the release (mass at the clamp's +-B is not modelled: a choice of statistic, not a
condition of soundness). The logistic ratio (the default) has no plateau.

Support. A statistical bound cannot see an output that the neighbour cannot produce at all (the float64 logistic
release put 77-99% of its outputs there: Mironov 2012). Every pair also runs the reachability test
(:func:`support_check`, :mod:`privaudit.attacks.step.reachability`) on the release as ALM makes it
(:func:`privaudit.defenses.alm.mechanisms.release_of`), in both directions; an impossible output refutes the claim
(at delta: when the Clopper-Pearson lower bound on their probability exceeds it). ALM's logistic and Gaussian
releases are exact on a grid (:mod:`privaudit.defenses.alm.grid`), so every output is reachable from every input.

Pairs: ``canary`` -- the canonical pair at the claimed sensitivity: m0 = theta(members) and m1 = m0 +
Delta_1 e_0 (difference exactly the sampled L1 sensitivity along one coordinate: the worst case the claim
allows, whose true epsilon is the claim's); ``extreme`` -- the members with the first replaced by a
Dirac-like image; ``witness`` -- the sensitivity search's best pair for ``alm.head-weights`` (the
register's setting), at which the heads differ by more than the sampled Delta_1 in L1. A pair's verdict is
``refuted`` when eps_lb > eps_claim (each bound at alpha / (2 pairs)); power = eps_lb / eps_claim.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Mapping

import torch

from privaudit.attacks.step.reachability import describe as describe_reachability
from privaudit.attacks.step.reachability import reachability_test, recorded_error, recorded_refutes
from privaudit.attacks.step.step_distinguisher import KnownMechanism, additive_step_scores
from privaudit.audit.step.pairs import (StepAudit, StepRequest, audit_verdict, dirac_image, refutes, search_witness,
                                        witness_info, write_witness)
from privaudit.core.errors import ConfigError
from privaudit.defenses.alm import mechanisms
from privaudit.defenses.alm.mechanisms import add_noise, log_density
from privaudit.defenses.alm.snapping import snapped_log_mass

#: defenses whose privatised step is one additive release, and their sensitivity register entry
RELEASE_CLAIMS = {"alm": "alm.head-weights"}
RELEASE_PAIRS = ("canary", "extreme", "witness")
#: the row's fields a release's witness header repeats
WITNESS_META = ("epsilon_lower", "mu_lower", "difference_norm", "sensitivity_claimed", "noise_scale")


def _claim_mu(mechanism: str, eps: float, noise_multiplier: float) -> float:
    """Tightest mu of the claim's canonical pair: a one-coordinate shift by the claimed sensitivity."""
    if mechanism == "gaussian":
        return 1.0 / noise_multiplier
    return KnownMechanism(mechanism, eps).true_mu()


def _quantity(ctx: Any, name: str, overrides: Mapping[str, Any]) -> Any:
    qs, _, _ = ctx.quantities(name, dict(overrides))
    found = [q for q in qs if q.claim_id == RELEASE_CLAIMS[name]]
    if len(found) != 1:
        raise ConfigError(f"defense {name!r}: expected one quantity {RELEASE_CLAIMS[name]!r}, found {len(found)}")
    return found[0]


def _save_witness(out_dir: Path, name: str, kind: str, a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor],
                  m0: torch.Tensor, m1: torch.Tensor, meta: dict[str, Any]) -> str:
    tensors = {**{f"a.{k}": v.detach().cpu().clone().contiguous() for k, v in a.items()},
               **{f"b.{k}": v.detach().cpu().clone().contiguous() for k, v in b.items()},
               "out.a": m0.detach().cpu().clone(), "out.b": m1.detach().cpu().clone()}
    return write_witness(out_dir, f"{name}.{kind}", tensors, {"defense": name, "pair": kind, **meta})


@dataclass(frozen=True)
class _ReleasePair:
    """A neighbouring pair of fine-tuning sets (a, b), their noiseless heads (m0, m1; the canary's m1 is m0
    until the calibrated sensitivity shifts it), the sensitivity parameters the noise is calibrated to, the
    defense's hyper-parameters there, and the witness search's summary (witness pair)."""

    a: Mapping[str, torch.Tensor]
    b: Mapping[str, torch.Tensor]
    m0: torch.Tensor
    m1: torch.Tensor
    sensitivity: Mapping[str, Any]
    overrides: Mapping[str, Any]
    info: dict[str, Any]


def _release_pair(name: str, kind: str, ctx: Any, request: StepRequest,
                  members: Mapping[str, torch.Tensor]) -> _ReleasePair:
    from privaudit.audit.sensitivity.register import CLAIMS

    if kind == "witness":
        spec = CLAIMS[RELEASE_CLAIMS[name]]
        setting, target, res = search_witness(spec, ctx, request.witness_evaluations, request.seed)
        overrides = {**spec.base_overrides, **setting.overrides}
        a, b = res.best.pair.neighbours(target.relation, target.domain.unit_size)
        return _ReleasePair(a, b, res.best.fa.double().reshape(-1), res.best.fb.double().reshape(-1), target.params,
                            overrides, witness_info(spec, setting, target, res))
    q = _quantity(ctx, name, request.params)
    m0 = q.fn((members["x"], members["y"])).double().reshape(-1)
    if kind == "canary":  # the claim's worst case: + Delta e_0 (L1 and L2 alike along one coordinate), once calibrated
        return _ReleasePair(members, members, m0, m0, q.params, request.params, {})
    b = {"x": torch.cat([dirac_image(members["x"][:1]), members["x"][1:]]), "y": members["y"]}
    return _ReleasePair(members, b, m0, q.fn((b["x"], b["y"])).double().reshape(-1), q.params, request.params, {})


def _release_claim(cal: Any, eps_claim: float, mu_claim: float, request: StepRequest) -> dict[str, Any]:
    return {"mechanism": cal.mechanism, "epsilon": eps_claim, "delta": cal.delta, "mu": mu_claim,
            "noise_multiplier": cal.noise_multiplier, "norm": cal.norm, "pure": cal.delta == 0,
            "target_epsilon": request.target_epsilon, "calibration": cal.calibration,
            "clamp_bound": cal.clamp_bound, "grid": cal.grid, "coordinates": cal.coordinates,
            "snapping_overhead": cal.overhead if cal.mechanism == "laplace" else 0.0,
            "grid_overhead": cal.overhead if cal.mechanism == "logistic" else 0.0, "grid_cost": cal.grid_cost,
            "release": mechanisms.release_of(cal.mechanism, cal.scale, cal.clamp_bound, cal.grid).description,
            "what": "one release of the fine-tuned head plus i.i.d. noise at the scale calibrated to the "
                    f"sampled {cal.norm.upper()} sensitivity (ALM Thm. 4.1, Prop. 4.1); mu: the tightest "
                    "mu of its canonical pair (one coordinate shifted by the claimed sensitivity)"}


def _release_row(kind: str, index: int, m0: torch.Tensor, m1: torch.Tensor, cal: Any, request: StepRequest,
                 n: int) -> dict[str, Any]:
    """One pair's row: ALM's release of m0 and m1 drawn many times per side, scored by the likelihood ratio of
    its noise, and its sound bounds against the per-release claim."""
    eps_claim = float(cal.epsilon)
    mu_claim = _claim_mu(cal.mechanism, eps_claim, cal.noise_multiplier)
    diff = m1 - m0
    if not bool(torch.isfinite(diff).all()):
        raise ConfigError(f"pair {kind}: the release's noiseless output is not finite")
    release = partial(_release, mechanism=cal.mechanism, scale=cal.scale, clamp_bound=cal.clamp_bound, grid=cal.grid)
    s0, s1 = additive_step_scores(m0, m1, release, release_log_likelihood(cal.mechanism, cal.scale, cal.grid),
                                  cal.scale, int(request.draws), request.generator(index), noise=request.noise)
    bd = request.bounds(s0, s1, index, cal.delta)
    dist = float(torch.linalg.vector_norm(diff, ord=1 if cal.norm == "l1" else 2))
    refuted = refutes(bd.mu_lower, bd.epsilon_lower, mu_claim, eps_claim, gates_mu=cal.mechanism == "gaussian")
    support = support_check(m0, m1, cal, request, index)
    errors = [e for e in (recorded_error(d) for d in support.values()) if e]
    if errors:
        return {"pair": kind, "verdict": "error", "error": errors[0], "support": support}
    support_refuted = any(recorded_refutes(d, cal.delta) for d in support.values())
    return {"pair": kind, "difference_norm": dist, "difference_l2": float(torch.linalg.vector_norm(diff)),
            "difference_linf": float(diff.abs().max()), "coordinates_differing": int((diff != 0).sum()),
            "sensitivity_claimed": cal.sensitivity, "noise_scale": cal.scale,
            "difference_over_sensitivity": dist / cal.sensitivity,
            "epsilon_pair": dist / cal.scale if cal.delta == 0 else None,
            "epsilon_claim": eps_claim, "mu_claim": mu_claim,
            "mu_lower": bd.mu_lower, "epsilon_lower": bd.epsilon_lower, "epsilon_from_mu": bd.epsilon_from_mu,
            "power": bd.epsilon_lower / eps_claim, "power_epsilon": bd.epsilon_lower / eps_claim,
            "power_mu": bd.mu_lower / mu_claim, "verdict": "refuted" if refuted or support_refuted else "not refuted",
            "bounds": bd.to_dict(), "support": support, "support_refuted": support_refuted,
            "conditioned_on": [], "batch": [n, n]}


#: the reachability test's draws: at most this many released values per direction (outputs x coordinates)
SUPPORT_ELEMENTS = 1 << 22


def support_check(m0: torch.Tensor, m1: torch.Tensor, cal: Any, request: StepRequest, index: int) -> dict[str, Any]:
    """The reachability test (:mod:`privaudit.attacks.step.reachability`) of the release as ALM makes it
    (:func:`privaudit.defenses.alm.mechanisms.release_of`, the object :func:`add_noise` draws through), in both
    directions on the coordinates where the pair differs (elsewhere both sides release the same input, whose
    outputs are reachable from it): outputs of m0 checked against m1 and of m1 against m0, at the pair's level
    alpha / (2 pairs) split over the two directions."""
    release = mechanisms.release_of(cal.mechanism, cal.scale, cal.clamp_bound, cal.grid)
    where = torch.nonzero(m0 != m1).reshape(-1)
    if where.numel() == 0:
        where = torch.zeros(1, dtype=torch.long)
    a, b = m0.double()[where], m1.double()[where]
    draws = int(max(100, min(int(request.draws), SUPPORT_ELEMENTS // where.numel())))
    gen = torch.Generator().manual_seed(int(request.seed) * 1000 + 500 + index)
    alpha = request.alpha_per_bound / 2
    return {"m0_against_m1": reachability_test(release, a, b, draws, gen, alpha=alpha).to_dict(),
            "m1_against_m0": reachability_test(release, b, a, draws, gen, alpha=alpha).to_dict()}


def support_summary(pair: Mapping[str, Any]) -> str:
    """The pair's reachability test in one line (both directions)."""
    return "; ".join(f"{k.replace('_', ' ')}: {describe_reachability(d)}"
                     for k, d in (pair.get("support") or {}).items())


def audit_release(name: str, ctx: Any, request: StepRequest) -> StepAudit:
    """Audit ``name``'s one release on each pair of ``request.kinds`` (see module doc)."""
    from privaudit.defenses.base import Budget
    from privaudit.defenses.registry import make_defense

    if name not in RELEASE_CLAIMS:
        raise ConfigError(f"defense: {name!r} has no one-shot release to audit; accepted: {', '.join(RELEASE_CLAIMS)}")
    data = ctx.data
    budget = Budget(target_epsilon=request.target_epsilon, delta=request.delta,
                    noise_multiplier=request.noise_multiplier)
    members = {"x": data.train.x, "y": data.train.y.long()}
    n = int(members["x"].shape[0])
    rows: list[dict[str, Any]] = []
    claim: dict[str, Any] | None = None
    for i, kind in enumerate(request.kinds):
        start = time.perf_counter()
        pair = _release_pair(name, kind, ctx, request, members)
        defense = make_defense(name, dict(pair.overrides))
        cal = defense.release_noise(budget, float(pair.sensitivity["sensitivity_l1"]),
                                    float(pair.sensitivity["sensitivity_l2"]), n,
                                    num_classes=int(data.info.num_classes), coordinates=int(pair.m0.numel()))
        if cal is None:
            raise ConfigError(f"defense {name!r}: no noise to audit (non-private budget)")
        m1 = pair.m1
        if kind == "canary":
            m1 = m1.clone()
            m1[0] += cal.sensitivity
        row = {**_release_row(kind, i, pair.m0, m1, cal, request, n), **pair.info}
        if claim is None:
            claim = _release_claim(cal, float(cal.epsilon), _claim_mu(cal.mechanism, float(cal.epsilon),
                                                                       cal.noise_multiplier), request)
        if row["verdict"] == "refuted" and request.out_dir is not None:
            row["witness"] = _save_witness(request.out_dir, name, kind, pair.a, pair.b, pair.m0, m1, {
                k: row[k] for k in WITNESS_META} | {"claim": claim, "config": defense.config_dict()})
        row["seconds"] = round(time.perf_counter() - start, 3)
        rows.append(row)
    assert claim is not None
    done = [r for r in rows if r["verdict"] != "error"]
    if not done:
        return StepAudit(name, "replace-one", "example", claim, request.settings(), tuple(rows), audit_verdict(rows))
    best = max(done, key=lambda r: r["epsilon_lower"])
    return StepAudit(name, "replace-one", "example", claim, request.settings(), tuple(rows),
                     audit_verdict(rows), best["pair"],
                     max(r["mu_lower"] for r in done), best["epsilon_lower"], best["epsilon_lower"] / claim["epsilon"])


def release_log_likelihood(mechanism: str, scale: float, grid: float | None):
    """The per-coordinate log-likelihood of a release residual (y - m) / scale: the test statistic's ingredient.

    Snapped Laplace (``grid`` = Lambda): the log-mass of the released grid point (:func:`snapped_log_mass`);
    otherwise the noise's log-density (:func:`privaudit.defenses.alm.mechanisms.log_density`).
    """
    if mechanism == "laplace" and grid is not None:
        return partial(snapped_log_mass, half_cell=grid / (2.0 * scale))
    return partial(log_density, mechanism)


def _release(m: torch.Tensor, gen: torch.Generator, *, mechanism: str, scale: float,
             clamp_bound: float | None = None, grid: float | None = None) -> torch.Tensor:
    """ALM's own release of ``m`` (:func:`privaudit.defenses.alm.mechanisms.add_noise`), one draw per row."""
    return add_noise(m, mechanism, scale, gen, clamp_bound=clamp_bound, grid=grid)
