"""The result of a score audit (:class:`ScoreAudit`): the scores, the bound and its ceiling, the claim and verdict,
and its rendering as ``report.json``, a report and the files
:func:`~privaudit.audit.user.scores.score_audit.audit_scores` writes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privaudit.attacks import metrics
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound
from privaudit.audit.user.claim import UserClaim, Verdict
from privaudit.core.errors import ConfigError
from privaudit.audit.user.scores.score_bounds import ASSUMPTIONS


#: What :meth:`ScoreAudit.write` writes into ``out`` (beside the manifest of :mod:`privaudit.audit.user.out_dir`).
FILES = ("report.json", "scores.npz", "report.md", "report.html", "roc.png", "histogram.png")


@dataclass(frozen=True)
class ScoreAudit:
    """The result of :func:`~privaudit.audit.user.scores.score_audit.audit_scores`: each side's scores (sorted
    ascending), the design, the sound (eps, delta) lower bound and its ceiling, the attack's summary (AUC, advantage,
    balanced accuracy, TPR at low FPR, counts), its ROC (at most a few thousand vertices), score histograms, where the
    inputs came from,
    and with a claim, the verdict (and the mechanism bound when the claim has a mechanism)."""

    members: np.ndarray
    nonmembers: np.ndarray
    design: str
    bound: EpsilonLowerBound
    summary: dict[str, Any]
    roc: metrics.Roc
    inputs: dict[str, str] = field(default_factory=dict)
    ceiling: float = 0.0
    histogram: dict[str, list[float]] = field(default_factory=dict)
    claim: UserClaim | None = None
    verdict: Verdict | None = None
    mechanism: EpsilonLowerBound | None = None
    mechanism_ceiling: float | None = None
    warnings: tuple[str, ...] = ()
    inclusion_probability: float = 0.5

    @property
    def auc(self) -> float:
        return float(self.summary["auc"])

    @property
    def advantage(self) -> float:
        """max over thresholds of TPR - FPR (the "attacker advantage" of TF-Privacy)."""
        return float(self.summary["advantage"])

    @property
    def tpr_at_fpr(self) -> dict[str, float]:
        """TPR per FPR target, keyed as in the report (``"0.01"``); :meth:`tpr_at` takes the target as a number."""
        return dict(self.summary["tpr_at_fpr"])

    def tpr_at(self, fpr: float) -> float:
        """The TPR at FPR target ``fpr`` (0.001, 0.01 or 0.1)."""
        key = metrics.fpr_key(fpr)
        if key not in self.summary["tpr_at_fpr"]:
            raise ConfigError(f"fpr: {fpr!r} is not a computed target; accepted: {', '.join(self.summary['tpr_at_fpr'])}")
        return float(self.summary["tpr_at_fpr"][key])

    @property
    def eps_lower_bound(self) -> float:
        return self.bound.epsilon

    @property
    def assumption(self) -> str:
        if self.inclusion_probability == 0.5:
            return ASSUMPTIONS[self.design]
        p = f"{self.inclusion_probability:g}"
        return (f"one-run design: valid only if each of the m scored examples was included in the one training run "
                f"independently with probability {p} (as stated) and the scores were computed without looking at "
                "which were included; the bound is on a seeded subsample on which membership is a fair coin")

    @property
    def ceiling_design(self) -> str:
        """Which guesses the ceiling is for (it differs between designs on the same data)."""
        if self.design == "multi-run":
            return "multi-run: no error among the counted runs"
        c = self.bound.counts
        return f"one-run: best of {int(c.get('grid_size', 1))} (k+, k-) pairs, every guess right"

    def to_dict(self) -> dict[str, Any]:
        """The report object (``report.json``): the usual attack keys first, then the claim, verdict and ceiling,
        the bound, the ROC and the histograms."""
        s = self.summary
        return {
            "auc": s["auc"], "tpr_at_fpr": s["tpr_at_fpr"], "eps_lower_bound": self.bound.epsilon,
            "eps_lb_method": self.bound.label, "ceiling": self.ceiling, "ceiling_design": self.ceiling_design,
            "n_members": s["n_members"],
            "n_nonmembers": s["n_nonmembers"], "confidence": self.bound.confidence, "delta": self.bound.delta,
            "design": self.design, "inclusion_probability": self.inclusion_probability,
            "assumption": self.assumption, "advantage": s["advantage"],
            "balanced_accuracy": s["balanced_accuracy"], "fpr_resolution": s["fpr_resolution"],
            "fpr_resolved": s["fpr_resolved"],
            "claim": None if self.claim is None else self.claim.to_dict(),
            "verdict": None if self.verdict is None else self.verdict.verdict,
            "verdict_detail": None if self.verdict is None else self.verdict.to_dict(),
            "mechanism_bound": None if self.mechanism is None else self.mechanism.to_dict(),
            "mechanism_ceiling": self.mechanism_ceiling,
            "bound": self.bound.to_dict(), "inputs": dict(self.inputs), "warnings": list(self.warnings),
            "roc": {"fpr": self.roc.fpr.tolist(), "tpr": self.roc.tpr.tolist()}, "histogram": self.histogram,
        }

    def report(self) -> Any:
        """The :class:`privaudit.audit.user.report.UserReport` of this audit."""
        from privaudit.audit.user.report import Row, UserReport

        rows = [Row(f"scores ({self.design})", self.summary, self.bound.epsilon, self.ceiling, self.bound.label)]
        if self.mechanism is not None:
            rows.append(Row("scores vs the claim's mechanism", self.summary, self.mechanism.epsilon,
                            self.mechanism_ceiling, self.mechanism.label))
        return UserReport("privaudit score audit", dict(self.inputs),
                          None if self.claim is None else self.claim.to_dict(),
                          None if self.verdict is None else self.verdict.to_dict(), rows,
                          {"scores": self.roc}, {"scores": self.histogram},
                          [*(f"Warning: {w}" for w in self.warnings), f"Assumption: {self.assumption}."])

    def files(self) -> dict[str, bytes | memoryview]:
        """Every file :meth:`write` writes, as bytes (``scores.npz``: each side sorted, uncompressed)."""
        from privaudit.audit.user.report import files
        from privaudit.core.io import strict, to_json

        buffer = io.BytesIO()
        np.savez(buffer, members=self.members, nonmembers=self.nonmembers)
        return {"report.json": (to_json(strict(self.to_dict())) + "\n").encode("utf-8"),
                "scores.npz": buffer.getbuffer(), **files(self.report())}

    def write(self, out: str | Path, *, force: bool = False) -> dict[str, Path]:
        """Write :data:`FILES` into ``out`` atomically, all or nothing; files of the user's are never replaced
        without ``force`` (:mod:`privaudit.audit.user.out_dir`)."""
        from privaudit.audit.user import out_dir

        need = 2 * out_dir.input_bytes(self.members, self.nonmembers) + out_dir.REPORT_BYTES
        out_dir.prepare(out, FILES, force=force, need=need)
        return out_dir.write(out, self.files())
