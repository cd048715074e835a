"""``check_claims``: search every registered claim for a violating neighbouring pair.

For each claim, each of its settings (see :mod:`privaudit.audit.sensitivity.register`) gets an equal share of
what is left of the claim's budget; the search (:mod:`privaudit.audit.sensitivity.search`) runs on the target
the defense's privatized quantity gives at that setting. The claim's result is the setting with the
largest observed / bound ratio; once a setting violates its bound the remaining settings are skipped.
A violated claim's witness is written to ``witness_dir`` (:mod:`privaudit.audit.sensitivity.witness`). A
setting whose quantity cannot be built or searched is named in ``config.errors`` and makes the verdict
``error`` (unless another setting violated the bound): the gate and ``privaudit sensitivity`` fail on it.

Each result is a :class:`SensitivityResult`, whose ``to_dict()`` has exactly the keys ``claim, source,
relation, bound, observed, ratio, verdict, witness, config`` (``config`` holds the setting, the bound's
parameters, the defense's own bound, the tolerance, the search phases, every setting's result and the
claim's notes; ``budget``: pairs, restarts, the best ratio per phase and whether the search was still
improving; ``closed_form_supremum``: the quantity's derived supremum where known, with the search's
share of it; ``growth``: for claims with a growth table, the ratio per |B| or temperature).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privaudit.audit.failures import failure_line
from privaudit.core.errors import ConfigError, check_positive
from privaudit.audit.sensitivity.register import ClaimSpec, Context, select
from privaudit.audit.sensitivity.search import MIN_PAIRS, SearchResult, search
from privaudit.audit.sensitivity.evaluator import Target
from privaudit.audit.sensitivity.verdict import is_violation, tolerance, verdict
from privaudit.audit.sensitivity.witness import num_threads, save_witness
from privaudit.defenses.training.seeding import torch_generator

RESULT_KEYS = ("claim", "source", "relation", "bound", "observed", "ratio", "verdict", "witness", "config")
DEFAULT_WITNESS_DIR = Path("reports") / "sensitivity" / "witnesses"


def _ratio(observed: float | None, bound: float | None) -> float | None:
    if observed is None or bound is None:
        return None
    if bound == 0:
        return math.inf if observed > 0 else 0.0
    return observed / bound


def _setting_summary(target: Target, res: SearchResult) -> dict[str, Any]:
    observed = res.observed
    tol = tolerance(res.best.fa, res.best.fb, target.bound, target.norm) if res.best is not None else None
    return {"setting": target.setting, "params": target.params, "bound": target.bound, "observed": observed,
            "ratio": _ratio(observed, target.bound), "tolerance": tol,
            "violated": bool(observed is not None and is_violation(observed, target.bound, tol or 0.0)),
            "evaluations": res.evaluations, "seconds": round(res.seconds, 3), "covered": res.covered,
            "phases": res.phases, **target.extra}


def budget_account(per_setting: list[dict[str, Any]], best_index: int = 0) -> dict[str, Any]:
    """Budget honesty: pairs, restarts and the best ratio per phase over all settings; still improving?

    A phase's ``best_ratio`` is the largest over settings of the best ratio at the phase's end;
    ``still_improving`` is True when, in the reported setting (``best_index``), the last phase raised
    the best in its final quarter of pairs; ``improving_settings`` counts the settings where it did.
    """
    phases: dict[str, dict[str, Any]] = {}
    for s in per_setting:
        for name, ph in s["phases"].items():
            if not isinstance(ph, dict) or "best_ratio" not in ph:
                continue
            acc = phases.setdefault(name, {"pairs": 0, "best_ratio": None, "improved_in": 0})
            acc["pairs"] += int(ph.get("pairs", 0))
            if ph.get("best_ratio") is not None:
                acc["best_ratio"] = max(acc["best_ratio"] or -math.inf, float(ph["best_ratio"]))
            acc["improved_in"] += bool(ph.get("improved"))
    return {"pairs": sum(int(s["phases"].get("pairs_total", s["evaluations"])) for s in per_setting),
            "restarts": sum(int(s["phases"].get("restarts", 0)) for s in per_setting),
            "phases": phases, "still_improving": bool(per_setting[best_index]["phases"].get("still_improving")),
            "improving_settings": sum(bool(s["phases"].get("still_improving")) for s in per_setting)}


def growth_table(spec: ClaimSpec, per_setting: list[dict[str, Any]]) -> dict[str, Any]:
    """The measured ratio against each value of ``spec.growth`` (|B| or tau), and the bound they suggest.

    Each row: the parameter's value, the claimed bound, the observed maximum, observed / bound and
    observed / (|B| C) (or / C for a temperature table). ``suggested`` is the smallest multiple k of
    |B| C (resp. C) that covers every measurement: the measurements say the sensitivity is at least
    that large (a lower bound), e.g. DPCL's sound 4|B|C.
    """
    rows = []
    for s in per_setting:
        p = s["params"]
        c = float(p.get("C", 1.0))
        scale = int(p["B"]) * c if "B" in spec.growth else c
        key = spec.growth[0]
        value = p.get(key) if key in p else s["setting"].get("overrides", {}).get("temperature")
        rows.append({key: value, "B": p.get("B"), "bound": s["bound"], "observed": s["observed"], "ratio": s["ratio"],
                     "per_unit": None if s["observed"] is None else s["observed"] / scale,
                     "violated": s["violated"], "seconds": s["seconds"]})
    ks = [r["per_unit"] for r in rows if r["per_unit"] is not None]
    unit = "|B| C" if "B" in spec.growth else "C"
    return {"by": spec.growth[0], "rows": rows,
            "suggested": None if not ks else {"multiple": max(ks), "of": unit,
                                              "text": f"observed <= {max(ks):.3g} {unit} at every setting tried"}}


@dataclass(frozen=True)
class SensitivityResult:
    """One claim's check (see the module doc): the claim, its source and relation, the bound at the reported
    setting, the largest distance observed there and their ratio, the verdict (``holds``, ``violated``,
    ``inconclusive`` or ``error``: :mod:`~privaudit.audit.sensitivity.verdict`), the witness file of a violation
    (None otherwise) and the ``config`` details."""

    claim: str
    source: str
    relation: str
    bound: float | None
    observed: float | None
    ratio: float | None
    verdict: str
    witness: str | None
    config: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``privaudit sensitivity --json``, the report's ``sensitivity``), keys in
        :data:`RESULT_KEYS` order."""
        return {k: getattr(self, k) for k in RESULT_KEYS}


@dataclass(frozen=True)
class _Searched:
    """What searching a claim's settings gave: one summary per searched setting, the best (target, result) by
    observed / bound, the settings that could not be built, the wall-clock spent and the settings skipped
    after a violation."""

    per_setting: list[dict[str, Any]]
    best: tuple[Target, SearchResult] | None
    errors: list[str]
    setup_seconds: float
    search_seconds: float
    skipped: int


def _rubinstein_pool(spec: ClaimSpec, target: Target) -> dict[str, Any] | None:
    """A black-box claim's candidate units for the Rubinstein-Alda phase (the domain's pool), if it has one."""
    if not spec.black_box or not hasattr(target.domain, "pool_x"):
        return None
    pool = {k: v for k, v in (("x", target.domain.pool_x), ("y", getattr(target.domain, "pool_y", None)))
            if v is not None}
    if "y" in pool:
        pool["y"] = pool["y"].long()
    return pool


def _search_settings(spec: ClaimSpec, ctx: Context, budget: float, evaluations: int | None) -> _Searched:
    """Search each setting in turn, each with an equal share of what is left of the budget (or of the
    evaluations); without a growth table, stop after the first violated setting."""
    settings = list(spec.settings)
    per_setting: list[dict[str, Any]] = []
    best: tuple[Target, SearchResult] | None = None
    best_ratio = -math.inf
    errors: list[str] = []
    setup_seconds = spent = 0.0
    for index, setting in enumerate(settings):
        if not spec.growth and best is not None and per_setting and any(s.get("violated") for s in per_setting):
            return _Searched(per_setting, best, errors, setup_seconds, spent, len(settings) - index)
        start = time.perf_counter()
        try:
            target = spec.target(setting, ctx)
            setup_seconds += time.perf_counter() - start
            gen = torch_generator(ctx.seed, "sensitivity", spec.id, index)
            pool = _rubinstein_pool(spec, target)
            if evaluations is not None:
                res = search(target, gen, evaluations=max(evaluations // len(settings), 4), rubinstein_pool=pool)
            else:
                share = max((budget - spent) / (len(settings) - index), 0.05 * budget / len(settings))
                res = search(target, gen, seconds=share, rubinstein_pool=pool)
        except Exception as exc:  # noqa: BLE001 - a setting that raises is named; the claim's verdict is "error"
            errors.append(failure_line(f"setting {setting.to_dict()}", exc))
            continue
        spent += res.seconds
        summary = _setting_summary(target, res)
        per_setting.append(summary)
        ratio = summary["ratio"] if summary["ratio"] is not None else -math.inf
        if best is None or ratio > best_ratio:
            best, best_ratio = (target, res), ratio
    return _Searched(per_setting, best, errors, setup_seconds, spent, 0)


STILL_IMPROVING = ("the search was still improving at its budget (its last phase raised the best in its final "
                   "quarter): the observed value is a lower bound that more budget would likely raise")


def _best_details(spec: ClaimSpec, target: Target, res: SearchResult, tol: float, v: str,
                  searched: _Searched) -> dict[str, Any]:
    """The ``config`` entries of the reported (best) setting: its parameters and tolerance, every setting's
    summary, the budget account, the closed-form supremum, the growth table and any reason or warning."""
    found, per_setting = res.best, searched.per_setting
    details: dict[str, Any] = {"setting": target.setting, "params": target.params, "tolerance": tol,
                               "evaluations": sum(s["evaluations"] for s in per_setting), "settings": per_setting,
                               **target.extra}
    if found is not None:
        details["randomness"] = int(found.pair.randomness)
    if searched.errors:
        details["errors"] = searched.errors
    if searched.skipped:
        details["skipped_settings"] = searched.skipped
    if v == "error":
        details["reason"] = "; ".join(searched.errors)
    elif v == "inconclusive":
        details["reason"] = ("the bound is sampled (no closed form): the search can refute it but not confirm it"
                             if not spec.closed_form else
                             f"the budget did not cover every setting (each needs {MIN_PAIRS} pairs and both phases)")
    details["budget"] = budget_account(per_setting, best_index=per_setting.index(next(
        s for s in per_setting if s["setting"] == target.setting)))
    value = None if spec.supremum is None else spec.supremum[0](target.params)
    if value is not None:
        value = float(value)
        observed = found.distance if found is not None else None
        details["closed_form_supremum"] = {"value": value, "formula": spec.supremum[1],
                                           "bound_ratio": value / target.bound,
                                           "search_ratio": None if observed is None else observed / value}
    if spec.growth:
        details["growth"] = growth_table(spec, per_setting)
    if details["budget"]["still_improving"]:
        details["still_improving"] = STILL_IMPROVING
    return details


def check_claim(spec: ClaimSpec, ctx: Context, *, budget_seconds: float | None = None,
                evaluations: int | None = None,
                witness_dir: str | Path | None = DEFAULT_WITNESS_DIR) -> SensitivityResult:
    """Search one claim (all its settings) and return its result (see module doc)."""
    budget = float(spec.budget_seconds if budget_seconds is None else budget_seconds)
    searched = _search_settings(spec, ctx, budget, evaluations)
    config: dict[str, Any] = {"defense": spec.defense, "variant": spec.variant or None, "formula": spec.formula,
                              "norm": spec.norm, "closed_form": spec.closed_form, "context": ctx.describe(),
                              "budget_seconds": None if evaluations is not None else budget,
                              "budget_evaluations": evaluations, "setup_seconds": round(searched.setup_seconds, 3),
                              "search_seconds": round(searched.search_seconds, 3), "notes": list(spec.notes)}
    if searched.best is None:
        config["reason"] = "; ".join(searched.errors) or "no setting could be searched"
        config["errors"] = searched.errors
        return SensitivityResult(spec.id, spec.source, spec.relation, None, None, None,
                                 "error" if searched.errors else "inconclusive", None, config)
    target, res = searched.best
    found = res.best
    observed = found.distance if found is not None else None
    tol = tolerance(found.fa, found.fb, target.bound, target.norm) if found is not None else 0.0
    covered = all(s["covered"] for s in searched.per_setting) and not searched.errors and not searched.skipped
    v = verdict(observed, target.bound, tol, closed_form=spec.closed_form, covered=covered)
    if searched.errors and v != "violated":
        v = "error"  # a setting raised: the check did not do its work (a violation elsewhere stands)
    config.update(_best_details(spec, target, res, tol, v, searched))
    ratio = _ratio(observed, target.bound)
    witness = None
    if v == "violated" and witness_dir is not None and found is not None:
        witness = str(save_witness(witness_dir, spec, target, found, ctx.describe(), {
            "bound": target.bound, "observed": observed, "tolerance": tol, "ratio": ratio, "verdict": v}))
    return SensitivityResult(spec.id, spec.source, spec.relation, target.bound, observed, ratio, v, witness, config)


def check_claims(claim_ids: list[str] | None = None, *, budget_seconds: float | None = None, seed: int = 0,
                 progress: bool = False, witness_dir: str | Path | None = DEFAULT_WITNESS_DIR,
                 dataset: str = "digits", data_dir: str | None = None, evaluations: int | None = None,
                 include_reference: bool = False, threads: int | None = 1) -> list[SensitivityResult]:
    """Check the claims ``claim_ids`` (None: every paper claim in the register).

    ``budget_seconds`` is the search time **per claim** (None: each claim's default, chosen so all
    claims take a few minutes on a 2-core CPU), shared among the claim's settings; ``evaluations``
    replaces it by a number of evaluated pairs per claim (reproducible: same seed, same numbers).
    ``seed`` fixes the dataset split, the defenses' models and the search. A bare claim key (e.g.
    ``dpgcl.group``) selects all its variants; ``reference.*`` claims are included only when named
    (or with ``include_reference``). ``threads``: torch intra-op threads during the checks (None:
    leave as is). The default 1 is the fast choice for these tiny batches, and witnesses record the
    count so the replay runs with the same one (reductions may round differently with another).
    """
    if budget_seconds is not None:
        check_positive("budget_seconds", budget_seconds)
    if evaluations is not None and (int(evaluations) != evaluations or evaluations < 1):
        raise ConfigError(f"evaluations: must be a positive integer, got {evaluations!r}")
    from tqdm.auto import tqdm

    specs = select(claim_ids, include_reference=include_reference)
    ctx = Context(seed, dataset, data_dir)
    results = []
    bar = tqdm(specs, desc="sensitivity", disable=None if progress else True, leave=False)
    with num_threads(threads):
        for spec in bar:
            bar.set_postfix(claim=spec.id)
            results.append(check_claim(spec, ctx, budget_seconds=budget_seconds, evaluations=evaluations,
                                       witness_dir=witness_dir))
    bar.close()
    return results
