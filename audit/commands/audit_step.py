"""``privaudit audit-step``: audit one privatised training step of a defense (see :mod:`privaudit.audit.step.audit`).

    privaudit audit-step --defense NAME [--draws N] [--pair all|canonical|canary|extreme|witness]
                         [--target-epsilon E | --noise-multiplier Z] [--delta D] [--param KEY=VALUE ...]
                         [--alpha A] [--noise projected|full] [--witness-evaluations N] [--out DIR] [--json]

Exit status: 0 when the step is not refuted, 1 when a measured per-step lower bound exceeds the
per-step privacy the defense's accountant assumes (witness written under --out), 2 on bad input (an
``--out`` that cannot be a directory is refused before any work), 3 when a pair errored (the audit is
incomplete, whatever the other pairs found; the pair's row names the exception).
"""

from __future__ import annotations

import argparse

from privaudit.audit.cli import EXIT_RUN_ERROR
from privaudit.audit.commands.common import add_data_args, emit_json, format_table, integer, number, parse_params
from privaudit.core.config import MAX_INT
from privaudit.core.io import check_output_dir

HEADERS = ["pair", "|d| / Delta", "mu pair", "mu_lb", "mu claim", "power", "eps pair", "eps_lb", "eps claim", "verdict",
           "seconds", "witness"]


def register(sub: argparse._SubParsersAction) -> None:
    from privaudit.audit.step.audit import DEFAULT_DRAWS, DEFAULT_WITNESS_EVALUATIONS, DEFENSES, PAIR_CHOICES

    p = sub.add_parser("audit-step", help="audit one privatised step of a defense on neighbouring batches")
    p.add_argument("--defense", required=True, choices=DEFENSES, help="the defense whose step is audited")
    p.add_argument("--draws", type=integer(8, MAX_INT), default=DEFAULT_DRAWS,
                   help=f"noise draws per side (default {DEFAULT_DRAWS})")
    p.add_argument("--pair", default="all", choices=PAIR_CHOICES,
                   help="neighbouring pairs: canary (worst case the claim allows), extreme (Dirac-like image), "
                        "witness (the sensitivity search's best pair), canonical (canary + extreme) or all")
    p.add_argument("--target-epsilon", type=number(positive=True), default=8.0,
                   help="epsilon the noise is calibrated to (default 8)")
    p.add_argument("--noise-multiplier", type=number(positive=True), default=None,
                   help="use this gradient noise multiplier instead")
    p.add_argument("--delta", type=number(), default=1e-5, help="the claim's delta (default 1e-5)")
    p.add_argument("--alpha", type=number(), default=0.05, help="family-wise failure probability (default 0.05)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="defense hyper-parameter (repeatable)")
    p.add_argument("--noise", default="projected", choices=("projected", "full"),
                   help="draw the optimal statistic's law (projected, exact) or full noise vectors (slow)")
    p.add_argument("--witness-evaluations", type=integer(1, MAX_INT), default=DEFAULT_WITNESS_EVALUATIONS,
                   help="pairs the sensitivity search evaluates for the witness pair")
    p.add_argument("--out", default=None, help="directory for the witnesses of refuting pairs (safetensors)")
    add_data_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from privaudit.audit.step.audit import audit_defense
    from privaudit.audit.step.render import summary_line

    if args.out is not None:
        check_output_dir(args.out)  # before the audit: a bad --out loses no work
    torch.set_num_threads(1)
    r = audit_defense(args.defense, params=parse_params(args.param), target_epsilon=args.target_epsilon,
                      noise_multiplier=args.noise_multiplier, delta=args.delta, draws=args.draws, pair=args.pair,
                      alpha=args.alpha, seed=args.seed, dataset=args.dataset, data_dir=args.data_dir,
                      noise=args.noise, witness_evaluations=args.witness_evaluations, out_dir=args.out)
    if args.json:
        emit_json(r.to_dict())
    else:
        c = r.claim
        rows = [[p["pair"], p.get("difference_over_sensitivity"), p.get("mu_pair"), p.get("mu_lower"), c["mu"],
                 p.get("power", p.get("power_mu")), p.get("epsilon_pair"), p.get("epsilon_lower"), c["epsilon"],
                 p["verdict"] if p["verdict"] != "error" else f"error: {p['error']}", p["seconds"], p.get("witness")]
                for p in r.pairs]
        print(format_table(HEADERS, rows))
        print(summary_line(r))
    if any(p["verdict"] == "error" for p in r.pairs):
        return EXIT_RUN_ERROR
    return 1 if r.verdict == "refuted" else 0
