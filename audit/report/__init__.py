"""Audit reports: ``report.json`` (primary), and ``report.md`` / ``report.html`` / ``plots/`` generated from it.

``report.json`` holds no wall-clock time: two runs of a suite with the same seeds on the same device give the same
bytes. When a run happened and how long each part took are in ``timings.json`` beside it.

``report.json`` (strict JSON: non-finite numbers are null)::

    suite        the resolved suite (defenses with every hyper-parameter, attacks, seeds, gate, ...)
    version      privaudit's version
    git_commit   the checkout's commit ("+dirty" with local changes), or null
    device       the device the cells ran on
    cells        one object per cell:
        id, dataset, defense, target_epsilon, delta, seed,
        claim      {mechanism, relation, unit, paper_accountant, delta, sampler, source, notes}
        epsilon    {accountant: epsilon or null (not applicable, or infinite: see details.epsilon)}
        utility    {knn_accuracy, linear_probe_accuracy, <the defense's own metrics>}
        attacks    {attack: {auc, tpr_at_fpr {"0.001", "0.01", "0.1"}, eps_lower_bound, eps_lb_method,
                             n_members, n_nonmembers, [eps_lb_mechanism, eps_lb_mechanism_method,]
                             variant, scores (path of the .npz), details}}
        gate       {status, reasons, comparisons: [{attack, eps_lower_bound, method, epsilon,
                                                    accountant, verdict, reason, [eps_lb_any_mechanism]}]}
                   (where an attack reports eps_lb_mechanism, that is the compared bound)
        details    cache key, defense name and resolved parameters, the claim in full (its event: what
                   ``privaudit gate`` re-accounts), every accountant's full result, error
    sensitivity  the objects ``privaudit sensitivity --json`` prints (claim, source, relation, bound,
                 observed, ratio, verdict, witness, config)
    gate         {status: "pass" | "fail", reasons, notes}
    step_audit   (suites with ``[step_audit]``) one object per audited defense, as
                 ``privaudit audit-step --json`` prints it
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Sequence

from privaudit.core.errors import ConfigError, DiskFull
from privaudit.core.io import atomic_write_group, strict

TOP_LEVEL = ("suite", "version", "git_commit", "device", "cells", "sensitivity", "gate")


def git_commit() -> str | None:
    """The commit of the checkout privaudit runs from, or of the privaudit clone in the current directory
    (``+dirty`` with uncommitted changes to tracked files), else None."""
    candidates = [Path(__file__).resolve().parents[2], Path.cwd()]  # the checkout, or the clone run from
    root = next((r for r in candidates if (r / ".git").exists() and (r / "audit" / "cli.py").is_file()), None)
    if root is None:
        return None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "") if commit else None


def device_description(name: str) -> str:
    """``cpu`` or ``cuda (<GPU name>)`` for the suite's device setting as resolved here."""
    import torch

    from privaudit.audit.device import resolve_device

    device = resolve_device(name)
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type


def build_report(suite, cells: Sequence[dict[str, Any]], sensitivity: Sequence[dict[str, Any]],
                 gate: dict[str, Any], *, only: Sequence[str] | None = None) -> dict[str, Any]:
    """The report object (see the module docstring)."""
    from privaudit.audit import __version__

    return strict({
        "suite": {**suite.to_dict(), "only": list(only) if only else None},
        "version": __version__,
        "git_commit": git_commit(),
        "device": device_description(suite.device),
        "cells": list(cells),
        "sensitivity": list(sensitivity),
        "gate": gate,
    })


def write_report(out: str | Path, report: dict[str, Any], *, with_json: bool = True) -> dict[str, Path]:
    """Render plots, ``report.md``, ``report.html`` and (``with_json``) ``report.json`` in memory, then write them
    all-or-nothing (:func:`privaudit.core.io.atomic_write_group`): a write that fails (full disk, read-only
    directory) replaces none of them and is one line (ConfigError naming ``--out``)."""
    from privaudit.audit.report import html, markdown
    from privaudit.audit.report.plots import all_plots
    from privaudit.core.io import to_json

    out = Path(out)
    figures = all_plots(report, out)
    files: dict[str, tuple[Path, bytes]] = {
        name: (out / "plots" / f"{name}.png", png) for name, png in figures.items()}
    rel = {name: str(p.relative_to(out)) for name, (p, _) in files.items()}
    files["report.md"] = (out / "report.md", markdown.render(report, rel).encode("utf-8"))
    files["report.html"] = (out / "report.html", html.render(report, figures).encode("utf-8"))
    if with_json:
        files["report.json"] = (out / "report.json", (to_json(report) + "\n").encode("utf-8"))
    try:
        atomic_write_group({path: data for path, data in files.values()})
    except (OSError, DiskFull) as exc:
        raise ConfigError(f"--out: cannot write the report to {str(out)!r}: {exc.strerror or exc}; "
                          "no report file was replaced") from None
    return {name: path for name, (path, _) in files.items()}


