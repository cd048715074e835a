"""Gate power as a measured property: ``privaudit gate-power SUITE``.

A PASS means something only if the gate would have failed a false claim. For every gated DP-SGD-style or federated
defense of a suite (a defense with a planted control, :data:`privaudit.defenses.controls.CONTROLS`, and a primary
attack) and every epsilon of it, this plants an under-noising of factor f (:data:`FACTORS`) into the defense -- its
control with ``control_factor = f`` -- trains it on ``seeds`` seeds, runs the defense's primary attack (its bounds
and, for white-box canaries, the released-noise check, :mod:`privaudit.attacks.released_noise`) and the claim checks
(trace and own step audit, :mod:`privaudit.audit.run.claim_checks`; DP-SGD-style defenses only), and judges the planted
cell as a positive control of the suite's gate (:func:`privaudit.audit.gate.judge.gate_cells`) at the family size the
suite's gate would use with the planted cell added (:func:`suite_family`; its bounds recomputed at that Bonferroni
level). A factor is *caught* when the gate catches at least ``needed`` of the ``seeds`` runs.

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
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from privaudit.core.errors import ConfigError, check_positive, one_of

FACTORS = (1.02, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0)
SEEDS, NEEDED = 10, 9
PLANTS = ("claim", "noise")
#: The planted cell's own gated comparisons: its primary bound and its step audit's two pairs.
PLANTED_COMPARISONS = 3


@dataclass(frozen=True)
class Planted:
    """One gated DP defense of the suite with its control and its primary attack."""

    label: str
    name: str
    control: str
    params: dict[str, Any]
    epsilons: tuple[float, ...]
    attack: Any  # the suite's AttackEntry of the primary attack


@dataclass(frozen=True)
class CellRun:
    """One cell of a planted defense to run, and where (plain, picklable data)."""

    planted: Planted
    epsilon: float
    seed: int
    dataset: str
    data_dir: str | None
    delta: float
    device: str
    threads: int


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


def _is_dp_sgd(name: str) -> bool:
    from privaudit.defenses.dp.base import DPDefense
    from privaudit.defenses.registry import DEFENSES, defense_class

    return name in DEFENSES and issubclass(defense_class(name), DPDefense)


def plantable(suite: Any) -> tuple[list[Planted], list[str]]:
    """The suite's gated DP defenses with a control and a primary attack, and why the others are not."""
    from privaudit.defenses.controls import CONTROLS

    attacks = {a.label: a for a in suite.attacks}
    out, skipped = [], []
    for d in suite.defenses:
        if d.control or not d.private:
            continue
        primary = d.primary or (d.attacks[0] if len(d.attacks) == 1 else None)
        if d.name not in CONTROLS:
            skipped.append(f"{d.label}: no planted control for {d.name!r} (controls exist for {', '.join(CONTROLS)})")
        elif primary is None or primary not in attacks:
            skipped.append(f"{d.label}: no primary attack declared (primary = \"<attack label>\")")
        else:
            eps = tuple(e for e in d.epsilons if e is not None)
            out.append(Planted(d.label, d.name, CONTROLS[d.name].name, dict(d.params), eps, attacks[primary]))
    return out, skipped


def suite_family(suite: Any) -> int:
    """The number of comparisons the suite's gate counts (Bonferroni), from its grid: each private cell's primary
    bound (every attack when no primary is declared), and two step-audit pairs per DP-SGD-style cell."""
    per_seed = 0
    for d in suite.defenses:
        if not d.private:
            continue
        own = (1 if d.primary else len(d.attacks)) + (2 if _is_dp_sgd(d.name) else 0)
        per_seed += own * len(d.epsilons)
    return per_seed * len(suite.datasets) * len(suite.seeds)


def planted_comparisons(control: str) -> int:
    """The planted cell's own gated comparisons: :data:`PLANTED_COMPARISONS` for a DP-SGD-style control, its primary
    bound alone for a federated one (no step audit)."""
    return PLANTED_COMPARISONS if _is_dp_sgd(control) else 1


def run_planted(job: PlantedRun) -> dict[str, Any]:
    """Train the planted control, run its claim checks and primary attack, and return its cell record (PLD epsilon)."""
    p = job.planted
    params = {**p.params, "control_factor": job.factor, "plant": job.plant}
    return cell_record(p.control, params, p.label, p.attack, job,
                       f"{p.label}/eps={job.epsilon:g}/{job.plant}x{job.factor:g}/seed={job.seed}")


def cell_record(name: str, params: dict[str, Any], label: str, attack: Any, job: CellRun,
                cell_id: str) -> dict[str, Any]:
    """Train defense ``name`` at the job's epsilon and seed, run its claim checks and ``attack``, and return the
    cell record the gate judges (PLD epsilon)."""
    import torch

    from privaudit.accountants import epsilon as account
    from privaudit.attacks import Target
    from privaudit.attacks.registry import make_attack
    from privaudit.attacks.shadow_models import resolve_defense
    from privaudit.audit.run.cell import attack_record, claim_record
    from privaudit.audit.run.claim_checks import run_claim_checks
    from privaudit.audit.device import resolve_device
    from privaudit.core.datasets import load_dataset
    from privaudit.defenses.base import Budget

    torch.set_num_threads(job.threads)
    device = str(resolve_device(job.device))
    data = load_dataset(job.dataset, seed=job.seed, data_dir=job.data_dir)
    budget = Budget(target_epsilon=job.epsilon, delta=job.delta)
    trained = resolve_defense(name, params).fit(data, budget, job.seed, device=device, progress=False)
    pld = account(trained.claim, "pld")
    record = {"id": cell_id, "defense": label, "claim": claim_record(trained.claim), "epsilon": {"pld": pld.epsilon},
              "details": {"epsilon": {"pld": pld.to_dict()}, "claim": trained.claim.to_dict()}, "attacks": {}}
    checks = run_claim_checks(name, params, trained, data, target_epsilon=job.epsilon,
                              delta=float(trained.claim.delta), seed=job.seed)
    if checks is not None:
        record["claim_checks"] = checks[0]
    target = Target(trained, data, name, params, budget, job.seed, device)
    result = make_attack(attack.name, attack.params).run(target)
    record["attacks"][attack.label] = attack_record(result)
    return record


def judge_planted(record: dict[str, Any], family: int, config: Any) -> tuple[bool, list[str]]:
    """Whether the suite's gate catches the planted cell at family size ``family``, and what caught it."""
    from privaudit.audit.gate.judge import gate_cells

    gate = gate_cells([record], config, {record["defense"]: (next(iter(record["attacks"])), True)},
                      family=family)[0]
    return bool(gate.get("caught")), list(gate.get("caught_by", ()))


def planted_delta(suite: Any, planted: Planted) -> float:
    """The delta the suite gives the planted defense (1e-5 where it gives none)."""
    return next((d.delta for d in suite.defenses if d.label == planted.label and d.delta is not None), None) or 1e-5


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
                    print(f"gate-power: {p.label} eps={eps:g} {plant} x{factor:g}: caught {row.caught}/{row.runs} "
                          f"({', '.join(f'{k} {v}' for k, v in sorted(row.caught_by.items())) or '-'})"
                          + (f"; {len(row.errors)} errored: {row.errors[0]}" if row.errors else ""),
                          file=sys.stderr, flush=True)
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


def statements(smallest: Sequence[dict[str, Any]], factors: Sequence[float], seeds: int, needed: int) -> list[str]:
    """Per epsilon: the largest smallest-caught factor over the defenses and plants, as a sentence."""
    out = []
    for eps in sorted({s["epsilon"] for s in smallest}):
        at = [s for s in smallest if s["epsilon"] == eps]
        missed = [s for s in at if s["smallest_caught"] is None]
        if missed:
            out.append(f"at epsilon {eps:g} this gate misses a noise shortfall of up to {max(factors):g}x in "
                       + ", ".join(f"{s['defense']} ({s['plant']})" for s in missed)
                       + f" (fewer than {needed} of {seeds} seeds caught)")
            continue
        worst = max(s["smallest_caught"] for s in at)
        out.append(f"this gate detects a noise shortfall of {worst:g}x or more at epsilon {eps:g} "
                   f"({needed} of {seeds} seeds; defenses {', '.join(sorted({s['defense'] for s in at}))}; "
                   f"plants {', '.join(sorted({s['plant'] for s in at}))})")
    return out


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
