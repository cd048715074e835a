"""The step audits' part of the CI gate: reasons to fail and notes, from the results and the suite's
``[step_audit]`` expectations.
"""

from __future__ import annotations

from typing import Any, Mapping


def step_gate(results: list[dict[str, Any]], config: Any) -> tuple[list[str], list[str]]:
    """Reasons to fail and notes. Strict: an undocumented refutation fails; a documented one (``expect``) is a
    note, and one that no longer reproduces fails (the auditor lost power); a pair that errored fails, named."""
    if config is None:
        return [], []
    reasons, notes = [], []
    seen = {r["defense"] for r in results}
    for name in config.defenses:
        if name not in seen:
            reasons.append(f"step audit of {name}: no result was returned")
    for r in results:
        name, verdict = r["defense"], r.get("verdict")
        expected = config.expect.get(name, "not refuted")
        errored = [p for p in r.get("pairs") or [] if p.get("verdict") == "error"]
        reasons += [f"step audit of {name}: pair {p.get('pair')} errored: {p.get('error')}" for p in errored]
        if verdict == "error" and not errored:
            reasons.append(f"step audit of {name}: errored (no pair finished)")
        if verdict == "refuted":
            text = _refutation_text(name, r)
            if expected == "refuted":
                notes.append(text + "; expected by the suite (documented broken claim)")
            else:
                reasons.append(text)
        elif expected == "refuted":
            reasons.append(f"step audit of {name}: expected refuted, found {verdict} (power "
                           f"{r.get('power') or 0:.2f}): the auditor lost power; if the claim was fixed, update the "
                           "suite's step_audit.expect")
        elif verdict not in ("not refuted", "error"):
            reasons.append(f"step audit of {name}: unknown verdict {verdict!r}")
    return reasons, notes


def _refutation_text(name: str, r: Mapping[str, Any]) -> str:
    """The line naming a refuted per-step claim and every refuting pair's bound and witness."""
    refuting = [p for p in r["pairs"] if p.get("verdict") == "refuted"]
    pure = bool(r["claim"].get("pure"))
    stat, claimed = ("eps_lb", "epsilon_lower") if pure else ("mu_lb", "mu_lower")
    def one(p: Mapping[str, Any]) -> str:
        if p.get("support_refuted"):
            from privaudit.audit.step.release import support_summary

            text = f"{p['pair']} pair: floating-point support ({support_summary(p)})"
        else:
            text = f"{p['pair']} pair {stat} {p[claimed]:.3g}"
        return text + (f", witness {p['witness']}" if p.get("witness") else "")

    where = "; ".join(one(p) for p in refuting)
    what = f"eps = {r['claim']['epsilon']:.3g} (pure DP)" if pure else f"mu = {r['claim']['mu']:.3g}"
    return f"step audit of {name}: per-step claim {what} refuted by measurement ({where})"
