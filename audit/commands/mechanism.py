"""Flags shared by ``privaudit epsilon`` and ``privaudit calibrate``: a sampled Gaussian training run.

``--noise-multiplier Z --steps T --delta D (--sample-rate Q | --dataset-size N --batch-size B)
[--sampling poisson|without-replacement] [--relation add-remove|replace-one] [--mechanisms K]
[--composition joint|separate] [--accountant NAME|all] [--conversion mironov|balle2020|cks2020] [--json]``
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable, Iterator

from privaudit.accountants.claim import RELATIONS, PrivacyClaim
from privaudit.accountants.rdp.conversions import CONVERSIONS
from privaudit.accountants.sampled_gaussian import COMPOSITIONS, SAMPLINGS, sampled_gaussian_template
from privaudit.accountants.registry import ACCOUNTANTS
from privaudit.audit.commands.common import PROBABILITY, integer, number
from privaudit.core.config import MAX_ACCOUNTED_STEPS, MAX_INT
from privaudit.core.errors import ConfigError, check_positive, check_probability, one_of


def add_mechanism_args(parser: argparse.ArgumentParser, *, noise: bool) -> None:
    if noise:
        parser.add_argument("--noise-multiplier", type=number(positive=True), required=True, metavar="Z",
                            help="noise std / L2 sensitivity of each mechanism (under --relation)")
    parser.add_argument("--steps", type=integer(1, MAX_ACCOUNTED_STEPS), required=True, metavar="T",
                        help="number of sampled steps (bounded: the PLD and PRV accountants' memory grows with it)")
    parser.add_argument("--delta", type=number(**PROBABILITY), required=True, metavar="D", help="target delta")
    parser.add_argument("--sample-rate", type=number(lo=0.0, hi=1.0), default=None, metavar="Q",
                        help="Poisson sampling rate")
    parser.add_argument("--dataset-size", type=integer(1, MAX_INT), default=None, metavar="N",
                        help="number of privacy units")
    parser.add_argument("--batch-size", type=integer(1, MAX_INT), default=None, metavar="B",
                        help="(expected) batch size")
    parser.add_argument("--sampling", default="poisson", help=f"one of: {', '.join(SAMPLINGS)} (default poisson)")
    parser.add_argument("--relation", default=None,
                        help=f"one of: {', '.join(RELATIONS)} (default: add-remove for poisson, replace-one "
                             "for without-replacement)")
    parser.add_argument("--mechanisms", type=integer(1, 10 ** 4), default=1, metavar="K",
                        help="Gaussian mechanisms per step, each with the same noise multiplier (default 1)")
    parser.add_argument("--composition", default="joint",
                        help="joint: the K mechanisms share the step's batch (default, correct for one batch); "
                             "separate: each is accounted as independently sampled (DPCL's recipe)")
    parser.add_argument("--accountant", default="all", help=f"one of: {', '.join(ACCOUNTANTS)}, all (default all)")
    parser.add_argument("--conversion", default="balle2020",
                        help=f"RDP -> DP conversion for rdp/tree: {', '.join(CONVERSIONS)} (default balle2020; "
                             "cks2020 is the same formula)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def validate(args: argparse.Namespace) -> None:
    if args.steps < 1:
        raise ConfigError(f"--steps: must be >= 1, got {args.steps}")
    check_probability("--delta", args.delta)
    if args.sampling not in SAMPLINGS:
        raise one_of("--sampling", args.sampling, SAMPLINGS)
    if args.relation is not None and args.relation not in RELATIONS:
        raise one_of("--relation", args.relation, RELATIONS)
    if args.composition not in COMPOSITIONS:
        raise one_of("--composition", args.composition, COMPOSITIONS)
    if args.conversion not in CONVERSIONS:
        raise one_of("--conversion", args.conversion, CONVERSIONS)
    if args.accountant != "all" and args.accountant not in ACCOUNTANTS:
        raise one_of("--accountant", args.accountant, [*ACCOUNTANTS, "all"])
    if args.mechanisms < 1:
        raise ConfigError(f"--mechanisms: must be >= 1, got {args.mechanisms}")
    sized = args.dataset_size is not None or args.batch_size is not None
    if args.sample_rate is not None and sized:
        raise ConfigError("--sample-rate: give either --sample-rate or --dataset-size with --batch-size, not both")
    if args.sample_rate is None and (args.dataset_size is None or args.batch_size is None):
        raise ConfigError("--sample-rate: give --sample-rate Q, or --dataset-size N and --batch-size B")
    if args.sample_rate is not None:
        check_probability("--sample-rate", args.sample_rate, open_interval=False)
        check_positive("--sample-rate", args.sample_rate)
    for flag, value in (("--dataset-size", args.dataset_size), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag}: must be >= 1, got {value}")
    if args.dataset_size is not None and args.batch_size is not None and args.batch_size > args.dataset_size:
        raise ConfigError(f"--batch-size: must be <= --dataset-size ({args.dataset_size}), got {args.batch_size}")


def template(args: argparse.Namespace) -> Callable[[float], PrivacyClaim]:
    """noise multiplier -> the claim the flags describe."""
    return sampled_gaussian_template(steps=args.steps, delta=args.delta, sample_rate=args.sample_rate,
                                     dataset_size=args.dataset_size, batch_size=args.batch_size,
                                     sampling=args.sampling, relation=args.relation, mechanisms=args.mechanisms,
                                     composition=args.composition, source="command line")


def accountant_names(args: argparse.Namespace) -> list[str]:
    return list(ACCOUNTANTS) if args.accountant == "all" else [args.accountant]


def each_accountant(args: argparse.Namespace, what: str) -> Iterator[str]:
    """:func:`accountant_names`, one at a time, with a progress bar on a terminal naming the one at work (PLD and
    PRV take seconds over many steps, a calibration tens of seconds); none with ``--json``."""
    from tqdm import tqdm

    bar = tqdm(accountant_names(args), desc=what, file=sys.stderr, leave=False, disable=True if args.json else None)
    for name in bar:
        bar.set_postfix_str(name)
        yield name


def accountant_options(name: str, args: argparse.Namespace) -> dict[str, Any]:
    return {"conversion": args.conversion} if name in ("rdp", "tree") else {}


def json_number(x: float | None) -> float | None:
    return None if x is None or math.isinf(x) or math.isnan(x) else x


def describe_details(name: str, details: dict[str, Any] | None) -> str:
    details = details or {}
    parts = []
    if "conversion" in details:
        same = {"balle2020": " (= cks2020, the same formula)", "cks2020": " (= balle2020, the same formula)"}
        parts.append(f"conversion {details['conversion']}{same.get(details['conversion'], '')}")
    if details.get("order") is not None and not (isinstance(details["order"], float) and math.isnan(details["order"])):
        parts.append(f"optimal order {details['order']:g}")
    if "wor_bound" in details:
        parts.append(f"WOR bound WBK19 {details['wor_bound']}")
    if "rho" in details:
        parts.append(f"zCDP rho {details['rho']:.4g}")
    if "classical" in details:
        valid = "valid" if details.get("classical_valid") else "outside its validity range eps < 1"
        parts.append(f"classical bound {details['classical']:.4g} ({valid})")
    if "epsilon_lower" in details:
        parts.append(f"bracket [{details['epsilon_lower']:.4g}, {details['epsilon_upper']:.4g}] "
                     f"(optimistic, pessimistic discretisation {details['value_discretization_interval']:g})")
    elif "value_discretization_interval" in details:
        parts.append(f"discretisation {details['value_discretization_interval']:g} (pessimistic)")
    if "eps_error" in details:
        parts.append(f"upper bound, eps_error {details['eps_error']:g}")
    if "warning" in details:
        parts.append(details["warning"])
    return "; ".join(parts)
