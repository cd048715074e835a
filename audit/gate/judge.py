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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from privaudit.audit.suite.model import GateConfig, SensitivityConfig, StepAuditConfig
from privaudit.audit.gate.recompute import family_bound, release_target

SOUND_METHODS = ("one-run", "one-run-search", "one-run-paired", "one-run-fdp", "one-run-best", "clopper-pearson",
                 "one-run-fdp-mechanism", "white-box-trajectory")
#: The per-cell step audit's pairs are gated at this base confidence (before the family-wise correction).
STEP_CONFIDENCE = 0.95


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def compare(cell: dict[str, Any], label: str, attack: dict[str, Any], slack: float,
            primary: str | None = None) -> dict[str, Any]:
    """One bound-versus-claim comparison: the claim it is compared with, or why it is ``not comparable``.

    The verdict of a comparable primary pair is ``pending`` until :func:`decide` knows the family size; a
    comparable bound that is not the cell's declared ``primary`` is ``secondary`` (reported, not gated).
    """
    eps_lb, bound, extra = _compared_bound(attack)
    claim = cell["claim"] or {}
    out: dict[str, Any] = {"attack": label, "eps_lower_bound": eps_lb, "method": bound.get("method"),
                           "epsilon": None, "accountant": None, "gate_eps_lower_bound": None,
                           "gate_confidence": None, "verdict": "not comparable", "reason": None, **extra}
    reason = _unsound(cell, claim, eps_lb, bound)
    if reason is None:
        out.update(relation=bound.get("relation", "add-remove"), unit=bound.get("unit", "example"))
        reason = _incomparable(cell, claim, bound)
    if reason is not None:
        out["reason"] = reason
        return out
    applicable = {k: v for k, v in cell["epsilon"].items() if v is not None}
    accountant = min(applicable, key=lambda k: applicable[k])
    out.update(epsilon=applicable[accountant], accountant=accountant, verdict="pending",
               confidence=bound.get("confidence"), bound=bound)
    release = release_target(cell, bound)
    if release is not None and release[0] < out["epsilon"]:
        out.update(epsilon=release[0], accountant=release[1], claim_epsilon=applicable[accountant])
    if primary is not None and label != primary:
        out.update(verdict="secondary", reason=f"not gated: the suite's primary statistic for this defense is "
                                               f"{primary!r}")
        out.pop("bound"), out.pop("confidence")
    return out


def _compared_bound(attack: dict[str, Any]) -> tuple[float | None, dict[str, Any], dict[str, Any]]:
    """(bound, its details, extra fields): the attack's white-box trajectory bound where it reports one (every
    step's observation: the most powerful test of the claim's steps), else its test of the claim's own mechanism
    (one-run, against the claim's curve), else its (eps, delta) bound; the others beside it. The order is fixed
    before any bound exists, so one bound per attack is gated."""
    eps_lb = attack.get("eps_lower_bound")
    details = attack.get("details") or {}
    bound, mechanism, trajectory = details.get("bound") or {}, details.get("mechanism_bound"), \
        details.get("trajectory_bound")
    if trajectory and attack.get("eps_lb_trajectory") is not None:
        return attack["eps_lb_trajectory"], trajectory, {"eps_lb_any_mechanism": eps_lb,
                                                         "eps_lb_mechanism": attack.get("eps_lb_mechanism")}
    if mechanism and attack.get("eps_lb_mechanism") is not None:
        return attack["eps_lb_mechanism"], mechanism, {"eps_lb_any_mechanism": eps_lb}
    return eps_lb, bound, {}


def step_comparisons(cell: dict[str, Any]) -> list[dict[str, Any]]:
    """The cell's own step audit (:mod:`privaudit.audit.run.claim_checks`) as comparisons: each pair's GDP mu_lb against
    the per-step claim mu = 1 / z the accountant composes, pending the family-wise level; an errored pair is
    ``not comparable`` with its error (and a reason to fail, :func:`claim_check_reasons`)."""
    audit = (cell.get("claim_checks") or {}).get("step_audit")
    if not audit:
        return []
    out = []
    for p in audit.get("pairs") or []:
        row: dict[str, Any] = {"attack": f"step audit ({p.get('pair')} pair)", "eps_lower_bound": p.get("mu_lower"),
                               "method": "step-gdp", "quantity": "mu", "epsilon": audit["claim"]["mu"],
                               "accountant": "per-step claim mu = 1/z", "gate_eps_lower_bound": None,
                               "gate_confidence": None, "verdict": "not comparable", "reason": None}
        if p.get("verdict") == "error" or not (p.get("bounds") or {}).get("gdp"):
            row["reason"] = f"the pair errored: {p.get('error') or 'no bound recorded'}"
        else:
            row.update(verdict="pending", confidence=STEP_CONFIDENCE,
                       bound={"method": "step-gdp", "confidence": STEP_CONFIDENCE, "gdp": p["bounds"]["gdp"]})
        out.append(row)
    return out


def claim_check_reasons(cell: dict[str, Any]) -> list[str]:
    """Reasons from the cell's claim checks that need no family correction: every trace mismatch (exact, or a
    measured check at its own stated level) and every errored step-audit pair."""
    checks = cell.get("claim_checks") or {}
    cid = cell["id"]
    reasons = [f"cell {cid}: its trace does not match its claim: {m['message']}"
               for m in (checks.get("trace") or {}).get("mismatches") or []]
    reasons += [f"cell {cid}: its step audit's {p.get('pair')} pair errored: {p.get('error')}"
                for p in (checks.get("step_audit") or {}).get("pairs") or [] if p.get("verdict") == "error"]
    return reasons


def _unsound(cell: dict[str, Any], claim: dict[str, Any], eps_lb: float | None, bound: dict[str, Any]) -> str | None:
    """Why there is nothing sound to compare (no bound, no claim, an unsound method), or None."""
    if eps_lb is None:
        return "the attack gives no sound lower bound"
    details = (cell.get("details") or {}).get("epsilon") or {}
    if any(d.get("infinite") for d in details.values()) or claim.get("paper_accountant") == "none":
        return "no privacy claim (epsilon is infinite)"
    if bound.get("method") not in SOUND_METHODS:
        return f"bound method {bound.get('method')!r} is not a sound lower bound in general"
    return None


def _incomparable(cell: dict[str, Any], claim: dict[str, Any], bound: dict[str, Any]) -> str | None:
    """Why a sound bound does not test this claim (another relation or unit, no applicable accountant, a
    smaller delta than the claim's), or None."""
    b_rel, b_unit = bound.get("relation", "add-remove"), bound.get("unit", "example")
    c_rel, c_unit = claim.get("relation"), claim.get("unit")
    if b_rel != c_rel:
        return f"the claim is {c_rel}: the bound is on {b_rel} epsilon, which the claim does not bound"
    if b_unit != c_unit:
        return (f"the claim protects a {c_unit}; the bound's coin is one {b_unit}, not a whole {c_unit}"
                if c_unit == "user" else f"the claim protects a {c_unit}; the bound is per {b_unit}")
    if not any(v is not None for v in cell["epsilon"].values()):
        return "no accountant gives an epsilon for this claim"
    claim_delta = float(claim.get("delta") or 0.0)
    bound_delta = float(bound.get("delta", 0.0))
    if bound_delta < claim_delta:
        return f"the bound is at delta={bound_delta:g} < the claim's delta={claim_delta:g}"
    return None


def decide(comparison: dict[str, Any], family: int, slack: float) -> dict[str, Any]:
    """Settle a pending comparison with the bound at family-wise confidence over ``family`` comparisons."""
    bound = comparison.pop("bound", None)
    confidence = comparison.pop("confidence", None)
    if comparison["verdict"] != "pending":
        return comparison
    recomputed = family_bound(bound, family)
    if recomputed is None:  # a sound method without counts to recompute from: no correction possible
        recomputed, level = comparison["eps_lower_bound"], float(confidence)
    else:
        level = 1.0 - (1.0 - float(confidence)) / family
    comparison["gate_eps_lower_bound"] = recomputed
    comparison["gate_confidence"] = level
    comparison["verdict"] = "exceeds" if recomputed > (1.0 + slack) * comparison["epsilon"] else "consistent"
    return comparison


def gate_cells(cells: Sequence[dict[str, Any]], config: GateConfig,
               roles: dict[str, tuple[str | None, bool]] | None = None, *, family: int | None = None
               ) -> list[dict[str, Any]]:
    """Every cell's gate: its comparisons (bounds at family-wise confidence over all cells) and reasons.

    ``roles`` maps a defense label to (primary attack label or None, is a positive control). The family is every
    pending comparison of ``cells`` (their primary bounds and their own step audits' pairs), or ``family`` when
    that is larger (a cell judged as if it sat in a larger suite: ``privaudit gate-power``)."""
    roles = roles or {}
    pending = []
    for cell in cells:
        error = (cell.get("details") or {}).get("error")
        primary, _ = roles.get(cell.get("defense"), (None, False))
        pending.append(None if error else [compare(cell, label, a, config.epsilon_slack, primary)
                                           for label, a in cell["attacks"].items()] + step_comparisons(cell))
    family = max(1, sum(c["verdict"] == "pending" for cs in pending if cs for c in cs), family or 0)
    gates = []
    for cell, comparisons in zip(cells, pending):
        if comparisons is None:
            reasons = [f"cell {cell['id']} errored: {cell['details']['error']}"] if config.fail_on_error else []
            gates.append({"status": "fail" if reasons else "pass", "reasons": reasons, "comparisons": []})
            continue
        comparisons = [decide(c, family, config.epsilon_slack) for c in comparisons]
        noise = released_noise_checks(cell, comparisons)
        _, control = roles.get(cell.get("defense"), (None, False))
        gate = _control_gate(cell, comparisons, noise) if control else _claim_gate(cell, comparisons, family, config,
                                                                                  noise)
        gates.append({**gate, "released_noise": noise})
    return gates


def released_noise_checks(cell: dict[str, Any], comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The released-noise check (:mod:`privaudit.attacks.released_noise`) of every gated white-box trajectory
    comparison, recomputed from the attack's saved residual counts against the gradient release's claimed
    multiplier re-derived from the cell's saved claim (never the attack's own record of it). A check without
    residual counts (evidence from before the check existed) or without a claimed multiplier says why, unjudged."""
    from privaudit.accountants.events import event_from_dict
    from privaudit.attacks.noise_structure import structure_checks
    from privaudit.attacks.released_noise import released_noise_check
    from privaudit.attacks.bounds.trajectory import step_multiplier

    out = []
    claim = (cell.get("details") or {}).get("claim") or {}
    for c in comparisons:
        if c.get("method") != "white-box-trajectory" or c["verdict"] not in ("consistent", "exceeds"):
            continue
        attack = cell["attacks"].get(c["attack"]) or {}
        counts = (((attack.get("details") or {}).get("trajectory_bound") or {}).get("counts")) or {}
        if claim.get("event") is None:
            out.append({"attack": c["attack"], "rejected": False, "unjudged": "the cell's claim has no event"})
            continue
        z = step_multiplier(event_from_dict(claim["event"]), claim.get("params"))
        check = released_noise_check(counts, z)
        out.append({"attack": c["attack"], **(check or {"rejected": False,
                                                        "unjudged": "no released-noise residuals recorded"}),
                    **structure_checks(counts, z)})
    return out


def noise_failures(noise: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """(check name, one line) for every failing released-noise check: the pooled one
    (:mod:`privaudit.attacks.released_noise`), independence across steps and coordinates, and each tensor
    (:mod:`privaudit.attacks.noise_structure`)."""
    from privaudit.attacks.noise_structure import describe_failures
    from privaudit.attacks.released_noise import describe_check

    out = []
    for n in noise:
        if n["rejected"]:
            out.append(("released noise", f"{n['attack']}: {describe_check(n)}: its release adds less noise than "
                                          "its claim states"))
        out += [(name, f"{n['attack']}: {text}") for name, text in describe_failures(n)]
    return out


def noise_levels(noise: Sequence[dict[str, Any]]) -> tuple[int, list[str]]:
    """(how many released-noise checks were judged, each at the level NOISE_ALPHA; why each other was not)."""
    judged, unjudged = 0, []
    for n in noise:
        for check in (n, n.get("independence") or {}, n.get("tensors") or {}, n.get("coordinates") or {}):
            if "unjudged" in check:
                unjudged.append(check["unjudged"])
            elif check:
                judged += 1
    return judged, unjudged


def _control_gate(cell: dict[str, Any], comparisons: list[dict[str, Any]],
                  noise: list[dict[str, Any]]) -> dict[str, Any]:
    """A positive control's gate: caught (passes) when a gated comparison exceeds its claim, its trace does not
    match it or its release added less noise than it claims; else it fails (the gate has no power at this suite's
    size)."""
    caught = [c for c in comparisons if c["verdict"] == "exceeds"]
    for c in caught:
        c["verdict"] = "caught"
    trace = ((cell.get("claim_checks") or {}).get("trace") or {}).get("mismatches") or []
    released = {name for name, _ in noise_failures(noise)}
    by = sorted({c["attack"] for c in caught} | ({"trace"} if trace else set()) | released)
    reasons = [] if by else [
        f"cell {cell['id']}: positive control not caught: no gated bound exceeds its false claim (epsilon "
        f"{_fmt(next((c['epsilon'] for c in comparisons if c['epsilon'] and c.get('quantity') != 'mu'), None))}), "
        "its trace matches it and its release's measured noise does not refute it; the gate has no power at this "
        "suite's size"]
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "comparisons": comparisons, "control": True,
            "caught": bool(by), "caught_by": by}


def _claim_gate(cell: dict[str, Any], comparisons: list[dict[str, Any]], family: int,
                config: GateConfig, noise: list[dict[str, Any]]) -> dict[str, Any]:
    """A claim's gate: a reason for every gated bound above its claim, every claim-check finding, every release
    whose measured noise refutes the claim's and, with ``max_auc``, every attack reaching it."""
    cid, claim = cell["id"], cell["claim"] or {}
    reasons = []
    for c in comparisons:
        if c["verdict"] != "exceeds":
            continue
        level = f"({100 * c['gate_confidence']:.4g}% confidence, family-wise over {family})"
        if c.get("quantity") == "mu":
            reasons.append(f"cell {cid}: {c['attack']}'s sound lower bound mu_lb = {_fmt(c['gate_eps_lower_bound'])} "
                           f"{level} exceeds the per-step claim mu = {_fmt(c['epsilon'])} (1/z: the step its "
                           "accountant composes)")
        else:
            target = ("the smallest applicable epsilon" if c.get("claim_epsilon") is None else
                      f"the claim's gradient release's epsilon (the whole claim's: {_fmt(c['claim_epsilon'])})")
            reasons.append(f"cell {cid}: {c['attack']}'s sound lower bound eps_lb = {_fmt(c['gate_eps_lower_bound'])} "
                           f"{level} exceeds {target} {_fmt(c['epsilon'])} ({c['accountant']}, "
                           f"{claim.get('relation')}, per {claim.get('unit')}, delta={claim.get('delta'):.3g})")
    reasons += claim_check_reasons(cell)
    reasons += [f"cell {cid}: {text}" for _, text in noise_failures(noise)]
    private = not any(d.get("infinite") for d in ((cell.get("details") or {}).get("epsilon") or {}).values())
    if config.max_auc is not None and private and claim.get("paper_accountant") != "none":
        for label, a in cell["attacks"].items():
            if a.get("auc") is not None and a["auc"] >= config.max_auc:
                reasons.append(f"cell {cid}: {label} reaches AUC {a['auc']:.4g} >= gate.max_auc {config.max_auc:g}")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "comparisons": comparisons}


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


def _caught_note(cell: dict[str, Any]) -> str:
    """How a positive control was caught: its largest caught comparison (bound over claim) and its trace."""
    caught = [c for c in cell["gate"]["comparisons"] if c["verdict"] == "caught"]
    parts = []
    if caught:
        best = max(caught, key=lambda c: c["gate_eps_lower_bound"] / c["epsilon"])
        stat = "mu_lb" if best.get("quantity") == "mu" else "eps_lb"
        parts.append(f"{stat} = {_fmt(best['gate_eps_lower_bound'])} > claimed {_fmt(best['epsilon'])} "
                     f"({best['attack']})")
    if "trace" in cell["gate"].get("caught_by", ()):
        parts.append("its trace does not match its claim")
    noise = cell["gate"].get("released_noise") or []
    for n in noise:
        if n["rejected"]:
            parts.append(f"its release added {n['std_ratio']:.3g} of the noise it claims ({n['attack']}, at most "
                         f"{n['std_ratio_upper']:.3g} at {100 * (1 - n['alpha']):.6g}% confidence)")
    parts += [text for name, text in noise_failures(noise) if name != "released noise"]
    return f"positive control {cell['id']} caught, as expected: " + "; ".join(parts)


def suite_gate(cells: Sequence[dict[str, Any]], sensitivity: Sequence[dict[str, Any]],
               sensitivity_config: SensitivityConfig | None, config: GateConfig,
               errors: Sequence[str] = (), missing: Sequence[str] = ()) -> dict[str, Any]:
    """The report's gate: status ``pass``/``fail``, every reason (the cells', then ``missing`` -- the grid's cells
    without a result --, the sensitivity verdicts', then ``errors``), and notes on how to read it."""
    reasons: list[str] = [r for c in cells for r in c["gate"]["reasons"]] + list(missing)
    s_reasons, notes = sensitivity_gate(sensitivity, sensitivity_config, config)
    reasons += s_reasons
    reasons += list(errors)
    gated = ("consistent", "exceeds", "caught")
    comparisons = [c for cell in cells for c in cell["gate"]["comparisons"] if c["verdict"] in gated]
    secondary = [c for cell in cells for c in cell["gate"]["comparisons"] if c["verdict"] == "secondary"]
    skipped = [c for cell in cells for c in cell["gate"]["comparisons"]
               if c["verdict"] == "not comparable" and c["eps_lower_bound"] is not None
               and c["reason"] != "no privacy claim (epsilon is infinite)"]
    fwer = None
    traced = sum(bool((c.get("claim_checks") or {}).get("trace")) for c in cells)
    released, unjudged = noise_levels([n for c in cells for n in c["gate"].get("released_noise") or []])
    if comparisons:
        from privaudit.accountants.trace import TRACE_ALPHA
        from privaudit.attacks.released_noise import NOISE_ALPHA

        level = min(c["gate_confidence"] for c in comparisons)
        fwer = len(comparisons) * (1 - level) + traced * TRACE_ALPHA + released * NOISE_ALPHA
        notes.append(f"{len(comparisons)} gated bound-versus-claim comparisons (the suite's primary statistics and "
                     f"the cells' own step audits); each bound is recomputed at {100 * level:.4g}% confidence "
                     f"(Bonferroni over the {len(comparisons)})"
                     + (f", and {traced} training traces checked with measured checks at {TRACE_ALPHA:g} each"
                        if traced else "")
                     + (f"{' and' if traced else ', and'} {released} released-noise checks (pooled, across steps, "
                        f"per tensor) at {NOISE_ALPHA:g} each" if released else "")
                     + f": family-wise error rate {100 * fwer:.3g}%, the chance that a true claim fails this gate")
    if unjudged:
        notes.append(f"{len(unjudged)} released-noise checks not judged: " + "; ".join(sorted(set(unjudged))))
    controls = [c for c in cells if c["gate"].get("control")]
    notes += [_caught_note(cell) for cell in controls if cell["gate"]["caught"]]
    if secondary:
        notes.append(f"{len(secondary)} secondary bounds reported at their own confidence, not gated")
    if skipped:
        notes.append(f"{len(skipped)} bounds were not compared with their claim (see each cell's comparisons "
                     "for the reason)")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "notes": notes,
            "family_wise_error": fwer, "controls": len(controls),
            "controls_caught": sum(bool(c["gate"].get("caught")) for c in controls)}


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


def judge_run(cells: Sequence[dict[str, Any]], sensitivity: Sequence[dict[str, Any]],
              step_results: Sequence[dict[str, Any]], settings: GateSettings,
              errors: Sequence[str] = ()) -> dict[str, Any]:
    """The gate of a whole run, the one implementation the runner and ``privaudit gate`` share: each cell's gate
    (set as ``cell["gate"]``), then the suite's: the cells', every grid cell without a result (a run of part of the
    suite does not pass its gate), the sensitivity verdicts and the step audits (strict expectations: see
    :func:`sensitivity_gate` and :func:`privaudit.audit.step.gate.step_gate`) and ``errors``."""
    from privaudit.audit.step.gate import step_gate

    for cell, gate in zip(cells, gate_cells(cells, settings.config, settings.roles)):
        cell["gate"] = gate
    have = {c.get("id") for c in cells}
    missing = [f"cell {cid}: no result (it has not run in this output directory); the gate judges the whole "
               "suite" for cid in settings.grid if cid not in have]
    gate = suite_gate(cells, sensitivity, settings.sensitivity, settings.config, errors, missing)
    step_reasons, step_notes = step_gate(list(step_results), settings.step_audit)
    gate["reasons"] += step_reasons
    gate["notes"] += step_notes
    gate["status"] = "fail" if gate["reasons"] else "pass"
    return gate
