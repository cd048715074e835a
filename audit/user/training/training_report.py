"""The files of a training audit (:mod:`privaudit.audit.user.training.training_audit`): ``report.json``, ``trace.json``
and the one-page report of :mod:`privaudit.audit.user.report` (the canaries' row, its ROC and histograms, one note per
finding, the neighbours' quantities and the cost)."""

from __future__ import annotations

from typing import Any


def notes(audit: Any) -> list[str]:
    """The report's lines: the findings one per check (their steps folded), the canaries' bounds, the sizes replayed,
    the cost."""
    out = [f"{f['check']}: {f['message']}" for f in audit.folded] or [
        "every check passed: the trace against the accountant, the neighbours replayed, the released noise"]
    c = audit.canary
    out.append(f"canaries: {c['canaries']} Dirac gradient canaries over {c['steps']} releases; trajectory bound "
               f"{_num(c['eps_lb_trajectory'])} ({_num(c['ratio_to_claim'])} of the claim), one-run bound "
               f"{_num(c['eps_lb_one_run'])}, ceiling {'at least ' if c.get('ceiling_capped') else ''}"
               f"{_num(c['ceiling'])}; on a correct run the bound approaches {_num(c.get('eps_bound_at_claim'))} (the "
               f"optimistic PLD epsilon at the claim's noise; reached: {_num(c.get('ratio_to_bound_at_claim'))}); the "
               f"claim's epsilon by accountant: " + ", ".join(f"{k} {_num(v)}" for k, v in audit.claim.accountants.items()))
    out.append(clipping_note(audit.trace))
    out += [f"rounding ({r['check']}): {r['message']}" for r in audit.trace.get("rounding") or []]
    out += other_queries_note(audit.trace)
    sizes = sorted(audit.sizes, key=int)
    out.append(f"neighbours: the recipe replayed (first releases) at sizes {sizes[0]}..{sizes[-1]}")
    r = getattr(audit, "release_replay", None) or {}
    if r.get("judged"):
        moved = [f"{name}: moved by {_num(v['distance'])} times the normaliser, {_num(v['ratio'])} of the clip "
                 f"{_num(v['sensitivity'])}" for name, v in (r.get("neighbours") or {"add": r}).items()
                 if isinstance(v, dict)]
        out.append("first release replayed with one record added and one removed (same batch and noise); "
                   + "; ".join(moved))
        out += list(r.get("notes", ()))
    elif r.get("note"):
        out.append(r["note"])
    k = audit.costs
    if k.get("training_alone_s"):
        out.append(f"cost: audit {k['audit_s']:.3g} s (audited run {k['audited_run_s']:.3g} s, {k['replays']} replays "
                   f"of the first releases {k['replays_s']:.3g} s, bounds and checks {k['analysis_s']:.3g} s); "
                   f"training alone {k['training_alone_s']:.3g} s")
    return out


def clipping_note(trace: dict[str, Any]) -> str:
    """How many releases the clipping was observed on (the trace's ``unit_norm_max``), how, and its largest value."""
    norms = list(trace.get("unit_norm_max") or [])
    seen = [float(v) for v in norms if v is not None]
    if not seen:
        return (f"clipping as applied: not observed on any of the {len(norms)} releases (no per-sample gradient, "
                "fast-clipping coefficient or declared unit was seen): a clip above the claimed one shows only in "
                "the first release's replay")
    slack = max((float(s) for s in trace.get("unit_norm_slack") or [] if s is not None), default=None)
    how = ("" if slack is None else
           f" (fast gradient clipping: through the code's coefficients, relative slack {slack:g})")
    return (f"clipping as applied: observed on {len(seen)} of {len(norms)} releases{how}; the largest clipped unit "
            f"{max(seen):.7g}, the clip {float(trace['clip']):.7g}")


def other_queries_note(trace: dict[str, Any]) -> list[str]:
    """The Gaussian queries the releases noised beside the gradient (an adaptive clip's count): those composed into
    the releases' multipliers, with their std and measured sensitivity, and those not judged, with why."""
    other = trace.get("other_queries") or []
    out = []
    for judged in (True, False):
        group = [q for q in other if bool(q.get("judged")) == judged]
        if not group:
            continue
        names = sorted({str(q["name"]) for q in group})
        stds = sorted({float(q["std"]) for q in group})
        sens = [float(q["sensitivity"]) for q in group if q.get("sensitivity") is not None]
        head = (f"other Gaussian queries: the releases also noised {', '.join(names)} ({len(group)} draws, "
                f"{sum(int(q['values']) for q in group)} values, std {_num(stds[0])}"
                + (f" to {_num(stds[-1])}" if len(stds) > 1 else ""))
        if judged:
            low = min(float(z) for z in trace.get("multiplier") or [0.0])
            out.append(head + f", sensitivity as one probe unit moved it up to {_num(max(sens + [0.0]))}): composed "
                              f"with the gradient into each release's multiplier (smallest {_num(low)}), the "
                              "multiplier the trace checks against the claim")
        else:
            out.append(head + "): not judged, no attribute of the optimizer received the draw, so its sensitivity "
                              "was not measured; the trace checks the gradient's noise against the claim")
    return out


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def report_files(audit: Any) -> dict[str, bytes]:
    """Every file ``--out`` receives."""
    from privaudit.attacks.metrics import SortedScores
    from privaudit.audit.user.report import Row, UserReport, files
    from privaudit.core.io import strict, to_json

    result = audit.result
    s = result.summary()
    row = Row("gradient-canary", s, audit.verdict.eps_lower_bound, audit.verdict.ceiling, audit.verdict.method,
              {"one-run bound": _num(audit.canary["eps_lb_one_run"])})
    sides = SortedScores.of(result.scores[result.membership], result.scores[~result.membership])
    report = UserReport("privaudit training audit", dict(audit.inputs), audit.claim.to_dict(),
                        audit.verdict.to_dict(), [row], {"gradient-canary": sides.roc()},
                        {"gradient-canary": sides.histogram()}, notes(audit))
    return {"report.json": (to_json(strict(audit.to_dict())) + "\n").encode("utf-8"),
            "trace.json": (to_json(strict(audit.trace)) + "\n").encode("utf-8"), **files(report)}
