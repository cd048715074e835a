"""The report's figures, drawn with matplotlib (Agg) from ``report.json`` and the saved scores.

* ``roc-<attack>``: log-log ROC of one attack on every cell, with the chance line TPR = FPR and the
  FPR resolution (1 / #non-members) as the axis floor;
* ``epsilon``: theory versus measurement per cell: each accountant's epsilon (markers) beside the
  strongest sound empirical lower bound (bar); an infinite epsilon is drawn as an arrow;
* ``privacy-utility``: linear-probe accuracy and the strongest attack's AUC against epsilon, one line
  per defense (mean over seeds), non-private defenses as horizontal references; black-box attacks (on the
  released model) and white-box audits (:data:`WHITE_BOX`, reading the training's internals) in separate panels.

No panel holds more than :data:`MAX_CURVES` curves, and within a panel each curve has its own colour and its own
marker: cells are faceted by defense family (:func:`facets`), several panels side by side or in rows.
Each function returns PNG bytes (or None when there is nothing to draw).
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from privaudit.audit.report.summary import WHITE_BOX, attack_names, shown_accountants, strongest_bound

MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
# Okabe & Ito's colour-blind-safe palette; each series also gets its own marker (and baselines a dashed line),
# so no two series are told apart by colour alone.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MAX_CURVES = len(PALETTE)  # per panel: every curve of a panel has a colour and a marker of its own
# Defense families, for faceting: the paper a defense implements (its variants and its positive control with it).
FAMILIES = {"nonprivate": "baselines", "supervised": "baselines", "dpsgd": "DP-SGD", "dp-clip": "DP-SGD",
            "dpcl-simclr": "DPCL", "dpcl-barlow": "DPCL", "dp-gcl": "DP-GCL", "control-undernoised": "DP-GCL",
            "logit-dp": "Logit-DP", "alm": "ALM", "dp-fedemb": "DP-FedEmb", "dp-fedavg": "DP-FedEmb",
            "opacus-dpsgd": "DP-SGD"}


def _style(i: int) -> dict[str, Any]:
    """The i-th curve of a panel (i < :data:`MAX_CURVES`): its own colour and its own marker."""
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)]}


def family(cell: dict[str, Any]) -> str:
    """A cell's defense family (:data:`FAMILIES`; a defense outside it is its own family)."""
    name = (cell.get("details") or {}).get("defense_name") or cell["defense"]
    return FAMILIES.get(name, name)


def facets(items: list[Any], family_of, size=lambda item: 1, limit: int = MAX_CURVES) -> list[list[Any]]:
    """``items`` split into panels of at most ``limit`` curves (``size(item)`` each), families kept together and
    in first-seen order: a family joins the current panel when it fits, else opens the next one (a family larger
    than a panel is split)."""
    families: dict[str, list[Any]] = {}
    for item in items:
        families.setdefault(family_of(item), []).append(item)
    panels: list[list[Any]] = [[]]
    for members in families.values():
        if panels[-1] and sum(map(size, panels[-1])) + sum(map(size, members)) > limit:
            panels.append([])
        for item in members:
            if panels[-1] and sum(map(size, panels[-1])) + size(item) > limit:
                panels.append([])
            panels[-1].append(item)
    return [p for p in panels if p]


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def _strongest_auc(cell: dict[str, Any], names: dict[str, str], white: bool) -> float:
    aucs = [a.get("auc") for label, a in (cell.get("attacks") or {}).items()
            if (names.get(label, label) in WHITE_BOX) == white and a.get("auc") is not None]
    return max(aucs) if aucs else math.nan
DPI = 130


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.grid": True, "grid.alpha": 0.3, "legend.frameon": False})
    return plt


def _png(fig, tag: str | None = None) -> bytes:
    """The figure as PNG bytes, without the software's version (the same figure gives the same bytes); ``tag``
    goes into the PNG's Source text (what it was drawn from: the docs' figures carry their report's digest)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None, **({"Source": tag} if tag else {})})
    _pyplot().close(fig)
    return buffer.getvalue()


def _label(cell: dict[str, Any], report: dict[str, Any]) -> str:
    parts = [cell["defense"]]
    if len({c["dataset"] for c in report["cells"]}) > 1:
        parts.insert(0, cell["dataset"])
    if cell.get("target_epsilon") is not None:
        parts.append(f"ε={cell['target_epsilon']:g}")
    if len({c["seed"] for c in report["cells"]}) > 1:
        parts.append(f"s{cell['seed']}")
    return " ".join(parts)


def _roc_curves(report: dict[str, Any], out: Path, attack: str) -> list[tuple[dict[str, Any], Any, Any]]:
    """(cell, ROC, AUC) of every cell that ran ``attack``, from its saved scores."""
    from privaudit.attacks.metrics import roc
    from privaudit.core.io import load_npz

    curves = []
    for cell in report["cells"]:
        a = (cell.get("attacks") or {}).get(attack)
        if not a or not a.get("scores") or not (out / a["scores"]).exists():
            continue
        try:
            arrays = load_npz(out / a["scores"])
            scores, membership = arrays["scores"], arrays["membership"]
        except Exception as exc:  # noqa: BLE001 - a torn or edited file: one line, not a traceback
            from privaudit.core.errors import ConfigError

            raise ConfigError(f"{a['scores']}: unreadable score file ({type(exc).__name__}); run privaudit run "
                              "--resume on this directory to recompute its cell") from None
        curves.append((cell, roc(scores, membership), a.get("auc")))
    return curves


def roc_plot(report: dict[str, Any], out: Path, attack: str) -> bytes | None:
    """Log-log ROC curves of ``attack`` on every cell that ran it, one panel per group of defense families."""
    from privaudit.attacks.metrics import loglog_roc

    curves = _roc_curves(report, out, attack)
    if not curves:
        return None
    panels = facets(curves, lambda c: family(c[0]))
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.4 * len(panels), 4.4), squeeze=False)
    floor = min(0.5 / max(r.n_nonmembers, 1) for _, r, _ in curves)
    for ax, panel in zip(axes[0], panels):
        for i, (cell, r, auc) in enumerate(panel):
            pts = loglog_roc(r, floor)
            name = _label(cell, report)
            ax.step(pts["fpr"], pts["tpr"], where="post", lw=1.3, markevery=max(1, len(pts["fpr"]) // 6), ms=4,
                    label=f"{name} (AUC {auc:.3f})" if auc is not None else name, **_style(i))
        ax.plot([floor, 1], [floor, 1], ls="--", color="grey", lw=1, label="chance")
        families = ", ".join(dict.fromkeys(family(c) for c, _, _ in panel))
        ax.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1.05), xlabel="false positive rate",
               ylabel="true positive rate", title=f"{attack}: {families}")
        ax.legend(fontsize=6.5, loc="lower right")
    fig.tight_layout()
    return _png(fig)


def epsilon_plot(report: dict[str, Any], tag: str | None = None) -> bytes | None:
    """Per cell: accountants' epsilons (markers) and the strongest sound lower bound (bar)."""
    cells = [c for c in report["cells"] if not (c.get("details") or {}).get("error")]
    if not cells:
        return None
    names = shown_accountants(report)
    finite = [v for c in cells for v in c.get("epsilon", {}).values() if v is not None]
    lbs = [strongest_bound(c) for c in cells]
    # a positive control's bound may be far above every claim: the axis follows the claims and the other cells,
    # and a longer bar ends at the edge with its value written beside it
    finite += [b for b, c in zip(lbs, cells) if not (c.get("gate") or {}).get("control")]
    top = max(finite + [1.0]) * 1.25
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.6, 0.42 * len(cells) + 1.5))
    y = np.arange(len(cells))[::-1]
    ax.barh(y, np.minimum(lbs, top), height=0.5, color="#d9534f", alpha=0.75,
            label="strongest ε lower bound (measured)")
    for yi, lb in zip(y, lbs):
        if lb > top:
            ax.text(top * 0.98, yi, f"{lb:.3g} →", va="center", ha="right", fontsize=7, color="white")
    infinite = [yi for yi, cell in zip(y, cells)
                if any(d.get("infinite") for d in ((cell.get("details") or {}).get("epsilon") or {}).values())]
    for j, name in enumerate(names):
        xs, ys = [], []
        for yi, cell in zip(y, cells):
            if cell.get("epsilon", {}).get(name) is not None:
                xs.append(cell["epsilon"][name])
                ys.append(yi)
        offset = (j - (len(names) - 1) / 2) * 0.12
        ax.scatter(xs, np.asarray(ys) + offset, marker=MARKERS[j % len(MARKERS)], color=PALETTE[j % len(PALETTE)], s=28,
                   zorder=3, label=f"ε ({name})")
    for yi in infinite:  # no mechanism: every accountant says infinity
        ax.annotate("ε = ∞", xy=(top, yi), xytext=(top * 0.80, yi), va="center", ha="right", fontsize=7,
                    color="grey", arrowprops={"arrowstyle": "->", "color": "grey"})
    ax.set_yticks(y, [_label(c, report) for c in cells])
    ax.set(xlim=(0, top * 1.02), xlabel="ε (theory: markers; measured lower bound: bars)",
           title="theory versus measurement")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return _png(fig, tag)


PANELS = ("privacy–utility", "leakage, black-box (released model)", "leakage, white-box (training internals)")


def privacy_utility_plot(report: dict[str, Any], tag: str | None = None) -> bytes | None:
    """Utility (linear probe) and leakage against epsilon, one line per defense; black-box leakage (attacks on
    the released model) and white-box leakage (audits of the training internals, :data:`WHITE_BOX`) on separate
    axes. The non-private baselines are horizontal lines in every row; the private defenses are faceted by family
    into rows of at most :data:`MAX_CURVES` curves with them."""
    cells = [c for c in report["cells"] if not (c.get("details") or {}).get("error")]
    if not cells:
        return None
    points, baselines = _privacy_utility_points(report, cells)
    if not points and not baselines:
        return None
    families = {c["defense"]: family(c) for c in cells}
    rows = facets(sorted(points), families.get, limit=max(1, MAX_CURVES - len(baselines))) if points else [[]]
    plt = _pyplot()
    fig, axes = plt.subplots(len(rows), 3, figsize=(11.5, 3.2 * len(rows)), squeeze=False)
    ticks = sorted({x for by_eps in points.values() for x in by_eps}) if points else None
    for row, defenses in zip(axes, rows):
        _privacy_utility_row(row, {d: points[d] for d in defenses}, baselines, ticks)
    for k, title in enumerate(PANELS):
        axes[0][k].set_title(title)
    fig.tight_layout(rect=(0, 0, 0.85, 1))
    return _png(fig, tag)


def _privacy_utility_row(axes: Any, points: dict[str, dict[float, list["_Entry"]]],
                         baselines: dict[str, list["_Entry"]], ticks: list[float] | None) -> None:
    """One row of the privacy-utility figure: its defenses' lines, the baselines, chance, and its legend."""
    for i, (defense, by_eps) in enumerate(points.items()):
        xs = sorted(by_eps)
        for k, ax in enumerate(axes):
            ys = [_mean([p[k] for p in by_eps[x]]) for x in xs]
            if np.isfinite(ys).any():
                ax.plot(xs, ys, label=defense, **_style(i))
    for j, (defense, entries) in enumerate(sorted(baselines.items())):
        style = _style(len(points) + j)
        for k, ax in enumerate(axes):
            value = _mean([p[k] for p in entries])
            if np.isfinite(value):
                ax.axhline(value, ls="--", lw=1, ms=4, label=f"{defense} (ε = ∞)", **style)
    _epsilon_axes(axes, ticks if points else None)
    for ax in axes[1:]:
        ax.axhline(0.5, ls=":", lw=1, color="grey", label="chance")
    handles, labels = [], []
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    axes[-1].legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.04, 0.5))


_Entry = tuple[float, float, float]  # (linear-probe accuracy, strongest black-box AUC, strongest white-box AUC)


def _privacy_utility_points(report: dict[str, Any], cells: list[dict[str, Any]]) -> tuple[
        dict[str, dict[float, list[_Entry]]], dict[str, list[_Entry]]]:
    """Each defense's entries by target epsilon (a fixed-noise cell at its smallest finite epsilon), and the
    entries of the cells with no epsilon (non-private baselines)."""
    names = attack_names(report)
    points: dict[str, dict[float, list[_Entry]]] = defaultdict(lambda: defaultdict(list))
    baselines: dict[str, list[_Entry]] = defaultdict(list)
    for cell in cells:
        utility = (cell.get("utility") or {}).get("linear_probe_accuracy")
        finite = [v for v in cell.get("epsilon", {}).values() if v is not None]
        eps = cell.get("target_epsilon") if cell.get("target_epsilon") is not None else (min(finite) if finite else None)
        entry = (math.nan if utility is None else utility, _strongest_auc(cell, names, False),
                 _strongest_auc(cell, names, True))
        if eps is None:
            baselines[cell["defense"]].append(entry)
        else:
            points[cell["defense"]][eps].append(entry)
    return points, baselines


def _epsilon_axes(axes: Any, ticks: list[float] | None) -> None:
    """Label the axes; with points (``ticks``: their epsilons), a log epsilon axis ticked at exactly those."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, ScalarFormatter

    for ax, ylabel in zip(axes, ("linear-probe accuracy", "strongest black-box AUC", "strongest white-box AUC")):
        ax.set(xlabel="target ε (log scale)", ylabel=ylabel)
        if ticks is not None:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
            if len(ticks) == 1:
                ax.set_xlim(ticks[0] / 2, ticks[0] * 2)


def all_plots(report: dict[str, Any], out: Path) -> dict[str, bytes]:
    """Every figure of the report by name (``roc-<attack>``, ``epsilon``, ``privacy-utility``)."""
    figures: dict[str, bytes | None] = {}
    attacks: list[str] = []
    for cell in report["cells"]:
        for label in cell.get("attacks") or {}:
            if label not in attacks:
                attacks.append(label)
    for label in attacks:
        figures[f"roc-{label}"] = roc_plot(report, out, label)
    figures["epsilon"] = epsilon_plot(report)
    figures["privacy-utility"] = privacy_utility_plot(report)
    return {k: v for k, v in figures.items() if v is not None}
