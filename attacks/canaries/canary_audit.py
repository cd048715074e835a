"""The white-box canary audits' shared settings and their bounds from finished scores (orchestration).

:class:`CanaryAuditConfig` holds what the gradient-canary audit
(:mod:`privaudit.attacks.canaries.gradient_canary_audit`) and
the canary-user audit (:mod:`privaudit.attacks.canaries.user_canary`) share; :func:`track_claimed_trajectory` plans the
trajectory bound's threshold from the claim before the first step, and :func:`canary_audit_result` turns a
finished audit's scores into its bounds with the guesses planned from the claim. The maths -- the canaries, their
scores and the planning simulation -- is :mod:`privaudit.attacks.canaries.gradient_canary`; the bounds are
:mod:`privaudit.attacks.bounds`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from privaudit.attacks.base import AttackConfig
from privaudit.attacks.bounds.trajectory import plan_trajectory, step_multiplier
from privaudit.attacks.bounds.trajectory import unsupported_reason as trajectory_unsupported
from privaudit.attacks.canaries.gradient_canary import GradientCanaries, planned_guesses
from privaudit.attacks.result import AttackResult
from privaudit.core.errors import ConfigError, check_probability, one_of
from privaudit.attacks.canaries.gradient_canary import SCORES

@dataclass(frozen=True)
class CanaryAuditConfig(AttackConfig):
    """Settings shared by the white-box canary audits (gradient canaries, canary users).

    ``canaries``: how many Dirac canaries (None: ``canaries_per_param`` of the trainable parameters,
    clamped to [1000, ``max_canaries``] and to the parameter count). ``k_fdp_fraction``: the f-DP bound's
    one-sided guesses as a fraction of m (None: Steinke's bound only). ``relation``: the relation the
    bound is stated at (None: the claim's; a relation this audit cannot state for the defense is an error).
    ``plan_guesses``: choose k (Steinke's k+ = k-, the f-DP k+, the mechanism bound's k+) by
    :func:`planned_guesses` from the claim before the scores exist (explicit ``k_pos`` / ``k_neg`` still
    win; ``k_fdp_fraction`` None still turns the f-DP bound off). ``centred``: score the privatised sums
    minus the data's clipped sums (the auditor knows the rest of the data; :mod:`privaudit.defenses.dp.release.step`),
    removing the data gradient's interference on the canary coordinates (Keinan, Shenfeld & Ligett 2025's
    barrier); False scores the released sums alone. ``score``: ``sum`` (sum over steps of the projections)
    or ``llr`` (sum over steps of the idealised step's log-likelihood ratio, :func:`step_llr`; needs
    ``centred``). ``mechanism``: also report ``eps_lb_mechanism``, the one-run f-DP bound against the
    claim's own mechanism (:mod:`privaudit.attacks.bounds.mechanism`), beside the (eps, delta) bound.
    ``trajectory``: also report ``eps_lb_trajectory``, the white-box bound from every step's centred canary
    observation (:mod:`privaudit.attacks.bounds.trajectory`; needs ``centred``). ``probes``: its trials are the
    per-step probes on every canary coordinate (:mod:`privaudit.attacks.canaries.gradient_canary`: m T trials over T
    steps, withdrawn from the release); False counts the canaries' own sampled trials (m q T / 2 present ones).
    """

    canaries: int | None = None
    canaries_per_param: float = 1.0
    max_canaries: int = 20000
    k_fdp_fraction: float | None = 0.02
    relation: str | None = None
    plan_guesses: bool = True
    centred: bool = True
    score: str = "sum"
    mechanism: bool = False
    trajectory: bool = False
    probes: bool = True

    def validate(self) -> None:
        super().validate()
        if self.canaries is not None and self.canaries < 2:
            raise ConfigError(f"canaries: must be >= 2, got {self.canaries!r}")
        if not 0 < self.canaries_per_param <= 1:
            raise ConfigError(f"canaries_per_param: must lie in (0, 1], got {self.canaries_per_param!r}")
        if self.max_canaries < 2:
            raise ConfigError(f"max_canaries: must be >= 2, got {self.max_canaries!r}")
        if self.k_fdp_fraction is not None:
            check_probability("k_fdp_fraction", self.k_fdp_fraction)
        if self.score not in SCORES:
            raise one_of("score", self.score, SCORES)
        if self.score == "llr" and not self.centred:
            raise ConfigError("score: 'llr' is the likelihood ratio of the centred steps; set centred = true "
                              "or score = 'sum'")

    def count(self, dim: int) -> int:
        if self.canaries is not None:
            return self.canaries
        return int(min(dim, max(min(1000, dim), min(self.max_canaries, round(self.canaries_per_param * dim)))))


def track_claimed_trajectory(canaries: GradientCanaries, cfg: CanaryAuditConfig, *, multiplier: float,
                             steps: int) -> None:
    """Count the per-step trials (``cfg.trajectory`` with centred scores) at the threshold and for the bound's form
    planned from the claim's per-step noise multiplier and the expected trial counts
    (:func:`privaudit.attacks.bounds.trajectory.plan_trajectory`): with probes every canary and step is a trial,
    half of them present (:mod:`privaudit.attacks.canaries.gradient_canary`)."""
    if not (cfg.trajectory and cfg.centred) or canaries.rate is None:
        return
    trials = canaries.m * canaries.rate * steps
    n1, n0 = (trials / 2, trials / 2) if canaries.paired else (trials / 2, canaries.m * steps - trials / 2)
    if canaries.probes:
        n1 = n0 = canaries.m * steps / 2
    canaries.track_trajectory(*plan_trajectory(noise_multiplier=multiplier, n0=n0, n1=n1, beta=cfg.beta))


def _trajectory_claim(canaries: GradientCanaries, cfg: CanaryAuditConfig, event, params) -> tuple[tuple | None, str]:
    """(the claim's event and per-step multiplier, or None; a note saying why there is no trajectory bound)."""
    if not cfg.trajectory or event is None:
        return None, ""
    if canaries.trajectory is None:
        return None, "no trajectory bound: it needs centred scores (the privatised sums less the data's clipped sums)"
    reason = trajectory_unsupported(event, "replace-one" if canaries.paired else "add-remove")
    if reason is None:
        try:
            return (event, step_multiplier(event, params)), ""
        except ConfigError as err:
            reason = str(err)
    return None, f"no trajectory bound: {reason}"


def canary_audit_result(canaries: GradientCanaries, cfg: CanaryAuditConfig, *, steps: int, delta: float,
                        seed: int, unit: str, event=None, claim_params: dict | None = None) -> AttackResult:
    """The bounds of a finished canary audit with the guesses planned from the claim (:func:`planned_guesses`).

    The one place the canary audits turn scores into bounds: explicit ``k_pos`` / ``k_neg`` win over the
    plan; ``k_fdp_fraction`` None turns the f-DP bound off; with ``cfg.mechanism`` and the claim's ``event``
    the mechanism bound is added; with ``cfg.trajectory`` and a tracked trajectory the trajectory bound (the claim's
    per-step multiplier read from ``claim_params`` or the event). The simulation uses the canaries' own rate, norm,
    noise and score.
    """
    if canaries.rate is None or canaries.noise_std is None:
        raise ConfigError("canary audit: the canaries need their sampling rate and noise std to plan guesses")
    trajectory, why_not = _trajectory_claim(canaries, cfg, event, claim_params)
    notes: tuple[str, ...] = (why_not,) if why_not else ()
    event = event if cfg.mechanism else None
    if event is not None:
        from privaudit.attacks.bounds.mechanism import unsupported_reason

        reason = unsupported_reason(event, "replace-one" if canaries.paired else "add-remove")
        if reason is not None:
            event, notes = None, notes + (f"no mechanism bound: {reason}",)
    k_pos, k_neg, k_fdp, k_mech = cfg.k_pos, cfg.k_neg, cfg.k_fdp_fraction, None
    if cfg.plan_guesses:
        plan = planned_guesses(canaries.m, rate=canaries.rate, steps=steps, norm=canaries.clip_norm,
                               noise_std=canaries.noise_std, paired=canaries.paired, beta=cfg.beta, delta=delta,
                               seed=seed, score=canaries.score, event=event,
                               relation="replace-one" if canaries.paired else "add-remove")
        k_pos = plan.k_steinke if k_pos is None else k_pos
        k_neg = plan.k_steinke if k_neg is None else k_neg
        k_fdp = plan.k_fdp / canaries.m if k_fdp is not None else None
        k_mech = plan.k_mechanism
    result = canaries.result(beta=cfg.beta, delta=delta, k_pos=k_pos, k_neg=k_neg, k_fraction=cfg.k_fraction,
                             k_fdp_fraction=k_fdp, unit=unit, k_mechanism=k_mech, event=event,
                             trajectory_claim=trajectory)
    if notes:
        result.bound = dataclasses.replace(result.bound, notes=result.bound.notes + notes)
    return result
