"""The one place tests build the records the gate judges: a cell's result (:func:`make_cell_record`), its attacks
(:func:`make_attack_record`) and its claim (:func:`make_claim`), each read through the report's schema like a run's
(:class:`privaudit.audit.report.records.CellRecord`). Every field a run writes is filled with a neutral value unless
given, so a test names only what it is about."""

from __future__ import annotations

from typing import Any, Mapping

from privaudit.audit.report.records import AttackRecord, CellRecord

#: The field a keyword argument of :func:`make_attack_record` sets on the attack (the bounds' numbers).
ATTACK_FIELDS = ("eps_lb_mechanism", "eps_lb_trajectory")


def make_claim(*, relation: str = "add-remove", unit: str = "example", delta: float = 1e-5,
               paper_accountant: str = "rdp", mechanism: str = "a test mechanism") -> dict[str, Any]:
    """A cell's claim as the report shows it (the claim in full, with its event, goes to ``full_claim``)."""
    return {"mechanism": mechanism, "relation": relation, "unit": unit, "paper_accountant": paper_accountant,
            "delta": delta, "sampler": None, "source": "tests", "notes": []}


def make_attack_record(eps_lower_bound: float | None = None, *, bound: Mapping[str, Any] | None = None,
                       mechanism_bound: Mapping[str, Any] | None = None,
                       trajectory_bound: Mapping[str, Any] | None = None, auc: float | None = 0.6,
                       **numbers: float | None) -> AttackRecord:
    """One attack's result: its (eps, delta) bound ``eps_lower_bound`` with its details ``bound``, and where given
    the bound against the claim's mechanism and the trajectory bound (``eps_lb_mechanism``, ``eps_lb_trajectory``
    in ``numbers``, their details ``mechanism_bound``, ``trajectory_bound``)."""
    unknown = set(numbers) - set(ATTACK_FIELDS)
    if unknown:
        raise TypeError(f"make_attack_record: no field {sorted(unknown)}")
    details: dict[str, Any] = {"bound": None if bound is None else dict(bound)}
    if mechanism_bound is not None:
        details["mechanism_bound"] = dict(mechanism_bound)
    if trajectory_bound is not None:
        details["trajectory_bound"] = dict(trajectory_bound)
    data: dict[str, Any] = {"auc": auc, "tpr_at_fpr": None, "eps_lower_bound": eps_lower_bound,
                            "eps_lb_method": None, "n_members": None, "n_nonmembers": None}
    for name in ("eps_lb_mechanism", "eps_lb_trajectory"):
        if name in numbers:
            data[name], data[f"{name}_method"] = numbers[name], None
    data.update(variant=None, scores=None, details=details)
    return AttackRecord.from_dict(data)


def make_cell_record(cid: str = "digits/x/eps=1/seed=0", *, defense: str = "dp",
                     claim: Mapping[str, Any] | None = None, no_claim: bool = False,
                     epsilon: Mapping[str, float | None] | None = None,
                     attacks: Mapping[str, AttackRecord] | None = None, infinite: bool = False,
                     error: str | None = None, full_claim: Mapping[str, Any] | None = None,
                     claim_checks: Mapping[str, Any] | None = None, utility: Mapping[str, Any] | None = None,
                     details: Mapping[str, Any] | None = None, dataset: str = "digits", seed: int = 0,
                     target_epsilon: float | None = None) -> CellRecord:
    """A cell's result as a run records it: ``claim`` (default :func:`make_claim`'s; ``no_claim``: null), every
    accountant's ``epsilon`` (default rdp 1), each accountant's details (``infinite``: the claim's epsilon is
    infinite), ``attacks`` by label, the claim in full (``full_claim``, in its details), the claim checks, and for a
    cell that failed its ``error``; ``details``: more of its details."""
    epsilon = {"rdp": 1.0} if epsilon is None else dict(epsilon)
    more: dict[str, Any] = {"epsilon": {name: {"infinite": infinite} for name in epsilon}, "error": error}
    if full_claim is not None:
        more["claim"] = dict(full_claim)
    data: dict[str, Any] = {
        "id": cid, "dataset": dataset, "defense": defense, "target_epsilon": target_epsilon,
        "delta": None if no_claim else (claim or make_claim())["delta"], "seed": seed,
        "claim": None if no_claim else dict(claim or make_claim()), "epsilon": epsilon, "utility": utility or {},
        "attacks": {label: a.to_dict() for label, a in (attacks or {}).items()}, "details": {**more, **(details or {})}}
    if claim_checks is not None:
        data["claim_checks"] = dict(claim_checks)
    return CellRecord.from_dict(data)


def planted_record(field: str | None, message: str = "") -> CellRecord:
    """A DP-GCL cell record at epsilon 8 whose trace check found one mismatch (``field``, ``message``) at step 2 (none
    when ``field`` is None), its canary attack without a sound bound: what a planted run's claim checks report."""
    mismatches = [] if field is None else [{"step": 2, "field": field, "message": message}]
    return make_cell_record("x", defense="dp-gcl", claim=make_claim(paper_accountant="pld"), epsilon={"pld": 8.0},
                            attacks={"canary": make_attack_record(None, auc=None)},
                            claim_checks={"trace": {"steps": 3, "alpha": 1e-6, "mismatches": mismatches}})
