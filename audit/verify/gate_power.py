"""Gate power as a measured property: ``privaudit gate-power SUITE``.

A PASS means something only if the gate would have failed a false claim. For every gated DP-SGD-style or federated
defense of a suite (a defense with a planted control, :data:`privaudit.defenses.controls.CONTROLS`, and a primary
attack) and every epsilon of it, this plants an under-noising of factor f (:data:`FACTORS`) into the defense -- its
control with ``control_factor = f`` -- trains it on ``seeds`` seeds, runs the defense's primary attack (its bounds
and, for white-box canaries, the released-noise check, :mod:`privaudit.attacks.noise.released_noise`) and the claim
checks (trace and own step audit, :mod:`privaudit.audit.run.claim_checks`; DP-SGD-style defenses only), and judges the
planted cell as a positive control of the suite's gate (:func:`privaudit.audit.gate.judge.gate_cells`) at the family
size the suite's gate would use with the planted cell added (:func:`suite_family`; its bounds recomputed at that
Bonferroni level). A factor is *caught* when the gate catches at least ``needed`` of the ``seeds`` runs.

Two plants by default (``plants``; :mod:`privaudit.defenses.controls`): ``claim`` (the claim accounts f times the
noise the run adds: every record shows it) and ``noise`` (every record states the calibrated noise, the release
adds 1/f of it: only the canaries' end-to-end observations can see it, the hardest case). Factors are tried from
the smallest; the first caught is the defense's smallest caught factor, and larger ones are not run (a larger
shortfall is only easier to catch: every instrument's statistic grows with it). Seeds stop as soon as the
outcome is decided (``needed`` caught, or more than ``seeds - needed`` missed). The epsilon compared is the PLD
accountant's alone (the gate uses the smallest applicable one, which is at most PLD's), so the power measured
here is at most the suite gate's.

The result says, per epsilon, the largest smallest-caught factor over the defenses and plants: "this gate detects
a noise shortfall of 1.25x or more at epsilon 8".

This module runs the measurement; the planted cell is :mod:`privaudit.audit.verify.planted`'s, its verdict
:mod:`privaudit.audit.verify.power_gate`'s and the sentences :mod:`privaudit.audit.verify.power_render`'s (their names
stay importable from here).
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from privaudit.audit.verify.planted import (PLANTED_COMPARISONS, CellRun, Planted, cell_record, plantable,
                                            planted_comparisons, planted_delta, suite_family)
from privaudit.audit.verify.power_gate import judge_as_control as judge_planted
from privaudit.audit.verify.power_render import factor_line, statements
from privaudit.audit.report.records import CellRecord
from privaudit.core.errors import ConfigError, check_positive, one_of

FACTORS = (1.02, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0)
SEEDS, NEEDED = 10, 9
PLANTS = ("claim", "noise")

__all__ = ["FACTORS", "NEEDED", "PLANTED_COMPARISONS", "PLANTS", "SEEDS", "CellRun", "FactorRow", "Planted",
           "PlantedRun", "judge_planted", "measure", "plantable", "planted_comparisons", "planted_delta",
           "run_planted", "statements", "suite_family"]


@dataclass(frozen=True)
class PlantedRun(CellRun):
    """A cell of the defense's control, planted with ``plant`` at ``factor``."""

    plant: str = "claim"
    factor: float = 2.0


@dataclass
class FactorRow:
    """A factor's outcome for one defense, epsilon and plant: runs, catches and what caught them."""

    defense: str
    epsilon: float
    plant: str
    factor: float
    runs: int = 0
    caught: int = 0
    caught_by: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"defense": self.defense, "epsilon": self.epsilon, "plant": self.plant, "factor": self.factor,
                "runs": self.runs, "caught": self.caught, "caught_by": dict(self.caught_by), "errors": self.errors}


def run_planted(job: PlantedRun) -> CellRecord:
    """Train the planted control, run its claim checks and primary attack, and return its cell record (PLD epsilon)."""
    p = job.planted
    params = {**p.params, "control_factor": job.factor, "plant": job.plant}
    return cell_record(p.control, params, p.label, p.attack, job,
                       f"{p.label}/eps={job.epsilon:g}/{job.plant}x{job.factor:g}/seed={job.seed}")


def _jobs(suite: Any, planted: Planted, eps: float, plant: str, factor: float, seeds: Sequence[int]
          ) -> list[PlantedRun]:
    return [PlantedRun(planted, eps, s, suite.datasets[0], suite.data_dir, planted_delta(suite, planted),
                       suite.device, suite.threads, plant=plant, factor=factor) for s in seeds]


def _factor_row(pool: ProcessPoolExecutor, jobs: list[PlantedRun], family: int, config: Any, seeds: int,
                needed: int, workers: int) -> FactorRow:
    """Run ``jobs`` (one per seed) ``workers`` at a time until the outcome is decided; the factor's row."""
    first = jobs[0]
    row = FactorRow(first.planted.label, first.epsilon, first.plant, first.factor)
    pending = list(jobs)
    while pending and row.caught < needed and row.runs - row.caught <= seeds - needed:
        batch, pending = pending[:workers], pending[workers:]
        for job, future in [(j, pool.submit(run_planted, j)) for j in batch]:
            row.runs += 1
            try:
                caught, by = judge_planted(future.result(), family, config)
            except (ConfigError, RuntimeError, ValueError) as exc:
                row.errors.append(f"seed {job.seed}: {type(exc).__name__}: {exc}")
                continue
            row.caught += caught
            for name in by:
                row.caught_by[name] = row.caught_by.get(name, 0) + 1
    return row


def measure(suite: Any, *, factors: Sequence[float] = FACTORS, seeds: int = SEEDS, needed: int = NEEDED,
            plants: Sequence[str] = PLANTS, defenses: Sequence[str] | None = None,
            epsilons: Sequence[float] | None = None, workers: int = 2, progress: bool = True) -> dict[str, Any]:
    """The suite's gate power (module docstring): every factor row run, the smallest caught factor per defense,
    epsilon and plant, and per epsilon the statement."""
    _validate(factors, seeds, needed, plants, workers)
    planted, skipped = plantable(suite)
    if defenses is not None:
        planted = [p for p in planted if p.label in defenses or p.name in defenses]
    if not planted:
        raise ConfigError("gate-power: no gated DP-SGD-style defense to plant into" + (f" ({'; '.join(skipped)})"
                                                                                      if skipped else ""))
    base = suite_family(suite)
    family = base + PLANTED_COMPARISONS
    rows, smallest = [], []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for p, eps, plant in _grid(planted, epsilons, plants):
            found = None
            own = base + planted_comparisons(p.control)
            for factor in sorted(factors):
                row = _factor_row(pool, _jobs(suite, p, eps, plant, factor, range(seeds)), own, suite.gate,
                                  seeds, needed, workers)
                rows.append(row.to_dict())
                if progress:
                    print(factor_line(rows[-1]), file=sys.stderr, flush=True)
                if row.caught >= needed:
                    found = factor
                    break
            smallest.append({"defense": p.label, "epsilon": eps, "plant": plant, "smallest_caught": found})
    return {"suite": suite.name, "family": family, "seeds": seeds, "needed": needed, "factors": sorted(factors),
            "plants": list(plants), "skipped": skipped, "rows": rows, "smallest": smallest,
            "errors": sum(len(r["errors"]) for r in rows), "statements": statements(smallest, factors, seeds, needed)}


def _grid(planted: Sequence[Planted], epsilons: Sequence[float] | None,
          plants: Sequence[str]) -> Iterator[tuple[Planted, float, str]]:
    for p in planted:
        for eps in p.epsilons:
            if epsilons is None or any(abs(eps - e) < 1e-12 for e in epsilons):
                for plant in plants:
                    yield p, eps, plant


def _validate(factors: Sequence[float], seeds: int, needed: int, plants: Sequence[str], workers: int) -> None:
    from privaudit.defenses.controls import PLANTS as ALL_PLANTS

    if not factors or any(not f > 1 for f in factors):
        raise ConfigError(f"--factors: every factor must be > 1 (a shortfall), got {list(factors)}")
    check_positive("--seeds", seeds)
    check_positive("--workers", workers)
    if not 1 <= needed <= seeds:
        raise ConfigError(f"--needed: must lie in [1, --seeds={seeds}], got {needed}")
    for plant in plants:
        if plant not in ALL_PLANTS:
            raise one_of("--plants", plant, ALL_PLANTS)
