"""``privaudit sensitivity``: try to break the papers' sensitivity claims; replay a witness.

    privaudit sensitivity (--claim ID ... | --all | --list | --replay FILE)
                          [--budget-seconds S] [--evaluations N] [--seed N] [--witness-dir DIR] [--json]

Exit status: 0 when no checked claim is violated (or a replay reproduced its witness), 1 when some
claim is violated (or a replay did not reproduce), 2 on bad input, 3 when the check of some claim errored
(a setting's quantity could not be built or searched: its verdict is ``error``, the exception named).
"""

from __future__ import annotations

import argparse
import sys

from privaudit.audit.cli import EXIT_RUN_ERROR
from privaudit.audit.commands.common import SEED, emit_json, format_table, integer, number
from privaudit.core.config import MAX_BUDGET_SECONDS, MAX_INT
from privaudit.core.errors import ConfigError
from privaudit.audit.sensitivity.verdict import display

HEADERS = ["claim", "source", "relation", "bound", "observed", "ratio", "closed form", "verdict", "witness"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sensitivity", help="search each paper's sensitivity claim for a violating neighbouring pair")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--claim", action="append", metavar="ID",
                      help="check this claim (repeatable; a bare key such as dpgcl.group selects all its variants)")
    what.add_argument("--all", action="store_true", help="check every paper claim in the register")
    what.add_argument("--list", action="store_true", help="list the registered claims and their stated bounds")
    what.add_argument("--replay", metavar="FILE", help="recompute a witness file and its verdict")
    p.add_argument("--budget-seconds", type=number(positive=True, hi=MAX_BUDGET_SECONDS), default=None,
                   help="search time per claim (default: each claim's own, a few minutes for --all on 2 cores)")
    p.add_argument("--evaluations", type=integer(1, MAX_INT), default=None,
                   help="budget per claim in evaluated pairs instead of seconds (reproducible)")
    p.add_argument("--seed", type=SEED, default=0, help="seed for the data split, the models and the search")
    p.add_argument("--dataset", default="digits", help="dataset the defenses are built on (default: digits)")
    p.add_argument("--data-dir", default=None, help="directory of torchvision-format datasets")
    p.add_argument("--witness-dir", default="reports/sensitivity/witnesses",
                   help="where witnesses of violated claims are written")
    p.add_argument("--progress", action="store_true", help="show a progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.set_defaults(func=run)


def _list(args: argparse.Namespace) -> int:
    from privaudit.audit.sensitivity import CLAIMS

    rows = [[c.id, c.source, c.relation, c.norm, c.formula, "closed form" if c.closed_form else "sampled",
             c.budget_seconds, "reference" if c.reference else "paper"] for c in CLAIMS.values()]
    if args.json:
        emit_json([dict(zip(["claim", "source", "relation", "norm", "bound", "kind", "budget_seconds", "type"], r))
                   for r in rows])
    else:
        print(format_table(["claim", "source", "relation", "norm", "bound", "kind", "budget s", "type"], rows))
    return 0


def _row(r: dict) -> list:
    """One table row; ``closed form`` is the quantity's derived supremum (where known), and a search
    still improving at its budget says so beside its verdict."""
    cfg = r.get("config", {})
    sup = cfg.get("closed_form_supremum")
    verdict = display(r["verdict"]) + (" (still improving)" if cfg.get("still_improving") else "")
    return [r["claim"], r["source"], r["relation"], r["bound"], r["observed"], r["ratio"],
            None if sup is None else sup["value"], verdict, r["witness"]]


def _growth(results: list[dict]) -> None:
    """The growth tables of the claims that have one (ratio per |B| or per temperature)."""
    for r in results:
        g = r.get("config", {}).get("growth")
        if not g:
            continue
        print(f"\n{r['claim']}: ratio by {g['by']}" + (f"; {g['suggested']['text']}" if g.get("suggested") else ""))
        print(format_table([g["by"], "bound", "observed", "ratio", "observed / " + (g["suggested"] or {}).get("of", "C"),
                            "verdict", "s"],
                           [[row[g["by"]], row["bound"], row["observed"], row["ratio"], row["per_unit"],
                             "violated" if row["violated"] else "not refuted", row["seconds"]] for row in g["rows"]]))


def _replay(args: argparse.Namespace) -> int:
    from privaudit.audit.sensitivity import replay

    r = replay(args.replay)
    if args.json:
        emit_json(r)
    else:
        print(format_table(HEADERS, [_row(r)]))
        rec = r["config"]["recorded"]
        print(f"recorded: bound {rec['bound']!r}, observed {rec['observed']!r}, verdict {rec['verdict']}")
        print(f"replayed: bound {r['bound']!r}, observed {r['observed']!r}, verdict {r['verdict']}; outputs "
              f"bit-identical: {'yes' if r['identical_outputs'] else 'NO'}; "
              f"{'reproduced' if r['reproduced'] else 'NOT reproduced'}")
    return 0 if r["reproduced"] else 1


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args)
    if args.replay:
        return _replay(args)
    if args.budget_seconds is not None and not args.budget_seconds > 0:
        raise ConfigError(f"--budget-seconds: must be > 0, got {args.budget_seconds!r}")
    if args.evaluations is not None and args.evaluations < 1:
        raise ConfigError(f"--evaluations: must be >= 1, got {args.evaluations!r}")
    from privaudit.audit.sensitivity import check_claims, select

    ids = None if args.all else list(args.claim)
    select(ids, include_reference=False)  # unknown ids fail here, before any work
    results = [r.to_dict() for r in check_claims(ids, budget_seconds=args.budget_seconds, seed=args.seed,
                                                 progress=args.progress, witness_dir=args.witness_dir,
                                                 dataset=args.dataset, data_dir=args.data_dir,
                                                 evaluations=args.evaluations)]
    if args.json:
        emit_json(results)
    else:
        print(format_table(HEADERS, [_row(r) for r in results]))
        _growth(results)
        notes = [f"{r['claim']}: {n}" for r in results for n in r.get("config", {}).get("notes") or []]
        if notes:
            print("\nnotes:\n" + "\n".join(f"- {n}" for n in notes))
        for r in results:
            reason = r["config"].get("reason")
            if r["verdict"] in ("inconclusive", "error") and reason:
                print(f"{r['claim']}: {r['verdict']}: {reason}", file=sys.stderr)
    return exit_code(results)


def exit_code(results: list[dict]) -> int:
    """3 when some claim's check errored (a violation found elsewhere does not hide it), else 1 when some claim
    is violated, else 0."""
    if any(r["verdict"] == "error" or r.get("config", {}).get("errors") for r in results):
        return EXIT_RUN_ERROR
    return 1 if any(r["verdict"] == "violated" for r in results) else 0
