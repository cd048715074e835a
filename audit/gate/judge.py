"""The CI gate: does measured leakage contradict a claim, did a sensitivity claim break, did a cell fail?

A comparison between an empirical lower bound and a claimed epsilon is made only where it is sound:

* the bound must be a sound lower bound (one-run, Steinke et al. 2023; Clopper-Pearson multi-run);
  the Gaussian-DP variant assumes a Gaussian trade-off curve and is never gated on;
* every bound names the relation and unit it is on (``relation``, ``unit``): one-run bounds from
  independent inclusion coins are on add/remove epsilon, paired canaries (a coin picks which of two
  candidates is trained on) on replace-one epsilon, canary users on user-level epsilon. A bound is
  compared only with a claim at its own relation and unit: a replace-one claim does not bound
  add/remove epsilon (a replace-one-DP mechanism may publish the dataset size exactly), and an
  example-level bound does not test a user-level claim here (the defense partitions users from the
  data, so replacing an example may move several users); any mismatch is "not comparable" with that
  reason rather than compared silently;
* the bound's delta must be at least the claim's: an (eps, delta_c)-DP mechanism is
  (eps, delta_b)-DP for every delta_b >= delta_c, so a bound at delta_b exceeding eps contradicts it;
* the claimed epsilon is the smallest one any applicable accountant gives for the claim at its delta;
* an attack that also reports ``eps_lb_mechanism`` (the one-run f-DP bound against the claim's own
  mechanism, :mod:`privaudit.attacks.bounds.mechanism`) is compared and gated on that bound, the more powerful sound
  test of the same claim (an accountant's epsilon for the claim's event is at least the exact epsilon of
  that event, which the bound exceeds with probability at most beta when the run has the event's
  profile); its (eps, delta) bound is kept beside it as ``eps_lb_any_mechanism``.

A bound exceeding (1 + ``epsilon_slack``) times that epsilon fails the gate with a reason naming the
cell. Each attack states its bound at its own confidence (95% by default); with N comparisons, N such
bounds could each exceed a true claim with probability 5%. The gate therefore recomputes every
compared bound from its counts at level beta / N (Bonferroni; :func:`family_bound`), so that the
chance that *any* true claim fails the gate is at most beta (the family-wise error rate, stated in the
report): a CI gate that does not cry wolf.

Power. Bonferroni over every bound of every cell divides beta by many tests that add nothing (a
black-box bound of 0 next to a white-box one). A suite therefore declares, per defense and before any
score exists, its *primary* statistic (``primary = "<attack label>"``): only primary bounds are gated and
counted in N; the others are reported as secondary at their own confidence. Without a declaration every
sound bound of the cell is primary. Positive controls (``control = true``: a claim known to be false, e.g.
:class:`privaudit.defenses.controls.UnderNoisedControl`) are judged the other way round: a control whose claim the
gate catches passes ("caught, as expected"), one it does not catch fails the gate, because a gate that
cannot catch a tenfold under-noising at this suite's size has no power and its PASS would mean nothing.

Strict expectations. A documented known-broken finding (a sensitivity ``expect = "violated"``, a step audit
``expect = "refuted"``) that does not reproduce fails the gate: the auditor lost power. An ``error`` verdict (a
setting or pair that raised) fails it, naming the exception; an ``inconclusive`` one fails it unless the suite
allows it (``sensitivity.allow_inconclusive``); a grid cell without a result fails it (:func:`judge_run`, the one
gate of a run, which the runner applies and ``privaudit gate`` recomputes from the run's evidence:
:mod:`privaudit.audit.verify.evidence`; docs/gate.md).

Records. The gate reads a cell's result as a :class:`~privaudit.audit.report.records.CellRecord` and writes its
evidence as records too: each cell's :class:`~privaudit.audit.report.records.CellGate` with its
:class:`~privaudit.audit.report.records.Comparison` rows, and the run's
:class:`~privaudit.audit.report.records.SuiteGate` (:class:`JudgedRun`: the cells with their gates, and the suite's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from privaudit.audit.report.records import AttackRecord, CellClaim, CellGate, CellRecord, Comparison, SuiteGate
from privaudit.audit.suite.model import GateConfig, SensitivityConfig, StepAuditConfig
from privaudit.audit.gate.recompute import family_bound, release_mismatch, release_target

SOUND_METHODS = ("one-run", "one-run-search", "one-run-paired", "one-run-fdp", "one-run-best", "clopper-pearson",
                 "one-run-fdp-mechanism", "white-box-trajectory")
#: The per-cell step audit's pairs are gated at this base confidence (before the family-wise correction).
STEP_CONFIDENCE = 0.95
#: The verdicts of gated comparisons (counted in the family-wise error rate).
GATED = ("consistent", "exceeds", "caught")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


@dataclass(frozen=True)
class _Row:
    """A comparison and, while it is ``pending``, the bound it is decided on and that bound's own confidence."""

    comparison: Comparison
    bound: Mapping[str, Any] | None = None
    confidence: float | None = None


def compare(cell: CellRecord, label: str, attack: AttackRecord, slack: float,
            primary: str | None = None) -> Comparison:
    """One bound-versus-claim comparison: the claim it is compared with, or why it is ``not comparable``.

    The verdict of a comparable primary pair is ``pending`` until the gate knows the family size (:func:`gate_cells`);
    a comparable bound that is not the cell's declared ``primary`` is ``secondary`` (reported, not gated)."""
    return _compare(cell, label, attack, primary).comparison


def _compare(cell: CellRecord, label: str, attack: AttackRecord, primary: str | None) -> _Row:
    eps_lb, bound, extra = _compared_bound(attack)
    out: dict[str, Any] = {"attack": label, "eps_lower_bound": eps_lb, "method": bound.get("method"),
                           "epsilon": None, "accountant": None, "gate_eps_lower_bound": None,
                           "gate_confidence": None, "verdict": "not comparable", "reason": None, **extra}
    reason = _unsound(cell, eps_lb, bound)
    if reason is None:
        out.update(relation=bound.get("relation", "add-remove"), unit=bound.get("unit", "example"))
        reason = _incomparable(cell, bound)
    if reason is not None:
        return _Row(Comparison(**{**out, "reason": reason}))
    applicable = {k: v for k, v in (cell.epsilon or {}).items() if v is not None}
    accountant = min(applicable, key=lambda k: applicable[k])
    out.update(epsilon=applicable[accountant], accountant=accountant, verdict="pending")
    release = release_target(cell, bound)
    if release is not None and release[0] < out["epsilon"]:
        out.update(epsilon=release[0], accountant=release[1], claim_epsilon=applicable[accountant])
    if primary is not None and label != primary:
        out.update(verdict="secondary", reason=f"not gated: the suite's primary statistic for this defense is "
                                               f"{primary!r}")
        return _Row(Comparison(**out))
    return _Row(Comparison(**out), bound, bound.get("confidence"))


def _compared_bound(attack: AttackRecord) -> tuple[float | None, Mapping[str, Any], dict[str, Any]]:
    """(bound, its details, extra fields): the attack's white-box trajectory bound where it reports one (every
    step's observation: the most powerful test of the claim's steps), else its test of the claim's own mechanism
    (one-run, against the claim's curve), else its (eps, delta) bound; the others beside it. The order is fixed
    before any bound exists, so one bound per attack is gated."""
    eps_lb = attack.eps_lower_bound
    mechanism, trajectory = attack.mechanism_bound, attack.trajectory_bound
    if trajectory and attack.eps_lb_trajectory is not None:
        return attack.eps_lb_trajectory, trajectory, {"eps_lb_any_mechanism": eps_lb,
                                                      "eps_lb_mechanism": attack.eps_lb_mechanism}
    if mechanism and attack.eps_lb_mechanism is not None:
        return attack.eps_lb_mechanism, mechanism, {"eps_lb_any_mechanism": eps_lb}
    return eps_lb, attack.bound, {}


def _step_rows(cell: CellRecord) -> list[_Row]:
    """The cell's own step audit (:mod:`privaudit.audit.run.claim_checks`) as comparisons: each pair's GDP mu_lb against
    the per-step claim mu = 1 / z the accountant composes, pending the family-wise level; an errored pair is
    ``not comparable`` with its error (and a reason to fail, :func:`claim_check_reasons`)."""
    audit = cell.step_audit
    if not audit:
        return []
    out = []
    for p in audit.get("pairs") or []:
        row: dict[str, Any] = {"attack": f"step audit ({p.get('pair')} pair)", "eps_lower_bound": p.get("mu_lower"),
                               "method": "step-gdp", "quantity": "mu", "epsilon": audit["claim"]["mu"],
                               "accountant": "per-step claim mu = 1/z", "gate_eps_lower_bound": None,
                               "gate_confidence": None, "verdict": "not comparable", "reason": None}
        if p.get("verdict") == "error" or not (p.get("bounds") or {}).get("gdp"):
            why = p.get("error") or "no bound recorded"
            out.append(_Row(Comparison(**{**row, "reason": f"the pair errored: {why}"})))
        else:
            out.append(_Row(Comparison(**{**row, "verdict": "pending"}),
                            {"method": "step-gdp", "confidence": STEP_CONFIDENCE, "gdp": p["bounds"]["gdp"]},
                            STEP_CONFIDENCE))
    return out


def claim_check_reasons(cell: CellRecord) -> list[str]:
    """Reasons from the cell's claim checks that need no family correction: every trace mismatch (exact, or a
    measured check at its own stated level), one reason per check with its steps folded
    (:func:`privaudit.audit.findings.fold_findings`; the cell's record keeps each), and every errored step-audit
    pair."""
    from privaudit.audit.findings import fold_findings

    steps = ((cell.claim_checks or {}).get("trace") or {}).get("steps")
    reasons = [f"cell {cell.id}: its trace does not match its claim: {f['message']}"
               for f in fold_findings(cell.trace_mismatches, steps=steps, check="field")]
    reasons += [f"cell {cell.id}: its step audit's {p.get('pair')} pair errored: {p.get('error')}"
                for p in (cell.step_audit or {}).get("pairs") or [] if p.get("verdict") == "error"]
    return reasons


def _unsound(cell: CellRecord, eps_lb: float | None, bound: Mapping[str, Any]) -> str | None:
    """Why there is nothing sound to compare (no bound, no claim, an unsound method), or None."""
    if eps_lb is None:
        return "the attack gives no sound lower bound"
    if cell.infinite or (cell.claim is not None and cell.claim.paper_accountant == "none"):
        return "no privacy claim (epsilon is infinite)"
    if bound.get("method") not in SOUND_METHODS:
        return f"bound method {bound.get('method')!r} is not a sound lower bound in general"
    return None


def _incomparable(cell: CellRecord, bound: Mapping[str, Any]) -> str | None:
    """Why a sound bound does not test this claim (another relation or unit, no applicable accountant, a
    smaller delta than the claim's, release trials drawn for another claim), or None."""
    claim = cell.claim
    b_rel, b_unit = bound.get("relation", "add-remove"), bound.get("unit", "example")
    c_rel, c_unit = (claim.relation, claim.unit) if claim is not None else (None, None)
    if b_rel != c_rel:
        return f"the claim is {c_rel}: the bound is on {b_rel} epsilon, which the claim does not bound"
    if b_unit != c_unit:
        return (f"the claim protects a {c_unit}; the bound's coin is one {b_unit}, not a whole {c_unit}"
                if c_unit == "user" else f"the claim protects a {c_unit}; the bound is per {b_unit}")
    if not any(v is not None for v in (cell.epsilon or {}).values()):
        return "no accountant gives an epsilon for this claim"
    claim_delta = float(claim.delta or 0.0)
    bound_delta = float(bound.get("delta", 0.0))
    if bound_delta < claim_delta:
        return f"the bound is at delta={bound_delta:g} < the claim's delta={claim_delta:g}"
    return release_mismatch(cell, bound)


def decide(row: _Row, family: int, slack: float) -> Comparison:
    """Settle a pending comparison with the bound at family-wise confidence over ``family`` comparisons."""
    comparison = row.comparison
    if comparison.verdict != "pending":
        return comparison
    recomputed = family_bound(row.bound, family)
    if recomputed is None:  # a sound method without counts to recompute from: no correction possible
        recomputed, level = comparison.eps_lower_bound, float(row.confidence)
    else:
        level = 1.0 - (1.0 - float(row.confidence)) / family
    verdict = "exceeds" if recomputed > (1.0 + slack) * comparison.epsilon else "consistent"
    return comparison.updated(gate_eps_lower_bound=recomputed, gate_confidence=level, verdict=verdict)


def gate_cells(cells: Sequence[CellRecord], config: GateConfig,
               roles: dict[str, tuple[str | None, bool]] | None = None, *, family: int | None = None
               ) -> list[CellGate]:
    """Every cell's gate: its comparisons (bounds at family-wise confidence over all cells) and reasons.

    ``roles`` maps a defense label to (primary attack label or None, is a positive control). The family is every
    pending comparison of ``cells`` (their primary bounds and their own step audits' pairs), or ``family`` when
    that is larger (a cell judged as if it sat in a larger suite: ``privaudit gate-power``)."""
    roles = roles or {}
    pending: list[list[_Row] | None] = []
    for cell in cells:
        primary, _ = roles.get(cell.defense, (None, False))
        pending.append(None if cell.error else [_compare(cell, label, a, primary)
                                                for label, a in (cell.attacks or {}).items()] + _step_rows(cell))
    family = max(1, sum(r.comparison.verdict == "pending" for rs in pending if rs for r in rs), family or 0)
    gates = []
    for cell, rows in zip(cells, pending):
        if rows is None:
            reasons = [f"cell {cell.id} errored: {cell.error}"] if config.fail_on_error else []
            gates.append(CellGate(status="fail" if reasons else "pass", reasons=reasons, comparisons=()))
            continue
        comparisons = [decide(r, family, config.epsilon_slack) for r in rows]
        noise = released_noise_checks(cell, comparisons)
        _, control = roles.get(cell.defense, (None, False))
        gates.append(_control_gate(cell, comparisons, noise) if control
                     else _claim_gate(cell, comparisons, family, config, noise))
    return gates


def released_noise_checks(cell: CellRecord, comparisons: Sequence[Comparison]) -> list[dict[str, Any]]:
    """The released-noise check (:mod:`privaudit.attacks.noise.released_noise`) of every gated white-box trajectory
    comparison, recomputed from the attack's saved residual counts against the gradient release's claimed
    multiplier re-derived from the cell's saved claim (never the attack's own record of it), and of each group of the
    step's other releases whose probes' counts are saved (:func:`release_noise_check`). A check without residual counts
    (evidence from before the check existed) or without a claimed multiplier says why, unjudged."""
    from privaudit.accountants.events import event_from_dict
    from privaudit.attacks.bounds.trajectory import step_multiplier

    out = []
    claim = cell.claim_in_full
    for c in comparisons:
        if c.method != "white-box-trajectory" or c.verdict not in ("consistent", "exceeds"):
            continue
        attack = (cell.attacks or {}).get(c.attack)
        counts = (((attack.trajectory_bound if attack is not None else None) or {}).get("counts")) or {}
        if claim.get("event") is None:
            out.append({"attack": c.attack, "rejected": False, "unjudged": "the cell's claim has no event"})
            continue
        z = step_multiplier(event_from_dict(claim["event"]), claim.get("params"))
        out.append(_noise_entry(c.attack, counts, z))
        out += [release_noise_check(c.attack, group, claim) for group in counts.get("releases") or ()]
    return out


def release_noise_check(attack: str, group: Mapping[str, Any], claim: Mapping[str, Any]) -> dict[str, Any]:
    """The released-noise checks of one group of a step's other releases (DPCL's similarity matrix, or Barlow's
    statistics): their probes' residuals (the noise each release added on each probed entry, in units of its own
    sensitivity; :mod:`privaudit.attacks.canaries.release_probes`) against the releases' claimed multiplier, re-derived
    from the cell's saved claim: the level and freshness across steps, and across the step's coordinates (no per-tensor
    check)."""
    names = list(group.get("names") or ())
    name = f"{attack} ({', '.join(names)})"
    zs = {((claim.get("params") or {}).get("noise_multipliers") or {}).get(n) for n in names}
    if len(zs) != 1 or None in zs:
        return {"attack": name, "rejected": False, "unjudged": "the cell's claim gives these releases no one multiplier"}
    return {**_noise_entry(name, group, float(zs.pop())), "tensors": {}}


def _noise_entry(name: str, counts: Mapping[str, Any], z: float) -> dict[str, Any]:
    """One release's released-noise check and its structure checks from its saved residual counts at the claimed
    multiplier ``z`` (unjudged where the counts hold no residuals)."""
    from privaudit.attacks.noise.noise_structure import structure_checks
    from privaudit.attacks.noise.released_noise import released_noise_check

    check = released_noise_check(counts, z)
    return {"attack": name, **(check or {"rejected": False, "unjudged": "no released-noise residuals recorded"}),
            **structure_checks(counts, z)}


def noise_failures(noise: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(check name, one line) for every failing released-noise check: the pooled one
    (:mod:`privaudit.attacks.noise.released_noise`), independence across steps and coordinates, and each tensor
    (:mod:`privaudit.attacks.noise.noise_structure`)."""
    from privaudit.attacks.noise.noise_structure import describe_failures
    from privaudit.attacks.noise.released_noise import describe_check

    out = []
    for n in noise:
        if n["rejected"]:
            out.append(("released noise", f"{n['attack']}: {describe_check(n)}: its release adds less noise than "
                                          "its claim states"))
        out += [(name, f"{n['attack']}: {text}") for name, text in describe_failures(n)]
    return out


def noise_levels(noise: Sequence[Mapping[str, Any]]) -> tuple[int, list[str]]:
    """(how many released-noise checks were judged, each at the level NOISE_ALPHA; why each other was not)."""
    judged, unjudged = 0, []
    for n in noise:
        for check in (n, n.get("independence") or {}, n.get("tensors") or {}, n.get("coordinates") or {}):
            if "unjudged" in check:
                unjudged.append(check["unjudged"])
            elif check:
                judged += 1
    return judged, unjudged


def _control_gate(cell: CellRecord, comparisons: list[Comparison], noise: list[dict[str, Any]]) -> CellGate:
    """A positive control's gate: caught (passes) when a gated comparison exceeds its claim, its trace does not
    match it or its release added less noise than it claims; else it fails (the gate has no power at this suite's
    size)."""
    comparisons = [c.updated(verdict="caught") if c.verdict == "exceeds" else c for c in comparisons]
    caught = [c for c in comparisons if c.verdict == "caught"]
    released = {name for name, _ in noise_failures(noise)}
    by = sorted({c.attack for c in caught} | ({"trace"} if cell.trace_mismatches else set()) | released)
    reasons = [] if by else [
        f"cell {cell.id}: positive control not caught: no gated bound exceeds its false claim (epsilon "
        f"{_fmt(next((c.epsilon for c in comparisons if c.epsilon and c.quantity != 'mu'), None))}), "
        "its trace matches it and its release's measured noise does not refute it; the gate has no power at this "
        "suite's size"]
    return CellGate(status="fail" if reasons else "pass", reasons=reasons, comparisons=comparisons, control=True,
                    caught=bool(by), caught_by=by, released_noise=noise)


def _exceeds_reason(cid: str, c: Comparison, claim: CellClaim | None, family: int) -> str:
    """The reason a gated bound above its claim fails the gate."""
    level = f"({100 * c.gate_confidence:.4g}% confidence, family-wise over {family})"
    if c.quantity == "mu":
        return (f"cell {cid}: {c.attack}'s sound lower bound mu_lb = {_fmt(c.gate_eps_lower_bound)} {level} exceeds "
                f"the per-step claim mu = {_fmt(c.epsilon)} (1/z: the step its accountant composes)")
    target = ("the smallest applicable epsilon" if c.claim_epsilon is None else
              f"the claim's gradient release's epsilon (the whole claim's: {_fmt(c.claim_epsilon)})")
    return (f"cell {cid}: {c.attack}'s sound lower bound eps_lb = {_fmt(c.gate_eps_lower_bound)} {level} exceeds "
            f"{target} {_fmt(c.epsilon)} ({c.accountant}, {claim.relation}, per {claim.unit}, "
            f"delta={claim.delta:.3g})")


def _claim_gate(cell: CellRecord, comparisons: list[Comparison], family: int, config: GateConfig,
                noise: list[dict[str, Any]]) -> CellGate:
    """A claim's gate: a reason for every gated bound above its claim, every claim-check finding, every release
    whose measured noise refutes the claim's and, with ``max_auc``, every attack reaching it."""
    reasons = [_exceeds_reason(cell.id, c, cell.claim, family) for c in comparisons if c.verdict == "exceeds"]
    reasons += claim_check_reasons(cell)
    reasons += [f"cell {cell.id}: {text}" for _, text in noise_failures(noise)]
    claimed = cell.claim is None or cell.claim.paper_accountant != "none"
    if config.max_auc is not None and not cell.infinite and claimed:
        for label, a in (cell.attacks or {}).items():
            if a.auc is not None and a.auc >= config.max_auc:
                reasons.append(f"cell {cell.id}: {label} reaches AUC {a.auc:.4g} >= gate.max_auc {config.max_auc:g}")
    return CellGate(status="fail" if reasons else "pass", reasons=reasons, comparisons=comparisons,
                    released_noise=noise)


def sensitivity_gate(results: Sequence[dict[str, Any]], config: SensitivityConfig | None,
                     gate: GateConfig) -> tuple[list[str], list[str]]:
    """Reasons to fail and notes from the sensitivity verdicts, strictly: every checked claim returns a result; an
    ``error`` (any setting raised) fails, naming the exception; a violation fails unless the suite documents it
    (``expect = "violated"``), and a documented violation that is not found fails (the auditor lost power); an
    ``inconclusive`` verdict fails unless the suite allows it (``allow_inconclusive``)."""
    if config is None:
        return [], []
    from privaudit.audit.sensitivity import select

    reasons, notes = [], []
    seen = {r.get("claim") for r in results}
    for claim in (s.id for s in select(None if config.claims is None else list(config.claims))):
        if claim not in seen:
            reasons.append(f"sensitivity claim {claim}: no result was returned")
    for r in results:
        r_reasons, r_notes = _sensitivity_verdict(r, config, gate)
        reasons += r_reasons
        notes += r_notes
    return reasons, notes


def _sensitivity_verdict(r: dict[str, Any], config: SensitivityConfig,
                         gate: GateConfig) -> tuple[list[str], list[str]]:
    """One claim's reasons and notes (see :func:`sensitivity_gate`)."""
    from privaudit.audit.sensitivity.verdict import VERDICTS, display

    claim, verdict = r.get("claim"), r.get("verdict")
    expected = config.expect.get(claim, "holds")
    details = r.get("config") or {}
    reasons, notes = [], []
    errors = list(details.get("errors") or [])
    if verdict == "error" or errors:
        reasons.append(f"sensitivity claim {claim} errored: " + ("; ".join(errors) or details.get("reason")
                                                                 or "no reason recorded"))
    if verdict not in VERDICTS:
        reasons.append(f"sensitivity claim {claim}: unknown verdict {verdict!r}")
    elif verdict == "violated":
        where = f" (witness: {r['witness']})" if r.get("witness") else ""
        text = (f"sensitivity claim {claim} ({r.get('source')}) violated: observed {_fmt(r.get('observed'))} > "
                f"bound {_fmt(r.get('bound'))}{where}")
        if expected == "violated":
            notes.append(text + "; expected by the suite (known-broken claim)")
        elif gate.fail_on_sensitivity:
            reasons.append(text)
        else:
            notes.append(text + "; not gated (gate.fail_on_sensitivity = false)")
    elif expected == "violated" and verdict != "error":
        reasons.append(f"sensitivity claim {claim}: expected violated, found {display(verdict)} (observed "
                       f"{_fmt(r.get('observed'))}, bound {_fmt(r.get('bound'))}): the auditor lost power; if the "
                       "claim was fixed, update the suite's sensitivity.expect")
    elif verdict == "inconclusive":
        text = f"sensitivity claim {claim} is inconclusive ({details.get('reason') or 'no reason recorded'})"
        if claim in config.allow_inconclusive:
            notes.append(text + "; allowed by the suite (sensitivity.allow_inconclusive)")
        else:
            reasons.append(text + "; list it in the suite's sensitivity.allow_inconclusive if that is expected")
    return reasons, notes


def _caught_note(cell: CellRecord) -> str:
    """How a positive control was caught: its largest caught comparison (bound over claim) and its trace."""
    gate = cell.gate
    caught = [c for c in gate.comparisons if c.verdict == "caught"]
    parts = []
    if caught:
        best = max(caught, key=lambda c: c.gate_eps_lower_bound / c.epsilon)
        stat = "mu_lb" if best.quantity == "mu" else "eps_lb"
        parts.append(f"{stat} = {_fmt(best.gate_eps_lower_bound)} > claimed {_fmt(best.epsilon)} ({best.attack})")
    if "trace" in (gate.caught_by or ()):
        parts.append("its trace does not match its claim")
    noise = gate.released_noise or ()
    for n in noise:
        if n["rejected"]:
            parts.append(f"its release added {n['std_ratio']:.3g} of the noise it claims ({n['attack']}, at most "
                         f"{n['std_ratio_upper']:.3g} at {100 * (1 - n['alpha']):.6g}% confidence)")
    parts += [text for name, text in noise_failures(noise) if name != "released noise"]
    return f"positive control {cell.id} caught, as expected: " + "; ".join(parts)


def _error_rate_note(comparisons: Sequence[Comparison], traced: int, released: int) -> tuple[float, str]:
    """The family-wise error rate of the gated comparisons, the trace checks and the released-noise checks, and the
    note that states it."""
    from privaudit.accountants.trace.trace import TRACE_ALPHA
    from privaudit.attacks.noise.released_noise import NOISE_ALPHA

    level = min(c.gate_confidence for c in comparisons)
    fwer = len(comparisons) * (1 - level) + traced * TRACE_ALPHA + released * NOISE_ALPHA
    return fwer, (f"{len(comparisons)} gated bound-versus-claim comparisons (the suite's primary statistics and the "
                  f"cells' own step audits); each bound is recomputed at {100 * level:.4g}% confidence (Bonferroni "
                  f"over the {len(comparisons)})"
                  + (f", and {traced} training traces checked with measured checks at {TRACE_ALPHA:g} each"
                     if traced else "")
                  + (f"{' and' if traced else ', and'} {released} released-noise checks (pooled, across steps, "
                     f"per tensor, across coordinates) at {NOISE_ALPHA:g} each" if released else "")
                  + f": family-wise error rate {100 * fwer:.3g}%, the chance that a true claim fails this gate")


def suite_gate(cells: Sequence[CellRecord], sensitivity: Sequence[dict[str, Any]],
               sensitivity_config: SensitivityConfig | None, config: GateConfig,
               errors: Sequence[str] = (), missing: Sequence[str] = ()) -> SuiteGate:
    """The report's gate over judged ``cells`` (each with its gate): status ``pass``/``fail``, every reason (the
    cells', then ``missing`` -- the grid's cells without a result --, the sensitivity verdicts', then ``errors``),
    and notes on how to read it."""
    reasons: list[str] = [r for c in cells for r in c.gate.reasons] + list(missing)
    s_reasons, notes = sensitivity_gate(sensitivity, sensitivity_config, config)
    reasons += s_reasons
    reasons += list(errors)
    rows = [c for cell in cells for c in cell.gate.comparisons]
    comparisons = [c for c in rows if c.verdict in GATED]
    secondary = [c for c in rows if c.verdict == "secondary"]
    skipped = [c for c in rows if c.verdict == "not comparable" and c.eps_lower_bound is not None
               and c.reason != "no privacy claim (epsilon is infinite)"]
    fwer = None
    traced = sum(bool((c.claim_checks or {}).get("trace")) for c in cells)
    released, unjudged = noise_levels([n for c in cells for n in c.gate.released_noise or ()])
    if comparisons:
        fwer, note = _error_rate_note(comparisons, traced, released)
        notes.append(note)
    if unjudged:
        notes.append(f"{len(unjudged)} released-noise checks not judged: " + "; ".join(sorted(set(unjudged))))
    controls = [c for c in cells if c.gate.control]
    notes += [_caught_note(cell) for cell in controls if cell.gate.caught]
    if secondary:
        notes.append(f"{len(secondary)} secondary bounds reported at their own confidence, not gated")
    if skipped:
        notes.append(f"{len(skipped)} bounds were not compared with their claim (see each cell's comparisons "
                     "for the reason)")
    return SuiteGate(status="fail" if reasons else "pass", reasons=reasons, notes=notes, family_wise_error=fwer,
                     controls=len(controls), controls_caught=sum(bool(c.gate.caught) for c in controls))


@dataclass(frozen=True)
class GateSettings:
    """What the gate of a run depends on, read from the resolved suite (``Suite.to_dict()``, as ``report.json``'s
    ``suite`` and the run's manifest hold it): thresholds, each defense's role (primary attack label, positive
    control), the sensitivity and step-audit configurations (None: the suite has none), and the grid's cell ids."""

    config: GateConfig
    roles: dict[str, tuple[str | None, bool]]
    sensitivity: SensitivityConfig | None
    step_audit: StepAuditConfig | None
    grid: tuple[str, ...]


def gate_settings(suite: Mapping[str, Any], grid: Sequence[str]) -> GateSettings:
    """:class:`GateSettings` of a resolved suite (its ``to_dict()``) whose grid has the cell ids ``grid``; a field
    of the wrong shape is a ConfigError naming it."""
    from privaudit.core.config import build_config

    config = build_config(GateConfig, dict(suite.get("gate") or {}), owner="gate", prefix="gate")
    roles = {d["label"]: (d.get("primary"), bool(d.get("control"))) for d in suite.get("defenses") or []}
    sens = suite.get("sensitivity")
    sensitivity = None if sens is None else SensitivityConfig(
        None if sens.get("claims") is None else tuple(sens["claims"]), sens.get("budget_seconds"),
        sens.get("evaluations"), int(sens.get("seed", 0)), dict(sens.get("expect") or {}),
        tuple(sens.get("allow_inconclusive") or ()))
    step = suite.get("step_audit")
    step_audit = None if step is None else StepAuditConfig(
        tuple(step["defenses"]), int(step["draws"]), step["pair"], float(step["target_epsilon"]),
        int(step["witness_evaluations"]), int(step["seed"]), dict(step.get("expect") or {}))
    return GateSettings(config, roles, sensitivity, step_audit, tuple(grid))


@dataclass(frozen=True)
class JudgedRun:
    """A run judged: its cells, each with its gate (in the order given), and the suite's gate."""

    cells: tuple[CellRecord, ...]
    gate: SuiteGate


def judge_run(cells: Sequence[CellRecord], sensitivity: Sequence[dict[str, Any]],
              step_results: Sequence[dict[str, Any]], settings: GateSettings,
              errors: Sequence[str] = ()) -> JudgedRun:
    """The gate of a whole run, the one implementation the runner and ``privaudit gate`` share: each cell's gate,
    then the suite's: the cells', every grid cell without a result (a run of part of the suite does not pass its
    gate), the sensitivity verdicts and the step audits (strict expectations: see :func:`sensitivity_gate` and
    :func:`privaudit.audit.step.gate.step_gate`) and ``errors``."""
    from privaudit.audit.step.gate import step_gate

    judged = tuple(cell.with_gate(gate) for cell, gate in zip(cells, gate_cells(cells, settings.config,
                                                                                settings.roles)))
    have = {c.id for c in judged}
    missing = [f"cell {cid}: no result (it has not run in this output directory); the gate judges the whole "
               "suite" for cid in settings.grid if cid not in have]
    gate = suite_gate(judged, sensitivity, settings.sensitivity, settings.config, errors, missing)
    step_reasons, step_notes = step_gate(list(step_results), settings.step_audit)
    gate = gate.with_reasons(step_reasons).updated(notes=(*gate.notes, *step_notes))
    return JudgedRun(judged, gate)
