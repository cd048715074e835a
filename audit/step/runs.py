"""The suite's ``[step_audit]`` run: one step audit per listed defense, its witnesses under the run's output
directory, and one error line per failed audit (the orchestration; the audit itself is
:mod:`privaudit.audit.step.audit`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

from privaudit.audit.failures import failure_line
from privaudit.audit.step.audit import audit_defense
from privaudit.audit.step.render import summary_line


def run_suite_step_audits(suite: Any, out: Path, progress: bool = True,
                          names: list[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The suite's ``[step_audit]``: one result per listed defense (or per name of ``names``; hyper-parameters
    from the suite's entry of that defense, if any), witnesses under ``out/step_audit/witnesses``; plus error
    lines. Each defense's audit is seeded by the suite's step-audit seed alone, so running the defenses one
    by one (in parallel workers) gives the numbers one pass gives."""
    cfg = suite.step_audit
    params = {d.name: dict(d.params) for d in suite.defenses if d.name in cfg.defenses}
    delta = next((d.delta for d in suite.defenses if d.delta is not None), None) or 1e-5
    results, errors = [], []
    torch.set_num_threads(1)
    wdir = Path(out) / "step_audit" / "witnesses"
    for name in (cfg.defenses if names is None else names):
        start = time.perf_counter()
        try:
            audit = audit_defense(name, params=params.get(name), target_epsilon=cfg.target_epsilon, delta=delta,
                                  draws=cfg.draws, seed=cfg.seed,
                                  pair=cfg.pair if isinstance(cfg.pair, str) else cfg.pair.get(name, "canonical"),
                                  dataset=suite.datasets[0], data_dir=suite.data_dir,
                                  witness_evaluations=cfg.witness_evaluations, out_dir=wdir)
        except Exception as exc:  # noqa: BLE001 - reported through the gate
            errors.append(failure_line(f"step audit of {name} errored", exc))
            continue
        r = audit.to_dict()
        r["seconds"] = round(time.perf_counter() - start, 3)
        for p in r["pairs"]:
            if p.get("witness"):
                p["witness"] = str(Path(p["witness"]).relative_to(Path(out)))
        results.append(r)
        if progress:
            print(f"step audit: {summary_line(audit)} ({r['seconds']:.1f}s)", file=sys.stderr, flush=True)
    return results, errors
