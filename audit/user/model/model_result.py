"""The result of a model audit (:class:`ModelAudit`): what was audited, the claim and verdict, each attack's report
object, and its rendering as ``report.json``, a report and the files
:func:`privaudit.audit.user.model.model_audit.audit_model` writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from privaudit.audit.user.claim import UserClaim, Verdict


#: The verdict's test: the first of these that runs (fixed before any score is read).
VERDICT_ORDER = ("canary", "lira", "rmia", "loss")


REPORT_FILES = ("report.json", "report.md", "report.html", "roc.png", "histogram.png")


@dataclass(frozen=True)
class ModelAudit:
    """The result of :func:`~privaudit.audit.user.model.model_audit.audit_model`: what was audited, the claim and
    verdict, and each attack's report object by name (``auc``, ``advantage``, ``tpr_at_fpr``, ``eps_lower_bound``,
    ``ceiling``,
    ``eps_lb_method``, ...)."""

    factory: str
    train_fn: str | None
    inputs: dict[str, str]
    attacks: dict[str, dict[str, Any]]
    claim: UserClaim | None = None
    verdict: Verdict | None = None
    verdict_attack: str | None = None
    canary: dict[str, Any] | None = None
    results: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """``report.json``'s content."""
        return {"factory": self.factory, "train_fn": self.train_fn, "inputs": dict(self.inputs),
                "claim": None if self.claim is None else self.claim.to_dict(),
                "verdict": None if self.verdict is None else self.verdict.verdict,
                "verdict_detail": None if self.verdict is None else self.verdict.to_dict(),
                "verdict_attack": self.verdict_attack, "canary": self.canary, "attacks": self.attacks}

    def report(self) -> Any:
        """The :class:`privaudit.audit.user.report.UserReport` of this audit."""
        from privaudit.attacks.metrics import SortedScores
        from privaudit.audit.user.report import Row, UserReport

        rows, curves, hists = [], {}, {}
        for name, s in self.attacks.items():
            extra = {} if s.get("eps_lb_mechanism") is None else {
                "ε vs the claim's mechanism": f"{s['eps_lb_mechanism']:.4g}",
                "its ceiling": f"{s['mechanism_ceiling']:.4g}"}
            rows.append(Row(name, s, s["eps_lower_bound"], s["ceiling"], s["eps_lb_method"], extra))
            result = self.results[name]
            sides = SortedScores.of(result.scores[result.membership], result.scores[~result.membership])
            curves[name], hists[name] = sides.roc(), sides.histogram()
        notes = [f"Verdict from {self.verdict_attack} (the first of {', '.join(VERDICT_ORDER)} that ran, fixed "
                 "before any score)."] if self.verdict_attack else []
        if "canary" in self.attacks:
            notes.extend(_canary_notes(self.canary, self.attacks["canary"]))
        return UserReport("privaudit model audit", dict(self.inputs),
                          None if self.claim is None else self.claim.to_dict(),
                          None if self.verdict is None else self.verdict.to_dict(), rows, curves, hists, notes)

    def files(self) -> dict[str, bytes]:
        """Every file :func:`~privaudit.audit.user.model.model_audit.audit_model` writes into ``out``: the report's, and
        ``<attack>/scores.npz`` and ``result.json`` for each attack."""
        from privaudit.audit.user.report import files
        from privaudit.core.io import strict, to_json

        out = {"report.json": (to_json(strict(self.to_dict())) + "\n").encode("utf-8"), **files(self.report())}
        for name, result in self.results.items():
            out.update({f"{name}/{k}": v for k, v in result.files().items()})
        return out


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _canary_notes(canary: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """The report's lines on the canary runs: the design, the claim judged, the heuristic estimates (labelled) and
    the bound against the number of runs."""
    if canary.get("design") != "crafted":
        return ["canary: scores are runs of your training function with and without one canary "
                f"({canary}); members / non-members count runs, not examples."]
    pair = canary.get("pair_claim")
    h = canary["heuristic"]
    notes = [f"canary (final-model audit, crafted): D = the first {canary['pair_size']} members, D' = D plus a canary "
             f"(input coordinate {canary['coordinate']} at {canary['value']:.3g}, label {canary['label']}); every "
             f"run starts from one worst-case initialisation (pretrained on D, parameters x{canary['scale']:g}) and "
             "is scored on its final weights only; members / non-members count runs, not examples.",
             "canary: judged against " + (f"the pair's own claim, epsilon {pair['epsilon']:.4g} ({pair['source']})"
                                          if pair else "your claim's epsilon (no accountant returned by the runs: "
                                          "the Clopper-Pearson bound, which holds for any mechanism)") + ".",
             f"canary, heuristic (not a bound): GDP epsilon of the Clopper-Pearson rates {_num(h['gdp_epsilon'])}; "
             f"point estimate mu_hat = {h['mu_hat']:.3g} (epsilon {_num(h['mu_hat_epsilon'])} if the curve is "
             "Gaussian)."]
    curve = "; ".join(f"{p['runs_per_side']}: {p['eps_lb']:.3g}" + (
        "" if p["eps_lb_mechanism"] is None else f" / {p['eps_lb_mechanism']:.3g}") for p in s["runs_curve"])
    notes.append("canary, bound against runs a side (Clopper-Pearson" + (" / vs the claim's mechanism"
                 if s["runs_curve"][-1]["eps_lb_mechanism"] is not None else "") + ", each at the audit's "
                 f"confidence on its own): {curve}.")
    return notes


def output_names(attacks: Sequence[str]) -> list[str]:
    """The files :meth:`ModelAudit.files` writes for ``attacks``."""
    return [*REPORT_FILES, *(f"{a}/{f}" for a in attacks for f in ("scores.npz", "result.json"))]
