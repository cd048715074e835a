"""Step audits in words: one line per audit (:func:`summary_line`) and the reports' table (:func:`step_rows`,
with its headers and explanation).
"""

from __future__ import annotations

from typing import Any, Mapping

from privaudit.audit.step.pairs import StepAudit


def summary_line(r: StepAudit) -> str:
    """The audit in one line: the claim, the measured bounds, the power and the verdict."""
    c = r.claim
    if r.verdict == "error":
        failed = "; ".join(f"{p['pair']} pair: {p.get('error')}" for p in r.pairs if p.get("verdict") == "error")
        return f"{r.defense}: error ({failed or 'no pair finished'})"
    if c.get("pure"):
        return (f"{r.defense} ({r.relation}): per-release claim eps = {c['epsilon']:.3g} (pure DP, delta 0; "
                f"canonical mu {c['mu']:.3f}); measured eps_lb = {r.epsilon_lower:.3g} ({r.best_pair} pair), "
                f"mu_lb = {r.mu_lower:.3f}; power (eps) {r.power:.2f}: {r.verdict}")
    return (f"{r.defense} ({r.relation}): per-step claim mu = {c['mu']:.3f} (eps {c['epsilon']:.3g} at delta "
            f"{c['delta']:g}); measured mu_lb = {r.mu_lower:.3f} ({r.best_pair} pair), eps_lb = "
            f"{r.epsilon_lower:.3g}; power {r.power:.2f}: {r.verdict}")


STEP_HEADERS = ["defense", "relation", "pair", "claim μ", "claim ε", "μ_lb", "ε_lb", "power", "verdict", "expected",
                "witness"]


def step_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """One row per audited pair for the Markdown / HTML reports."""
    expect = ((report.get("suite") or {}).get("step_audit") or {}).get("expect") or {}

    def f(x: Any) -> str:
        return "-" if x is None else (f"{x:.3g}" if isinstance(x, float) else str(x))

    rows = []
    for r in report.get("step_audit") or []:
        for p in r["pairs"]:
            rows.append([r["defense"], r["relation"], p["pair"], f(r["claim"]["mu"]), f(r["claim"]["epsilon"]),
                         f(p.get("mu_lower")), f(p.get("epsilon_lower")), f(p.get("power", p.get("power_mu"))),
                         p["verdict"] if p["verdict"] != "error" else f"error: {p.get('error')}",
                         expect.get(r["defense"], "not refuted"), p.get("witness") or "-"])
    return rows


STEP_EXPLAIN = ("Each defense's own privatised step on a neighbouring pair of batches with shared non-noise "
                "randomness, run on each side with many noise draws and scored by the optimal (likelihood-ratio) "
                "test. claim μ = 1 / z: the per-step Gaussian privacy the accountant assumes (claimed sensitivity "
                "over noise std); μ_lb (GDP) and ε_lb (Clopper–Pearson at the claim's δ) are sound lower bounds; "
                "power = μ_lb / claim μ. A bound above the claim refutes it (witness attached). Pairs: canary = the "
                "worst case the claimed sensitivity allows, extreme = a Dirac-like image, witness = the "
                "sensitivity search's best pair. ALM (one release of the noised head, pure DP): claim ε is the "
                "per-release ε at δ = 0, ε_lb the Clopper–Pearson bound at δ = 0, power = ε_lb / claim ε (the "
                "verdict compares ε only), claim μ the tightest μ of its canonical pair (one coordinate shifted "
                "by the sampled sensitivity).")
