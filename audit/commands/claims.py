"""``privaudit claims``: the papers' privacy claims next to what every applicable accountant gives, then their utility
claims judged from the Fashion-MNIST benchmark's committed reference (:mod:`privaudit.audit.benchmark`)."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from privaudit.accountants.paper_claims import PAPERS, ClaimCheck, check_claim, paper_claims
from privaudit.audit.benchmark.listing import UTILITY_HEADERS, UTILITY_NOTE, utility_rows
from privaudit.audit.commands.common import emit_json, format_table
from privaudit.core.errors import ConfigError, one_of


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("claims", help="check the papers' stated privacy claims against every accountant")
    p.add_argument("--paper", default=None, help=f"only this paper: {', '.join(PAPERS)}")
    p.add_argument("--id", action="append", default=None, metavar="CLAIM", help="only these claims (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON list instead of a table")
    p.set_defaults(func=run)


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}"


def _stated(check: ClaimCheck) -> str:
    c = check.claim
    noise = "/".join(dict.fromkeys(c.noise))
    if c.kind == "noise":
        return f"z={noise} for eps<={c.target}"
    metric = "rho" if c.checked.metric == "rho" else "eps"
    op = "<" if c.kind == "bound" else "="
    return f"{metric}{op}{c.stated} at z={noise}"


def _recipe(check: ClaimCheck) -> str:
    c = check.claim
    if check.recipe_value is None:
        return "n/a"
    if c.kind == "noise":
        return f"z={_num(check.noise_needed.get('recipe'))} {_mark(check.recipe_verdict)}"
    return f"{_num(check.recipe_value)} {_mark(check.recipe_verdict)}"


def _mark(verdict: str) -> str:
    return {"reproduced": "(ok)", "not reproduced": "(NO)"}.get(verdict, f"({verdict})")


def _paper_method(check: ClaimCheck) -> str:
    """The paper's accountant on the mechanism as the algorithm runs it, against the stated number."""
    t = check.tight
    if t is None or t.paper_value is None:
        return "n/a"
    ratio = t.paper_value / t.claimed
    amount = f"{(ratio - 1) * 100:+.1f}%" if ratio < 10 else f"x{ratio:.3g}"
    return f"{t.paper_accountant} {_num(t.paper_value)} ({amount})"


def _bracket(check: ClaimCheck) -> str:
    t = check.tight
    if t is None:
        return "-"
    if t.lower is None:
        return f"<= {_num(t.upper)} ({t.accountant})"
    if t.lower == t.upper:
        return f"{_num(t.upper)} ({t.accountant})"
    return f"[{_num(t.lower)}, {_num(t.upper)}] ({t.accountant})"


def _verdict(check: ClaimCheck) -> str:
    t = check.tight
    if t is None:
        return check.verdict
    if t.verdict == "false":
        return f"FALSE x{t.factor:.3g}; needs z={_num(t.noise_needed)}"
    return t.verdict


def _findings(check: ClaimCheck) -> list[str]:
    c = check.claim
    lines = []
    if check.recipe_verdict == "not reproduced":
        lines.append(f"the paper's own recipe ({c.recipe.label}) gives {_num(check.recipe_value)}, "
                     f"not {c.stated if c.kind != 'noise' else c.target} ({check.recipe_gap * 100:+.1f}%)")
    elif check.recipe_verdict == "not applicable":
        lines.append(f"the paper's recipe ({c.recipe.label}) is not applicable: {check.recipe_reason}")
    if check.tight is not None:
        lines.append(f"verdict {check.tight.verdict}: {check.tight.reason}")
    if c.sound is not None:
        lines.append(f"checked as: {c.sound.label}")
    for label, value, reason in check.alternatives:
        lines.append(f"alternative reading, {label}: {_num(value)}" + (f" ({reason})" if value is None else ""))
    lines.extend(c.notes)
    return lines


def run(args: argparse.Namespace) -> int:
    claims = paper_claims()
    if args.paper is not None:
        if args.paper not in PAPERS:
            raise one_of("--paper", args.paper, PAPERS)
        claims = [c for c in claims if c.paper == args.paper]
    if args.id:
        known = {c.id for c in claims}
        for cid in args.id:
            if cid not in known:
                raise ConfigError(f"--id: unknown claim {cid!r}; accepted: {', '.join(sorted(known))}")
        claims = [c for c in claims if c.id in args.id]
    checks = [check_claim(c) for c in tqdm(claims, desc="claims", file=sys.stderr, leave=False,
                                            disable=True if args.json else None)]
    if args.json:
        emit_json([check.to_dict() for check in checks])
        return 0
    rows = [[check.claim.id, _stated(check), _recipe(check), _paper_method(check), _bracket(check), _verdict(check)]
            for check in checks]
    print(format_table(["claim", "stated", "paper's recipe", "paper's method", "tight epsilon (accountant)",
                        "verdict"], rows))
    print("\npaper's method = the paper's accountant on the mechanism as the algorithm runs it; tight epsilon = "
          "the tightest sound accountant's bracket [lower, upper] (pld: optimistic and pessimistic discretisation); "
          "every accountant's value is in --json.")
    print("verdict: holds | holds; paper's method does not show it | false (even the lower end exceeds the "
          "claim) | undecided (the claim lies in the bracket, or only RDP applies) | conservative (well below).")
    for check in checks:
        lines = _findings(check)
        if lines:
            print(f"\n{check.claim.id} ({check.claim.paper} {check.claim.source}): {check.claim.description}")
            for line in lines:
                print(f"  - {line}")
    utility = [] if args.id else utility_rows(args.paper)  # the papers' utility claims (audit.benchmark)
    if utility:
        print(UTILITY_NOTE)
        print(format_table(UTILITY_HEADERS, utility))
    return 0
