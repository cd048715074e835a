"""``privaudit audit-scores``: audit member / non-member scores a user already has (see
:mod:`privaudit.audit.user.scores.score_audit`)."""

from __future__ import annotations

import argparse
import sys

from privaudit.audit.commands.common import (PROBABILITY, add_claim_args, add_junit_arg, add_output_args, claim_of,
                                             emit_json, format_table, junit_target, number, refuted_status,
                                             write_junit_cases)
from privaudit.audit.user.scores.score_inputs import KINDS
from privaudit.audit.user.scores.score_audit import DESIGNS

HELP = ("audit your own member / non-member scores: ROC, AUC, advantage, TPR at low FPR, an epsilon lower bound, "
        "and a verdict on your claim with the design's ceiling")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit-scores", help=HELP,
                       description=HELP[0].upper() + HELP[1:] + ". Exit status 1 when the claim is refuted.")
    p.add_argument("--members", default=None, help="members' scores, losses or logits (.npy, .npz, .csv); required "
                   "unless --tf-privacy")
    p.add_argument("--nonmembers", default=None, help="non-members' scores, losses or logits (.npy, .npz, .csv); "
                   "required unless --tf-privacy")
    p.add_argument("--tf-privacy", default=None, metavar="FILE.npz",
                   help="one .npz in TF-Privacy's AttackInputData layout (logits_train/_test + labels_train/_test, "
                        "or loss_train/_test) instead of --members/--nonmembers")
    p.add_argument("--kind", default="auto", help=f"what the files hold: {', '.join(KINDS)} (default: auto, "
                   "from the keys / header; loss: score = -loss; logits need labels)")
    p.add_argument("--design", default="one-run",
                   help=f"how the members were chosen, which decides the sound bound: {', '.join(DESIGNS)} "
                        "(one-run: each example included by an independent fair coin in one training run)")
    p.add_argument("--inclusion-probability", type=number(**PROBABILITY), default=0.5, metavar="P",
                   help="one-run design: the known probability with which each example was included, independently "
                        "(default 0.5, a fair coin); the counts are tested against it and the bound is computed on a "
                        "subsample on which membership is a fair coin")
    add_claim_args(p, default_delta=1e-5)
    p.add_argument("--out", default=None,
                   help="write report.json, report.md, report.html, roc.png, histogram.png, scores.npz here")
    add_output_args(p)
    add_junit_arg(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from privaudit.core.errors import ConfigError

    if args.tf_privacy is None and (args.members is None or args.nonmembers is None):
        raise ConfigError("--members and --nonmembers: both required (or --tf-privacy FILE.npz)")
    from privaudit.audit.user.scores.score_audit import audit_scores

    claim = claim_of(args)
    junit = junit_target(args)
    a = audit_scores(args.members, args.nonmembers, kind=args.kind, tf_privacy=args.tf_privacy, delta=args.delta,
                     beta=1 - args.confidence, design=args.design, claim=claim,
                     inclusion_probability=args.inclusion_probability, out=args.out, force=args.force)
    for warning in a.warnings:
        print(f"privaudit: warning: {warning}", file=sys.stderr)
    if junit is not None:
        from privaudit.audit.user.junit import score_cases

        write_junit_cases(junit, "privaudit audit-scores", score_cases(a))
    if args.json:
        d = a.to_dict()
        d.pop("roc")
        d.pop("histogram")
        emit_json(d)
        return refuted_status(a.verdict)
    s = a.summary
    print(f"{s['n_members']} members, {s['n_nonmembers']} non-members ({a.inputs['kind']})")
    rows = [["AUC", s["auc"]], ["advantage (max TPR - FPR)", s["advantage"]],
            ["balanced accuracy", s["balanced_accuracy"]],
            *[[f"TPR@{100 * float(k):g}%FPR", v] for k, v in s["tpr_at_fpr"].items()],
            ["epsilon lower bound", a.bound.epsilon], [f"ceiling ({a.ceiling_design})", a.ceiling]]
    if a.mechanism is not None:
        rows += [["epsilon vs the claim's mechanism", a.mechanism.epsilon], ["its ceiling", a.mechanism_ceiling]]
    print(format_table(["measure", "value"], rows))
    print(f"bound: {a.bound.label}")
    print(f"assumption: {a.assumption}")
    if a.verdict is not None:
        print(f"verdict: {a.verdict.statement}")
    if args.out:
        print(f"report: {args.out}/report.html (also report.md, report.json, roc.png, histogram.png)")
    return refuted_status(a.verdict)
