"""A planted cell, what the gate-power measurements share (:mod:`privaudit.audit.verify.gate_power`: noise
shortfalls; :mod:`privaudit.audit.verify.gate_power_bugs`: a bug catalogue): the suite's gated DP defenses a plant can
go into (:func:`plantable`), the family size the suite's gate counts (:func:`suite_family`) and one planted cell run
end to end into the record the gate judges (:func:`cell_record`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from privaudit.audit.report.records import CellRecord

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


def planted_delta(suite: Any, planted: Planted) -> float:
    """The delta the suite gives the planted defense (1e-5 where it gives none)."""
    return next((d.delta for d in suite.defenses if d.label == planted.label and d.delta is not None), None) or 1e-5


def cell_record(name: str, params: dict[str, Any], label: str, attack: Any, job: CellRun,
                cell_id: str) -> CellRecord:
    """Train defense ``name`` at the job's epsilon and seed, run its claim checks and ``attack``, and return the
    cell record the gate judges (PLD epsilon; no utility measured)."""
    import torch

    from privaudit.accountants import epsilon as account
    from privaudit.attacks import Target
    from privaudit.attacks.registry import make_attack
    from privaudit.attacks.membership.shadow_models import resolve_defense
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
    record = {"id": cell_id, "dataset": job.dataset, "defense": label, "target_epsilon": job.epsilon,
              "delta": float(trained.claim.delta), "seed": job.seed, "claim": claim_record(trained.claim),
              "epsilon": {"pld": pld.epsilon}, "utility": None, "attacks": {},
              "details": {"epsilon": {"pld": pld.to_dict()}, "claim": trained.claim.to_dict()}}
    checks = run_claim_checks(name, params, trained, data, target_epsilon=job.epsilon,
                              delta=float(trained.claim.delta), seed=job.seed)
    if checks is not None:
        record["claim_checks"] = checks[0]
    target = Target(trained, data, name, params, budget, job.seed, device)
    result = make_attack(attack.name, attack.params).run(target)
    record["attacks"][attack.label] = attack_record(result)
    return CellRecord.from_run(record)
