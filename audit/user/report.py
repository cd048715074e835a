"""The report of an audit of the user's own scores or model: ``report.md``, ``report.html`` and their plots.

One page: what was audited (inputs), the claim and the verdict with its ceiling (the largest bound the
design could show), a table of measurements per attack -- AUC, advantage (max TPR - FPR, the "attacker
advantage" TF-Privacy reports) beside balanced accuracy, TPR at low FPR, the sound epsilon lower bound and
its ceiling -- the log-log ROC and the score histograms. The content comes from the audit's JSON; the
files are returned as bytes for :func:`privaudit.audit.user.out_dir.write`.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from privaudit.attacks.metrics import Roc
from privaudit.attacks.roc_plot import roc_plot_bytes

FILES = ("report.md", "report.html", "roc.png", "histogram.png")
ADVANTAGE = "advantage (max TPR - FPR)"


@dataclass(frozen=True)
class Row:
    """One attack's measurements: its summary (``metrics.SortedScores.summary``), bound, ceiling and method."""

    name: str
    summary: dict[str, Any]
    eps_lower_bound: float
    ceiling: float | None
    method: str
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UserReport:
    """What :func:`files` renders: title, inputs, claim and verdict (or None), rows, curves and histograms."""

    title: str
    inputs: dict[str, str]
    claim: dict[str, Any] | None
    verdict: dict[str, Any] | None
    rows: list[Row]
    curves: dict[str, Roc]
    histograms: dict[str, dict[str, list[float]]]
    notes: list[str] = field(default_factory=list)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _table(report: UserReport) -> tuple[list[str], list[list[str]]]:
    """The rows both renderings show (a TPR below the FPR resolution marked, as in suite reports)."""
    from privaudit.audit.report.summary import tpr_text

    keys = list(report.rows[0].summary["tpr_at_fpr"]) if report.rows else []
    extra = list(dict.fromkeys(k for r in report.rows for k in r.extra))  # in the order the rows give them
    headers = ["attack", "AUC", ADVANTAGE, "balanced accuracy", *[f"TPR@{100 * float(k):g}%FPR" for k in keys],
               "ε lower bound", "ceiling", "members / non-members", *extra]
    rows = [[r.name, _fmt(r.summary["auc"]), _fmt(r.summary["advantage"]), _fmt(r.summary["balanced_accuracy"]),
             *[tpr_text(r.summary, k, _fmt(r.summary["tpr_at_fpr"][k])) for k in keys], _fmt(r.eps_lower_bound), _fmt(r.ceiling),
             f"{r.summary['n_members']} / {r.summary['n_nonmembers']}", *[r.extra.get(k, "-") for k in extra]]
            for r in report.rows]
    return headers, rows


def _claim_line(claim: dict[str, Any]) -> str:
    return (f"ε = {claim['epsilon']:.4g} at δ = {claim['delta']:g} ({claim['relation']}, per {claim['unit']}); "
            f"source: {claim['source']}")


def markdown(report: UserReport) -> str:
    """``report.md``."""
    from privaudit.audit.report.markdown import table

    lines = [f"# {report.title}", "", "Inputs: " + ", ".join(f"{k}: `{v}`" for k, v in report.inputs.items()), ""]
    if report.verdict is not None and report.claim is not None:
        lines += [f"**Verdict: {report.verdict['statement']}**", "", f"Claim: {_claim_line(report.claim)}.", "",
                  f"Verdict bound: {report.verdict['method']}.", ""]
    else:
        lines += ["No claim given (pass --claimed-epsilon E --delta D, or --opacus-state FILE --delta D, for a "
                  "verdict).", ""]
    headers, rows = _table(report)
    lines += [table(headers, rows), ""]
    lines += [f"- {r.name}: {r.method}" for r in report.rows] + [""]
    lines += [f"{n}" for n in report.notes] + ([""] if report.notes else [])
    lines += ["![log-log ROC](roc.png)", "", "![score histograms](histogram.png)", ""]
    return "\n".join(lines)


def html(report: UserReport, roc_png: bytes, hist_png: bytes) -> str:
    """``report.html``: the same content in one self-contained page."""
    from privaudit.audit.report.html import CSS, e, figure, table

    body = [f"<h1>{e(report.title)}</h1>", "<p class=\"meta\">" + " · ".join(
        f"{e(k)} <code>{e(v)}</code>" for k, v in report.inputs.items()) + "</p>"]
    if report.verdict is not None and report.claim is not None:
        kind = "fail" if report.verdict["verdict"] == "refuted" else "pass"
        body += [f'<div class="gate {kind}"><strong>{e(report.verdict["statement"])}</strong>'
                 f"<ul><li>claim: {e(_claim_line(report.claim))}</li><li>verdict bound: "
                 f"{e(report.verdict['method'])}</li></ul></div>"]
    headers, rows = _table(report)
    body += [table(headers, rows, table_id="audit-table"), "<ul class=\"notes\">"]
    body += [f"<li><b>{e(r.name)}</b>: {e(r.method)}</li>" for r in report.rows]
    body += [f"<li>{e(n)}</li>" for n in report.notes] + ["</ul>"]
    body += ['<div class="figs">', figure("roc", roc_png, "log-log ROC; dashed: chance (TPR = FPR)"),
             figure("histogram", hist_png, "score histograms, members against non-members"), "</div>"]
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(report.title)}</title>"
            f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>\n")


def histogram_png(histograms: dict[str, dict[str, list[float]]]) -> bytes:
    """One panel per attack: members' and non-members' score histograms on shared bins."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(histograms), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.2), squeeze=False)
    for ax, (name, h) in zip(axes[0], histograms.items()):
        edges = h["edges"]
        for side, colour in (("members", "tab:red"), ("nonmembers", "tab:blue")):
            ax.stairs(h[side], edges, label=side.replace("nonmembers", "non-members"), color=colour)
        ax.set(title=name, xlabel="score (higher = member)", ylabel="examples")
        ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def files(report: UserReport) -> dict[str, bytes]:
    """The report's files (:data:`FILES`) as bytes."""
    roc = roc_plot_bytes(report.curves)
    hist = histogram_png(report.histograms)
    return {"report.md": markdown(report).encode("utf-8"), "report.html": html(report, roc, hist).encode("utf-8"),
            "roc.png": roc, "histogram.png": hist}
