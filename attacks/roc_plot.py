"""ROC curves drawn: a log-log plot (one curve per entry, chance line dashed) as file bytes (:func:`roc_plot_bytes`)
or written to a file (:func:`plot_roc`); the curves are :class:`privaudit.attacks.metrics.Roc`."""

from __future__ import annotations

from privaudit.attacks.metrics import Roc, loglog_roc


def roc_plot_bytes(curves: dict[str, Roc], fmt: str = "png", title: str = "") -> bytes:
    """A log-log ROC plot (one curve per entry, chance line dashed) as the bytes of a PNG/PDF/SVG file."""
    import io

    import matplotlib
    from sklearn.metrics import auc as area  # trapezoidal area; np.trapezoid needs numpy >= 2

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 3.6))
    floor = min(0.5 / max(r.n_nonmembers, 1) for r in curves.values())
    for name, r in curves.items():
        pts = loglog_roc(r, floor)
        ax.plot(pts["fpr"], pts["tpr"], label=f"{name} (AUC {area(r.fpr, r.tpr):.3f})")
    ax.plot([floor, 1], [floor, 1], ls="--", color="grey", lw=1, label="chance")
    ax.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1), xlabel="FPR", ylabel="TPR", title=title)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt)
    plt.close(fig)
    return buffer.getvalue()


def plot_roc(curves: dict[str, Roc], path: str, title: str = "") -> str:
    """Write a log-log ROC plot (one curve per entry, chance line dashed) to ``path`` (PNG/PDF/SVG)."""
    from privaudit.core.io import atomic_write_bytes

    fmt = path.rsplit(".", 1)[-1] if "." in path else "png"
    atomic_write_bytes(path, roc_plot_bytes(curves, fmt, title))
    return path
