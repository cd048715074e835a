"""Planned cost of a run's work, so the progress line estimates the time left from the run's first line.

Each task's prior is its planned work times a stage cost: a cell's stages (train, utility, epsilon, then each
attack by name; LiRA scaled by its reference models against the default), a sensitivity claim by its evaluations
(or its time budget), a step audit by its pair (a witness search costs its evaluations). The costs are seconds on a
2-core laptop CPU at the quickstart's settings (digits) and set only the scale and the proportions:
:class:`privaudit.audit.run.progress.Progress` multiplies them by the measured over planned seconds of the finished
tasks (its ``speed``), and replaces a cell's by the measured stage times once a cell of its defense has finished.

A suite may name an earlier run's measured stage times (its ``timings``: a run's ``timings.json``, or a reference
whose ``cells`` carry ``stage_seconds``, as the Fashion-MNIST benchmark's does): a cell of the same id then takes
them as its priors (:func:`measured_priors`), so a run whose cells differ by orders of magnitude in cost (the
benchmark's floors against its per-term DP-SGD) is estimated from its first finished task: the floors finish first
and set the machine's speed against the earlier run's. Priors only move the estimate: a missing or unreadable file
leaves the planned costs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from privaudit.audit.run.progress import CELL_STAGES

#: Seconds per stage of a cell (attacks by their registry name): the means of the quickstart's cells on a 2-core
#: CPU (digits), measured stage by stage at the code that added the claim checks' noise-structure tests.
STAGE_SECONDS = {"train": 1.5, "utility": 0.2, "epsilon": 1.0, "claim checks": 1.5, "loss": 0.1, "lira": 11.0,
                 "rmia": 0.1, "gradient-canary": 4.0, "user-canary": 2.5, "user-data-canary": 2.5}
#: A stage not in :data:`STAGE_SECONDS`.
OTHER_STAGE = 5.0
#: LiRA's default number of reference models (the count :data:`STAGE_SECONDS`' ``lira`` is for).
REFERENCE_MODELS = 8
#: A sensitivity claim: seconds per evaluated pair (the quickstart's fifteen claims at 400 evaluations each, their
#: mean on the same machine), and a claim with neither evaluations nor a budget.
SECONDS_PER_EVALUATION = 0.03
SENSITIVITY_CLAIM = 30.0
#: A step audit: one defense's 10^5 noise draws a side, plus seconds per witness evaluation when its pair is the
#: witness.
STEP_AUDIT = 2.7
STEP_AUDIT_DRAWS = 100_000
SECONDS_PER_WITNESS_EVALUATION = 0.04


def measured_priors(path: str | Path | None) -> dict[str, dict[str, float]]:
    """Each cell's measured seconds per stage in the earlier run at ``path`` (module docstring), by cell id; empty
    when ``path`` is None or not a readable file of either form."""
    if path is None or not Path(path).is_file():
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    cells = data.get("cells") if isinstance(data, dict) else None
    if isinstance(cells, list):  # a reference: [{"id": ..., "stage_seconds": {...}}, ...]
        cells = {c.get("id"): c.get("stage_seconds") for c in cells if isinstance(c, dict)}
    if not isinstance(cells, dict):
        return {}
    return {cid: {k: float(v) for k, v in stages.items() if _seconds(v)}
            for cid, stages in cells.items() if isinstance(cid, str) and isinstance(stages, Mapping)}


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def cell_priors(spec: Any, measured: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, float]:
    """Planned seconds per stage of a cell (:class:`privaudit.audit.suite.model.CellSpec`): its measured stage times
    where ``measured`` (:func:`measured_priors`) has the cell, else no epsilon or claim-check cost for a non-private
    defense, LiRA in proportion to its reference models."""
    earlier = (measured or {}).get(spec.id)
    if earlier:
        stages = (*CELL_STAGES, *(a.label for a in spec.attacks))
        return {s: float(earlier.get(s, STAGE_SECONDS.get(s, OTHER_STAGE))) for s in stages}
    priors = {s: STAGE_SECONDS[s] for s in CELL_STAGES}
    if not spec.defense.private:
        priors["epsilon"] = priors["claim checks"] = 0.0
    for attack in spec.attacks:
        cost = STAGE_SECONDS.get(attack.name, OTHER_STAGE)
        if attack.name == "lira":
            cost *= float(attack.resolved.get("shadow_models") or REFERENCE_MODELS) / REFERENCE_MODELS
        priors[attack.label] = cost
    return priors


def sensitivity_prior(config: Any) -> float:
    """Planned seconds of one sensitivity claim under ``[sensitivity]`` (its evaluations, else its budget)."""
    if config.evaluations:
        return config.evaluations * SECONDS_PER_EVALUATION
    return float(config.budget_seconds or SENSITIVITY_CLAIM)


def step_audit_prior(config: Any, defense: str) -> float:
    """Planned seconds of ``defense``'s step audit under ``[step_audit]``."""
    pair = config.pair if isinstance(config.pair, str) else config.pair.get(defense, "canonical")
    witness = pair in ("witness", "all")
    draws = STEP_AUDIT * config.draws / STEP_AUDIT_DRAWS
    return draws + (SECONDS_PER_WITNESS_EVALUATION * config.witness_evaluations if witness else 0.0)
