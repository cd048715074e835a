"""Audit scores a user already has: ROC, AUC, TPR at low FPR and a sound epsilon lower bound.

The input is one score per example, higher meaning "member" (or losses / logits that
:mod:`privaudit.audit.score_inputs` turns into scores), for members and non-members. The metrics are those of
:mod:`privaudit.attacks.metrics` (ROC with no points dropped; TPR at FPR 0.1%, 1%, 10% read at the last ROC point
within the budget). The lower bound is one of :mod:`privaudit.attacks.bounds`, chosen by the *design* that produced
the scores, because only the design makes a bound sound:

* ``design="one-run"`` (default; Steinke, Nasr & Jagielski 2023, main theorem): the members and
  non-members are m candidates of **one** training run, **each included independently by a fair coin**
  (probability 1/2), like privaudit's audit pool. The auditor guesses "member" for the k+ highest
  scores and "non-member" for the k- lowest; (k+, k-) is searched over a fixed grid of 8 pairs with a
  Bonferroni correction (:func:`privaudit.attacks.bounds.one_run_bound_search`), so the bound holds at
  confidence 1 - beta. If the split was *not* a fair coin per example (e.g. a model's train set against
  its held-out test set), the theorem does not apply: ROC and AUC still describe the attack, but the
  epsilon is not a lower bound on the training algorithm's epsilon.
* ``design="multi-run"`` (Jagielski et al. 2020; Nasr et al. 2021): each score comes from an
  **independent training run** on a fixed neighbouring pair, on D' (the target example included:
  "members") or D (excluded: "non-members"). The threshold is chosen on a seeded half of the runs and
  the errors counted on the other half, with Clopper-Pearson bounds (:func:`privaudit.attacks.bounds.multi_run_bound`).

Either bound is on add/remove epsilon at ``delta`` for one example (one candidate), at confidence
1 - beta. Many examples scored on *one* model are not independent runs of one pair, so the multi-run
design does not apply to them.
"""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privaudit.attacks import metrics
from privaudit.attacks.bounds import EpsilonLowerBound, multi_run_bound, one_run_bound_search
from privaudit.audit.score_inputs import KINDS, Scores, read_scores, read_tf_privacy, statistic
from privaudit.core.errors import ConfigError, check_probability, one_of

DESIGNS = ("one-run", "multi-run")
GRID_FRACTIONS = (0.01, 0.03, 0.1, 0.3)

ASSUMPTIONS = {
    "one-run": ("one-run design: valid only if each of the m scored examples was included in the one training "
                "run independently with probability 1/2 (a fair coin per example) and the scores were computed "
                "without looking at which were included; otherwise the epsilon is not a lower bound (ROC and AUC "
                "still describe the attack)"),
    "multi-run": ("multi-run design: valid only if every score comes from an independent training run on a fixed "
                  "neighbouring pair, members = runs on D' (the example included), non-members = runs on D"),
}


def one_run_grid(m: int) -> list[tuple[int, int]]:
    """The (k+, k-) pairs tried, fixed before the scores are seen: k = fraction x m for each fraction in
    :data:`GRID_FRACTIONS`, guessing "member" only (k- = 0) or both sides (k- = k+)."""
    grid: list[tuple[int, int]] = []
    for f in GRID_FRACTIONS:
        k = min(max(1, int(round(f * m))), m // 2) or 1
        for pair in ((k, 0), (k, k) if 2 * k <= m else (k, 0)):
            if pair not in grid:
                grid.append(pair)
    return grid


@dataclass(frozen=True)
class ScoreAudit:
    """The result of :func:`audit_scores`: the two sides' scores, the design, the sound epsilon lower bound, the
    attack's summary (AUC, TPR at low FPR, counts), its ROC and where the inputs came from."""

    members: np.ndarray
    nonmembers: np.ndarray
    design: str
    bound: EpsilonLowerBound
    summary: dict[str, Any]
    roc: metrics.Roc
    inputs: dict[str, str] = field(default_factory=dict)

    @property
    def auc(self) -> float:
        return float(self.summary["auc"])

    @property
    def tpr_at_fpr(self) -> dict[str, float]:
        return dict(self.summary["tpr_at_fpr"])

    @property
    def eps_lower_bound(self) -> float:
        return self.bound.epsilon

    @property
    def assumption(self) -> str:
        return ASSUMPTIONS[self.design]

    def to_dict(self) -> dict[str, Any]:
        """The report object (``report.json``): the usual attack keys first, then the bound and the ROC."""
        s = self.summary
        return {
            "auc": s["auc"], "tpr_at_fpr": s["tpr_at_fpr"], "eps_lower_bound": self.bound.epsilon,
            "eps_lb_method": self.bound.label, "n_members": s["n_members"], "n_nonmembers": s["n_nonmembers"],
            "confidence": self.bound.confidence, "delta": self.bound.delta, "design": self.design,
            "assumption": self.assumption, "balanced_accuracy": s["balanced_accuracy"],
            "fpr_resolution": s["fpr_resolution"], "fpr_resolved": s["fpr_resolved"],
            "bound": self.bound.to_dict(), "inputs": dict(self.inputs),
            "roc": {"fpr": self.roc.fpr.tolist(), "tpr": self.roc.tpr.tolist()},
        }

    def _rows(self) -> list[list[str]]:
        """The measures both renderings show, markers included (an unresolved TPR: summary.UNRESOLVED)."""
        from privaudit.audit.report.summary import tpr_text

        s = self.summary
        rows = [["AUC", f"{s['auc']:.4f}"]]
        rows += [[f"TPR at FPR {100 * float(k):g}%", tpr_text(s, k, f"{v:.4f}")] for k, v in s["tpr_at_fpr"].items()]
        return rows + [["ε lower bound", f"{self.bound.epsilon:.4g}"], ["confidence", f"{self.bound.confidence:.3g}"],
                       ["delta", f"{self.bound.delta:g}"],
                       ["members / non-members", f"{s['n_members']} / {s['n_nonmembers']}"]]

    def markdown(self) -> str:
        from privaudit.audit.report.markdown import table

        rows = self._rows()
        return "\n".join([
            "# privaudit score audit", "",
            "Inputs: " + ", ".join(f"{k}: `{v}`" for k, v in self.inputs.items()), "",
            table(["measure", "value"], rows), "",
            f"Bound: {self.bound.label}.", "",
            f"Assumption: {self.assumption}.", "",
            "![log-log ROC](roc.png)", ""])

    def html(self, png: bytes) -> str:
        from privaudit.audit.report.html import CSS, e, figure, table

        rows = self._rows()
        body = "".join([
            "<h1>privaudit score audit</h1>",
            "<p class=\"meta\">" + " · ".join(f"{e(k)} <code>{e(v)}</code>" for k, v in self.inputs.items()) + "</p>",
            table(["measure", "value"], rows, table_id="score-table"),
            f"<p>Bound: {e(self.bound.label)}.</p><p><small>Assumption: {e(self.assumption)}.</small></p>",
            '<div class="figs">' + figure("roc", png, "log-log ROC; dashed: chance (TPR = FPR)") + "</div>"])
        return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>privaudit score audit</title>"
                f"<style>{CSS}</style></head><body><main>{body}</main></body></html>\n")

    def write(self, out: str | Path) -> dict[str, Path]:
        """Write ``report.json``, ``report.md``, ``report.html``, ``roc.png`` and ``scores.npz`` into ``out``
        (each atomically; nothing outside ``out``)."""
        from privaudit.core.io import atomic_save_npz, atomic_write_bytes, atomic_write_json, atomic_write_text

        out = Path(out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out: {out} exists and is not a directory")
        png = _roc_png(self.roc)
        paths = {"scores": atomic_save_npz(out / "scores.npz", members=self.members, nonmembers=self.nonmembers),
                 "roc": atomic_write_bytes(out / "roc.png", png),
                 "json": atomic_write_json(out / "report.json", self.to_dict()),
                 "markdown": atomic_write_text(out / "report.md", self.markdown()),
                 "html": atomic_write_text(out / "report.html", self.html(png))}
        return paths


def _roc_png(r: metrics.Roc) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import auc as area

    fig, ax = plt.subplots(figsize=(4.2, 3.6))
    pts = metrics.loglog_roc(r)
    floor = pts["floor"][0]
    ax.plot(pts["fpr"], pts["tpr"], label=f"scores (AUC {area(r.fpr, r.tpr):.3f})")
    ax.plot([floor, 1], [floor, 1], ls="--", color="grey", lw=1, label="chance")
    ax.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1), xlabel="FPR", ylabel="TPR")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _side(value: Any, kind: str, labels: Any, name: str) -> Scores:
    if isinstance(value, (str, Path)):
        return read_scores(value, kind, None if labels is None else np.asarray(labels))
    if value is None:
        raise ConfigError(f"{name}: missing (give {name} and the other side, or tf_privacy=FILE)")
    kind = "score" if kind == "auto" else kind
    return Scores(statistic(kind, np.asarray(value), labels, name), kind, f"<{name} array>")


def audit_scores(members: Any = None, nonmembers: Any = None, *, kind: str = "auto",
                 member_labels: Any = None, nonmember_labels: Any = None, tf_privacy: str | Path | None = None,
                 delta: float = 1e-5, beta: float = 0.05, design: str = "one-run",
                 out: str | Path | None = None) -> ScoreAudit:
    """Audit member / non-member scores: ROC, AUC, TPR at FPR 0.1/1/10%, and a sound epsilon lower bound.

    ``members``, ``nonmembers``: arrays or file paths (``.npy``/``.npz``/CSV; see :mod:`privaudit.audit.score_inputs`),
    higher = member; ``kind`` says what they hold (``score``, ``loss``: score = -loss, ``logits`` / ``probs``
    with ``*_labels``: LiRA's logit statistic). ``tf_privacy``: one ``.npz`` in TF-Privacy's
    ``AttackInputData`` layout (``*_train`` = members, ``*_test`` = non-members) instead of the two sides.
    ``design``: ``one-run`` (each example included by an independent fair coin in one training run) or
    ``multi-run`` (each score from an independent run on a fixed neighbouring pair); the bound is sound only
    for the design that produced the scores (see the module docstring). The bound is on add/remove epsilon
    at ``delta`` with confidence 1 - ``beta``. ``out``: write the report there (JSON, Markdown, HTML, plot).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> inside = rng.random(2000) < 0.5                     # each example included by a fair coin
    >>> scores = rng.normal(4.0 * inside, 1.0)              # members score higher
    >>> a = audit_scores(scores[inside], scores[~inside], delta=1e-5)
    >>> round(a.auc, 2)
    1.0
    >>> a.eps_lower_bound > 2, a.design
    (True, 'one-run')
    """
    if design not in DESIGNS:
        raise one_of("design", design, DESIGNS)
    if kind not in KINDS:
        raise one_of("kind", kind, KINDS)
    check_probability("beta", beta)
    if not 0 <= delta < 1:
        raise ConfigError(f"delta: must lie in [0, 1), got {delta!r}")
    m_side, n_side = _sides(members, nonmembers, kind, member_labels, nonmember_labels, tf_privacy)
    mem, non = m_side.values, n_side.values
    scores = np.concatenate([mem, non])
    membership = np.concatenate([np.ones(mem.size, bool), np.zeros(non.size, bool)])
    summary = metrics.summarize(scores, membership)
    bound = _bound(mem, non, scores, membership, design, beta, delta)
    audit = ScoreAudit(mem, non, design, bound, summary, metrics.roc(scores, membership),
                       {"members": m_side.source, "nonmembers": n_side.source, "kind": m_side.kind})
    if out is not None:
        audit.write(out)
    return audit


def _sides(members: Any, nonmembers: Any, kind: str, member_labels: Any, nonmember_labels: Any,
           tf_privacy: str | Path | None) -> tuple[Scores, Scores]:
    """The members' and non-members' scores, from a TF-Privacy file or from each side, of the same kind."""
    if tf_privacy is not None:
        if members is not None or nonmembers is not None:
            raise ConfigError("tf_privacy: give either a TF-Privacy file or members and nonmembers, not both")
        m_side, n_side = read_tf_privacy(tf_privacy)
    else:
        m_side = _side(members, kind, member_labels, "members")
        n_side = _side(nonmembers, kind, nonmember_labels, "nonmembers")
    if m_side.kind != n_side.kind:
        raise ConfigError(f"members and nonmembers: different kinds ({m_side.kind} vs {n_side.kind}); "
                          "give both sides the same kind of values")
    return m_side, n_side


def _bound(mem: np.ndarray, non: np.ndarray, scores: np.ndarray, membership: np.ndarray, design: str, beta: float,
           delta: float) -> EpsilonLowerBound:
    """The design's sound epsilon lower bound (see the module docstring), its assumption among its notes."""
    if design == "one-run":
        # The guesses break ties by position; the members come first here, so put the examples in a random
        # order (independent of membership) first, or tied scores would be guessed "member" and inflate the bound.
        order = np.random.default_rng(0).permutation(scores.size)
        bound = one_run_bound_search(scores[order], membership[order], one_run_grid(scores.size), beta=beta,
                                     delta=delta)
    else:
        if min(mem.size, non.size) < 4:
            raise ConfigError("multi-run design: needs at least 4 runs on each side")
        bound = multi_run_bound(mem, non, alpha=beta, delta=delta, threshold="split")
    return dataclasses.replace(bound, notes=bound.notes + (ASSUMPTIONS[design],))
