"""Audit a user's own PyTorch classifier on the user's own data: a claim in, a verdict, its ceiling and a report out.

The user gives a factory ``package.module:function`` (it builds the model), the trained weights (a state_dict in
``.safetensors``, or ``.pt``/``.pth`` loaded with ``torch.load(weights_only=True)``: no code runs on load), and
**the examples the model was trained on and examples it was not** (``members``, ``nonmembers``: ``.npz`` with
``x``, ``y``; CSV features with a label column; or ImageFolder directories; see
:mod:`privaudit.core.datasets.user_files`), optionally a ``population`` of other examples from the same
distribution. Nothing is drawn from privaudit's own splits: without the user's members and non-members there is
nothing to audit. Inputs are (N, ...) tensors as the model takes them: images, or tabular features for an MLP.

Attacks on the given weights, scoring the members against the non-members: ``loss`` (Yeom et al. 2018),
``lira`` (Carlini et al. 2022) and ``rmia`` (Zarifzadeh et al. 2024) with reference models built by the same
factory, trained on random halves of the candidates by the user's ``train_fn`` (``module:function``, called
``train_fn(model, x, y, seed=...)``, training in place) or a default SGD loop; RMIA compares with the
population (needed for both). Their one-run bound (Steinke, Nasr & Jagielski 2023) assumes each candidate was
included by an independent fair coin.

``canary`` (needs ``train_fn``: it audits the training recipe, not the given weights): ``canary_runs`` runs on
each side of a fixed pair, D = the members and D' = D plus one canary (:mod:`privaudit.audit.user.model.canary_runs`).
It is the design that can refute a DP-SGD claim at a large epsilon; ``privaudit plan`` sizes it.

The claim (:mod:`privaudit.audit.user.claim`) is stated, or read from an Opacus accountant's saved state (then
every bound is also tested against the claim's own mechanism). The verdict rests on one test fixed before any
score: the canary runs when they run, else LiRA, else RMIA, else LOSS; against the claim's mechanism when it
has one. Every attack reports its ceiling (the largest bound its design could show).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn as nn

from privaudit.audit.user.model.final_model import DEFAULT_CANARY_RUNS, DESIGNS, FinalModelDesign
from privaudit.audit.user.claim import UserClaim, Verdict, claim_from_args, judge
from privaudit.core.errors import ConfigError
from privaudit.audit.user.model.model_bounds import attack_summary, crafted_summary
from privaudit.audit.user.model.model_result import ModelAudit, VERDICT_ORDER, output_names

ATTACKS_RUN = ("loss", "lira", "rmia", "canary")


def load_state_dict(weights: str | Path) -> dict[str, torch.Tensor]:
    """A state_dict from ``.safetensors`` or ``.pt``/``.pth`` (``torch.load(weights_only=True)``)."""
    from privaudit.core.datasets.arrays import read_torch

    path = Path(weights)
    if not path.is_file():
        raise ConfigError(f"--weights: {path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in (".safetensors", ".pt", ".pth", ".bin"):
        raise ConfigError(f"--weights: {path}: unknown type {suffix or '(none)'!r}; accepted: .safetensors, .pt, .pth")
    if suffix != ".safetensors":
        state = read_torch(path, "--weights")
    else:
        from safetensors import SafetensorError

        from privaudit.core.io import load_tensors

        try:
            state = load_tensors(path)
        except (SafetensorError, OSError, ValueError) as exc:
            raise ConfigError(f"--weights: {path}: cannot read a state_dict ({type(exc).__name__}: "
                              f"{str(exc)[:200]})") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"--weights: {path}: not a state_dict (a mapping of names to tensors)")
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise ConfigError(f"--weights: {path}: {len(bad)} tensor(s) hold NaN or infinite values (first: {bad[0]!r}); "
                          "the model cannot score anything")
    return state


def audit_model(factory: str, weights: str | Path | Mapping[str, torch.Tensor], *, members: Any = None,
                nonmembers: Any = None, population: Any = None, train_fn: str | None = None,
                claimed_epsilon: float | None = None, delta: float | None = None, relation: str = "add-remove",
                unit: str = "example", opacus_state: str | Path | None = None, claim: UserClaim | None = None,
                attacks: Sequence[str] | None = None, reference_models: int = 8, canary_runs: int = DEFAULT_CANARY_RUNS,
                canary_design: str = "crafted", canary_pair_size: int = 32, canary_scale: float = 10.0,
                epochs: int = 20, batch_size: int = 64, lr: float = 0.05, beta: float = 0.05, seed: int = 0,
                out: str | Path | None = None, force: bool = False, progress: bool = False) -> ModelAudit:
    """Audit the classifier ``factory()`` with ``weights`` on the user's ``members`` / ``nonmembers`` (module
    docstring), and with ``train_fn``, its training recipe by canary runs.

    ``members``, ``nonmembers``, ``population``: paths (``.npz`` with x and y, ``.csv``, an ImageFolder directory).
    ``attacks``: from :data:`ATTACKS_RUN` (None: loss; lira and rmia with a population; canary with a
    ``train_fn``). ``reference_models``: LiRA's and RMIA's (even, >= 4; shared). ``canary_runs``: runs on each
    side of the canary pair (>= 4). ``epochs``, ``batch_size``, ``lr``: the default SGD loop's (unused with
    ``train_fn``). The claim: ``claimed_epsilon`` at ``delta`` (``relation``, ``unit``), or ``opacus_state``, or
    ``claim``. ``canary_design``: ``crafted`` (:mod:`privaudit.audit.user.model.final_model`: worst-case initialisation,
    a crafted canary, D = the first ``canary_pair_size`` members, parameters scaled by ``canary_scale``) or
    ``quiet-coordinate`` (:mod:`privaudit.audit.user.model.canary_runs`: D = every member). ``beta``: 1 - confidence.
    ``out``: the report, each attack's scores and ``report.json``; files there that privaudit did not write are kept
    unless ``force``.
    """
    from privaudit.audit.user import out_dir

    if members is None or nonmembers is None:
        raise ConfigError("--members and --nonmembers: both required: the examples your model was trained on and "
                          "examples it was not (privaudit does not guess your split)")
    claim = claim or claim_from_args(claimed_epsilon, delta, relation, unit,
                                     None if opacus_state is None else str(opacus_state))
    _check_claim(claim)
    delta = claim.delta if claim is not None else (1e-5 if delta is None else delta)
    attacks = _attack_names(attacks, train_fn, population is not None, reference_models, canary_runs)
    if canary_design not in DESIGNS:
        raise ConfigError(f"--canary-design: unknown value {canary_design!r}; accepted: {', '.join(DESIGNS)}")
    design = FinalModelDesign(canary_pair_size, canary_scale) if canary_design == "crafted" else None
    if out is not None:
        out_dir.prepare(out, output_names(attacks), force=force, need=(1 + len(attacks)) * out_dir.REPORT_BYTES)
    data, trained, params, inputs = _setup(factory, weights, members, nonmembers, population, train_fn,
                                           dict(epochs=epochs, batch_size=batch_size, lr=lr), seed)
    one_run_beta = _coin_test(data, attacks, beta)
    results, canary = _run_attacks(attacks, data, trained, params, seed, one_run_beta, beta, delta, reference_models,
                                   canary_runs, progress, design, claim)
    summaries = {name: (crafted_summary(result, canary) if name == "canary" and design else
                        attack_summary(result, claim, beta if name == "canary" else one_run_beta, delta))
                 for name, result in results.items()}
    verdict_attack = next(a for a in VERDICT_ORDER if a in results)
    judged = _verdict_claim(claim, canary) if verdict_attack == "canary" and design else claim
    audit = ModelAudit(factory, train_fn, inputs, summaries, claim,
                       _verdict(judged, summaries[verdict_attack], beta), verdict_attack if claim else None,
                       canary, results)
    if out is not None:
        out_dir.write(out, audit.files())
    return audit


def _coin_test(data: Any, attacks: Sequence[str], beta: float) -> float:
    """The one-run attacks' beta, after their fair coin is tested on the counts of the user's split
    (:func:`privaudit.attacks.bounds.fair_coin.check_fair_coin` at its share of ``beta``; refuses when contradicted,
    before any training). The canary runs (multi-run, equal run counts by construction) keep the full ``beta``."""
    from privaudit.attacks.bounds.fair_coin import check_fair_coin, split_beta

    if not set(attacks) - {"canary"}:
        return beta
    level, bound_beta = split_beta(beta)
    n_in = int(data.membership.sum())
    check_fair_coin(n_in, int(data.membership.numel()) - n_in, level, "--members and --nonmembers")
    return bound_beta


def _check_claim(claim: UserClaim | None) -> None:
    if claim is None:
        return
    if claim.relation != "add-remove":
        raise ConfigError("--relation replace-one: audit-model's designs add or remove one example (your split by "
                          "fair coins; the canary runs add one canary), so their bounds are on add/remove epsilon, "
                          "not comparable with a replace-one claim")
    if claim.unit != "example":
        raise ConfigError("--unit user: audit-model's designs add or remove one example; a per-user claim needs "
                          "per-user scores (privaudit audit-scores --unit user)")


def _attack_names(attacks: Sequence[str] | None, train_fn: str | None, population: bool, reference_models: int,
                  canary_runs: int) -> list[str]:
    """The attacks to run (None: loss; lira and rmia with a population; canary with a training function)."""
    if attacks is None:
        attacks = ["loss", *(["lira", "rmia"] if population else []), *(["canary"] if train_fn else [])]
    unknown = [a for a in attacks if a not in ATTACKS_RUN]
    if unknown or not attacks:
        raise ConfigError(f"--attacks: unknown {unknown or 'empty list'}; accepted: {', '.join(ATTACKS_RUN)}")
    if "canary" in attacks and not train_fn:
        raise ConfigError("--attacks: canary audits your training function; pass --train-fn MODULE:FUNCTION")
    if not population and {"lira", "rmia"} & set(attacks):
        raise ConfigError("--attacks: lira and rmia compare with other examples of the population; pass "
                          "--population PATH")
    if reference_models < 4 or reference_models % 2:
        raise ConfigError(f"--reference-models: must be an even number >= 4, got {reference_models!r}")
    if not 4 <= canary_runs <= 100_000:
        raise ConfigError(f"--canary-runs: must lie in [4, 100000], got {canary_runs!r}")
    return list(dict.fromkeys(attacks))


def _setup(factory: str, weights: Any, members: Any, nonmembers: Any, population: Any, train_fn: str | None,
           loop: dict[str, Any], seed: int) -> tuple[Any, Any, dict[str, Any], dict[str, str]]:
    """Everything checked before any work: the recipe, the weights, the files, the model against the data."""
    from privaudit.core.datasets.user_files import check_distinct, read_examples, user_membership_data
    from privaudit.defenses.user_model import UserModel, build, load_callable, wrap

    check_distinct(members, nonmembers)
    params = {"factory": factory, "train_fn": train_fn or "", **loop}
    UserModel(params)  # validates the settings
    if train_fn:
        load_callable(train_fn, "train_fn")
    net = build(factory)
    state = load_state_dict(weights) if isinstance(weights, (str, Path)) else dict(weights)
    parts = [read_examples(members, "--members"), read_examples(nonmembers, "--nonmembers")]
    if population is not None:
        parts.append(read_examples(population, "--population"))
    classes = _load_into(net, state, factory, parts[0].x[:2])
    data = user_membership_data(parts[0], parts[1], parts[2] if population is not None else None, classes)
    inputs = {"members": parts[0].source, "nonmembers": parts[1].source, "factory": factory,
              "weights": str(weights) if isinstance(weights, (str, Path)) else "<state_dict>"}
    if population is not None:
        inputs["population"] = parts[2].source
    return data, wrap(net, data, params, seed), params, inputs


def _load_into(net: nn.Module, state: Mapping[str, torch.Tensor], factory: str, probe: np.ndarray) -> int:
    """Load ``state`` into ``net`` and return its number of classes (its logits' width on two members)."""
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        detail = " ".join(line.strip() for line in str(exc).strip().splitlines()[:3])
        raise ConfigError(f"--weights: do not fit the factory's model: {detail}") from None
    x = torch.from_numpy(np.ascontiguousarray(probe))
    try:
        with torch.no_grad():
            logits = net.eval()(x)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ConfigError(f"--factory {factory!r}: the model cannot take the members' inputs of shape "
                          f"{tuple(x.shape[1:])} ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})") from None
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or logits.shape[1] < 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ConfigError(f"--factory {factory!r}: the model maps {tuple(x.shape)} to {shape}, expected "
                          "(2, classes) logits")
    return int(logits.shape[1])


def _run_attacks(attacks: Sequence[str], data: Any, trained: Any, params: dict[str, Any], seed: int,
                 one_run_beta: float, beta: float, delta: float, reference_models: int, canary_runs: int,
                 progress: bool, design: FinalModelDesign | None = None,
                 claim: UserClaim | None = None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Each attack's :class:`privaudit.attacks.AttackResult` (the canary runs' as one too, at ``beta``; the one-run
    attacks at ``one_run_beta``) and the canary used."""
    from privaudit.attacks import Target, make_attack
    from privaudit.defenses.base import Budget

    target = Target(trained, data, "user-model", params, Budget(), seed, "cpu")
    results: dict[str, Any] = {}
    canary = None
    for name in attacks:
        if name == "canary" and design is not None:
            results[name], canary = _crafted_canary_attack(data, params, seed, beta, delta, canary_runs, design,
                                                           claim)
            continue
        if name == "canary":
            results[name], canary = _canary_attack(data, trained, params, seed, beta, delta, canary_runs)
            continue
        settings: dict[str, Any] = {"delta": delta, "beta": one_run_beta}
        shared = {"queries": 1, "n_population": min(256, len(data.shadow))}
        if name == "lira":
            settings.update(shadow_models=reference_models, **shared)
        elif name == "rmia":
            settings.update(reference_models=reference_models, **shared)
        results[name] = make_attack(name, settings).run(target, progress=progress)
    return results, canary


def _canary_attack(data: Any, trained: Any, params: dict[str, Any], seed: int, beta: float, delta: float,
                   runs: int) -> tuple[Any, dict[str, Any]]:
    from privaudit.attacks.bounds.multi_run import multi_run_bound
    from privaudit.attacks.result import AttackResult
    from privaudit.audit.user.model.canary_runs import canary_scores, choose_canary
    from privaudit.defenses.training.seeding import derive_seed

    canary = choose_canary(data, trained.model)
    recipe = {**params, "init_seed": derive_seed(seed, "canary-init") % (2 ** 32)}
    inside, outside = canary_scores(data, canary, recipe, runs, seed)
    split = derive_seed(seed, "canary-split")
    bound = multi_run_bound(inside, outside, alpha=beta, delta=delta, threshold="split", seed=split)
    scores = np.r_[inside, outside]
    result = AttackResult(attack="canary", variant="multi-run/quiet-coordinate", scores=scores,
                          membership=np.r_[np.ones(runs, bool), np.zeros(runs, bool)],
                          config={"runs": runs, "split_seed": split},
                          counts={"n_training_runs": 2 * runs, "runs_with_canary": runs,
                                  "n_target_members": len(data.train)}, bound=bound)
    return result, canary.to_dict()


def _crafted_canary_attack(data: Any, params: dict[str, Any], seed: int, beta: float, delta: float, runs: int,
                           design: FinalModelDesign, claim: UserClaim | None) -> tuple[Any, dict[str, Any]]:
    """The final-model audit of :mod:`privaudit.audit.user.model.final_model` on D = the first ``design.pair_size``
    members: its result (the Clopper-Pearson bound; the bound against the runs' own mechanism when the training function
    returned Opacus' accountant) and what the report shows of it (the canary, the pair's claim, the heuristic
    estimates, the bound against the number of runs)."""
    from privaudit.attacks.result import AttackResult
    from privaudit.audit.user.model import final_model as fm
    from privaudit.audit.user.model.canary_runs import choose_canary
    from privaudit.defenses.training.seeding import derive_seed
    from privaudit.defenses.user_model import build, load_callable

    design.validate(len(data.train))
    x, y = data.train.x[:design.pair_size], data.train.y[:design.pair_size]
    net0 = build(params["factory"], derive_seed(seed, "canary-init") % (2 ** 32))
    fm.worst_case_init(net0, x, y, design, derive_seed(seed, "canary-pretrain"))
    canary = choose_canary(data, net0)
    ins, outs, returned = fm.run_pair(net0, x, y, canary.x, canary.y, load_callable(params["train_fn"], "train_fn"),
                                      runs, lambda i: derive_seed(seed, "final-model-run", i))
    pair_claim = _pair_claim(fm.accountant_history(returned), claim, delta)
    event = None if pair_claim is None else pair_claim.event
    split = derive_seed(seed, "canary-split")
    b = fm.final_model_bounds(ins, outs, beta=beta, delta=delta, event=event, seed=split)
    result = AttackResult(attack="canary", variant="final-model/crafted", scores=np.r_[ins, outs],
                          membership=np.r_[np.ones(runs, bool), np.zeros(runs, bool)],
                          config={"runs": runs, "split_seed": split, "design": "crafted", **design.to_dict()},
                          counts={"n_training_runs": 2 * runs, "runs_with_canary": runs,
                                  "n_target_members": int(design.pair_size)}, bound=b["cp"])
    result.mechanism_bound = b["mechanism"]
    info = {**canary.to_dict(), "design": "crafted", **design.to_dict(),
            "pair_claim": None if pair_claim is None else pair_claim.to_dict(), "heuristic": b["heuristic"],
            "ceiling": b["cp_ceiling"], "mechanism_ceiling": b["mechanism_ceiling"],
            "runs_curve": fm.runs_curve(ins, outs, beta=beta, delta=delta, event=event, seed=split)}
    return result, info


def _pair_claim(history: Any, claim: UserClaim | None, delta: float) -> UserClaim | None:
    """The audited pair's own claim: the accountant every run returned (None without one, or for a claim at
    another relation or unit)."""
    from privaudit.accountants.base import NotApplicable
    from privaudit.audit.user.claim import history_claim

    if history is None or not 0 < delta < 1 or (claim is not None and claim.relation != "add-remove"):
        return None
    try:
        return history_claim(history[0], history[1], delta, what="accountant returned by every canary run",
                             where="--train-fn: the accountant it returned", source="the training function's "
                             "Opacus accountant on the audited pair")
    except (ConfigError, NotApplicable):
        return None


def _verdict_claim(claim: UserClaim | None, canary: dict[str, Any] | None) -> UserClaim | None:
    """The claim the final-model verdict judges: the pair's own (its mechanism is the audited runs'), else the
    user's epsilon without a mechanism (the user's accountant accounts another dataset than the pair)."""
    import dataclasses

    if claim is None:
        return None
    pair = (canary or {}).get("pair_claim")
    if pair is not None:
        from privaudit.accountants.events import event_from_dict

        return UserClaim(pair["epsilon"], pair["delta"], pair["relation"], pair["unit"], pair["source"],
                         event_from_dict(pair["event"]), pair["accountants"])
    return dataclasses.replace(claim, event=None)


def _verdict(claim: UserClaim | None, s: dict[str, Any], beta: float) -> Verdict | None:
    if claim is None:
        return None
    if claim.event is not None:
        return judge(claim, s["eps_lb_mechanism"], s["mechanism_ceiling"], 1 - beta, s["eps_lb_mechanism_method"])
    return judge(claim, s["eps_lower_bound"], s["ceiling"], 1 - beta, s["eps_lb_method"])

