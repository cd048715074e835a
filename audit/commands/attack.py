"""``privaudit attack``: train a defense's target model, attack it, print leakage and an epsilon lower bound."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from privaudit.attacks import ATTACKS, DataRef, Target, make_attack, make_executor
from privaudit.attacks.executor import EXECUTORS
from privaudit.attacks.metrics import FPR_TARGETS, fpr_key
from privaudit.attacks.roc_plot import plot_roc
from privaudit.attacks.membership.shadow_models import resolve_defense
from privaudit.audit.commands.common import (add_budget_args, add_data_args, add_output_args, budget_from_args,
                                             check_attack_plugin, check_plugins, emit_json, format_table, integer,
                                             parse_params)
from privaudit.core.datasets import load_dataset
from privaudit.audit.device import DEVICES, resolve_device
from privaudit.core.errors import ConfigError, one_of
from privaudit.core.io import check_output_dir
from privaudit.defenses import DEFENSES, Budget

# Attacks whose shadow/reference model count --shadow-models sets.
SHADOW_PARAM = {"lira": "shadow_models", "rmia": "reference_models", "shadow": "shadow_models",
                "encodermi": "shadow_models"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attack", help="attack a defense's model: AUC, TPR at low FPR and an epsilon lower bound")
    p.add_argument("--defense", default="nonprivate", help=f"one of: {', '.join(DEFENSES)}")
    p.add_argument("--attack", default="rmia",
                   help=f"one of: {', '.join(ATTACKS)} (default rmia: the strongest at a small reference budget), or "
                        "module:Class with --allow-plugins")
    add_data_args(p)
    add_budget_args(p)
    p.add_argument("--shadow-models", type=integer(1, 10 ** 5), default=None,
                   help="shadow/reference models (lira, rmia, shadow, encodermi)")
    p.add_argument("--epochs", default="auto",
                   help="training epochs of the target and its references: a number, or 'auto' (default): for a "
                        "non-private defense, the usable point of a validation curve on the public split; a DP "
                        "defense keeps its configured epochs (--param epochs=N also fixes it)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="a defense hyper-parameter (repeatable)")
    p.add_argument("--attack-param", action="append", metavar="KEY=VALUE", help="an attack setting (repeatable)")
    p.add_argument("--allow-plugins", action="store_true",
                   help="allow --defense and --attack module:Class (imports them: runs their code)")
    p.add_argument("--executor", default="local", help=f"one of: {', '.join(EXECUTORS)}")
    p.add_argument("--device", default="auto", help=f"one of: {', '.join(DEVICES)}")
    p.add_argument("--out", default=None, help="directory for scores.npz and result.json")
    p.add_argument("--plot", default=None, help="write the log-log ROC of every variant to this file (png, pdf, svg)")
    add_output_args(p)
    p.set_defaults(func=run)


PLOT_FORMATS = (".png", ".pdf", ".svg")


def check_plot_path(plot: str) -> None:
    """--plot names a writable file with a format matplotlib writes (checked before any training)."""
    path = Path(plot)
    if path.suffix.lower() not in PLOT_FORMATS:
        raise one_of("--plot", path.suffix or plot, PLOT_FORMATS)
    if path.is_dir():
        raise ConfigError(f"--plot: {plot!r} is a directory; give a file name such as roc.png")
    check_output_dir(path.parent, field="--plot")


def target_utility(trained, data, device) -> dict[str, float]:
    """The target's k-NN and linear-probe accuracy (frozen encoder), and its classifier's train/test
    accuracy when it releases one: the figures that show the audited model is a real model."""
    import torch

    from privaudit.defenses.evaluation.evaluation import encoder_utility

    trained.model.eval()
    out = encoder_utility(trained.model.represent, data.train.x, data.train.y, data.test.x, data.test.y,
                          device=device)
    if trained.classifier is not None:
        with torch.no_grad():
            for name, split in (("train", data.train), ("test", data.test)):
                out[f"classifier_{name}_accuracy"] = float(
                    (trained.logits(split.x).argmax(1) == split.y).double().mean())
    return out


def run(args: argparse.Namespace) -> int:
    check_attack_plugin(args.attack, args.allow_plugins)
    attack = make_attack(args.attack, _attack_params(args))
    params = _defense_params(args)
    defense = resolve_defense(args.defense, params)
    budget = budget_from_args(args, defense)
    executor = make_executor(args.executor, progress=not args.json)
    device = resolve_device(args.device)
    if args.out is not None:
        check_output_dir(args.out)  # before training: a bad --out loses no work
    if args.plot:
        check_plot_path(args.plot)
    data = load_dataset(args.dataset, seed=args.seed, data_dir=args.data_dir)

    start = time.perf_counter()
    trained, target, length = _train_target(args, defense, params, data, budget, device)
    result = attack.run(target, executor=executor, progress=not args.json)
    seconds = time.perf_counter() - start
    _save(args, result)
    summary = result.summary()
    utility = target_utility(trained, data, device)
    if args.json:
        claim = trained.claim
        emit_json({**summary, "defense": args.defense, "dataset": args.dataset, "seed": args.seed,
                   "target_epsilon": args.target_epsilon, "seconds": seconds,
                   "training_length": None if length is None else length.to_dict(), "utility": utility,
                   "claim": {"mechanism": claim.mechanism, "relation": claim.relation, "unit": claim.unit,
                             "delta": claim.delta}})
        return 0
    print(f"{args.attack} on {args.defense} ({args.dataset}): {summary['n_members']} members, "
          f"{summary['n_nonmembers']} non-members, {seconds:.1f}s on {device}")
    if length is not None:
        print(f"target trained {length.epochs} epochs: the {length.rule}")
    print("target utility: " + ", ".join(f"{k} {v:.3f}" for k, v in utility.items()))
    _print_leakage(result, summary)
    claim = trained.claim
    print(f"claim: {claim.mechanism} ({claim.relation}, per {claim.unit}, delta={claim.delta:.3g})")
    if args.out:
        print(f"saved: {args.out}")
    return 0


def _attack_params(args: argparse.Namespace) -> dict[str, Any]:
    """``--attack-param`` settings, with ``--shadow-models`` as the attack's own count of shadow models."""
    attack_params = parse_params(args.attack_param)
    if args.shadow_models is not None:
        if args.attack not in SHADOW_PARAM:
            raise ConfigError(f"--shadow-models: attack {args.attack!r} trains no shadow models "
                              f"(accepted with: {', '.join(SHADOW_PARAM)})")
        attack_params[SHADOW_PARAM[args.attack]] = args.shadow_models
    return attack_params


def _defense_params(args: argparse.Namespace) -> dict[str, Any]:
    """``--param`` hyper-parameters, with ``--epochs`` when it is a number (a plugin needs --allow-plugins)."""
    params = parse_params(args.param)
    check_plugins(args.defense, params, args.allow_plugins)
    if args.epochs != "auto":
        try:
            params["epochs"] = int(args.epochs)
        except ValueError:
            raise ConfigError(f"--epochs: a positive integer or 'auto', got {args.epochs!r}") from None
    return params


def _train_target(args: argparse.Namespace, defense: Any, params: dict[str, Any], data: Any, budget: Budget,
                  device: Any) -> tuple[Any, Target, Any]:
    """Train the target (a non-private defense without an epoch count first picks its usable length on the
    public split; ``params`` gets it); (trained, target, training length or None)."""
    length = None
    if "epochs" not in params and "epochs" in defense.config_dict() and not defense.private:
        from privaudit.defenses.training.training_length import usable_epochs

        length = usable_epochs(args.defense, params, data, budget, args.seed, device=device)
        params["epochs"] = length.epochs
        defense = resolve_defense(args.defense, params)
    trained = defense.fit(data, budget, args.seed, device=device, progress=not args.json)
    data_ref = DataRef(args.dataset, args.seed, args.data_dir)
    return trained, Target(trained, data, args.defense, params, budget, args.seed, str(device), data_ref), length


def _save(args: argparse.Namespace, result: Any) -> None:
    """``--out``: the scores and result; ``--plot``: the log-log ROC of every variant."""
    if args.out:
        result.save(args.out)
    if args.plot:
        curves = {result.variant: result.roc()}
        curves.update({name: result.roc(name) for name in result.variants})
        plot_roc(curves, args.plot, title=f"{args.attack} on {args.defense} ({args.dataset})")


def _print_leakage(result: Any, summary: dict[str, Any]) -> None:
    """The table of AUC and TPR at low FPR per variant, the FPR resolution note and the epsilon lower bound."""
    headers = ["variant", "AUC", *[f"TPR@{100 * t:g}%FPR" for t in FPR_TARGETS], "bal. acc"]
    rows = [[result.variant, summary["auc"], *[summary["tpr_at_fpr"][fpr_key(t)] for t in FPR_TARGETS],
             summary["balanced_accuracy"]]]
    for name, m in summary["variants"].items():
        rows.append([name, m["auc"], *[m["tpr_at_fpr"][fpr_key(t)] for t in FPR_TARGETS], m["balanced_accuracy"]])
    print(format_table(headers, rows))
    unresolved = [k for k, ok in summary["fpr_resolved"].items() if not ok]
    if unresolved:
        print(f"note: FPR resolution is {summary['fpr_resolution']:.3g} (1/{summary['n_nonmembers']} non-members); "
              f"TPR at FPR {', '.join(unresolved)} is read at FPR = 0")
    if result.bound is not None:
        print(f"epsilon lower bound: {result.bound.epsilon:.4g}  [{result.bound.label}]")
