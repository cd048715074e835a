"""``privaudit claims``: the papers' privacy claims next to what every applicable accountant gives, read from the
committed checks while the code they were computed by is unchanged (:mod:`privaudit.accountants.paper_claims.cache`),
then their utility claims judged from the Fashion-MNIST benchmark's committed reference (:mod:`privaudit.audit.benchmark`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tqdm import tqdm

from privaudit.accountants.paper_claims import PAPERS, PaperClaim, check_claim, paper_claims
from privaudit.audit.commands.common import emit_json, format_table
from privaudit.core.errors import ConfigError, one_of
from privaudit.core.io import to_json

#: A claim's check as ``--json`` prints it (:meth:`~privaudit.accountants.paper_claims.ClaimCheck.to_dict`).
Check = dict[str, Any]


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


def _stated(c: PaperClaim) -> str:
    noise = "/".join(dict.fromkeys(c.noise))
    if c.kind == "noise":
        return f"z={noise} for eps<={c.target}"
    metric = "rho" if c.checked.metric == "rho" else "eps"
    op = "<" if c.kind == "bound" else "="
    return f"{metric}{op}{c.stated} at z={noise}"


def _recipe(c: PaperClaim, check: Check) -> str:
    recipe = check["recipe"]
    if recipe["value"] is None:
        return "n/a"
    if c.kind == "noise":
        return f"z={_num(check['noise_needed'].get('recipe'))} {_mark(recipe['verdict'])}"
    return f"{_num(recipe['value'])} {_mark(recipe['verdict'])}"


def _mark(verdict: str) -> str:
    return {"reproduced": "(ok)", "not reproduced": "(NO)"}.get(verdict, f"({verdict})")


def _paper_method(check: Check) -> str:
    """The paper's accountant on the mechanism as the algorithm runs it, against the stated number."""
    t = check["verdict"]
    if t is None or t["paper_method"]["value"] is None:
        return "n/a"
    ratio = t["paper_method"]["value"] / t["claimed"]
    amount = f"{(ratio - 1) * 100:+.1f}%" if ratio < 10 else f"x{ratio:.3g}"
    return f"{t['paper_method']['accountant']} {_num(t['paper_method']['value'])} ({amount})"


def _bracket(check: Check) -> str:
    t = check["verdict"]
    if t is None:
        return "-"
    lower, upper = t["bracket"]
    if lower is None:
        return f"<= {_num(upper)} ({t['accountant']})"
    if lower == upper:
        return f"{_num(upper)} ({t['accountant']})"
    return f"[{_num(lower)}, {_num(upper)}] ({t['accountant']})"


def _verdict(check: Check) -> str:
    t = check["verdict"]
    if t is None:
        return check["checked"]["verdict"]
    if t["verdict"] == "false":
        factor = "" if t["factor"] is None else f" x{t['factor']:.3g}"  # None: infinite
        return f"FALSE{factor}; needs z={_num(t['noise_needed'])}"
    return t["verdict"]


def _findings(c: PaperClaim, check: Check) -> list[str]:
    recipe, lines = check["recipe"], []
    if recipe["verdict"] == "not reproduced":
        lines.append(f"the paper's own recipe ({c.recipe.label}) gives {_num(recipe['value'])}, "
                     f"not {c.stated if c.kind != 'noise' else c.target} ({recipe['relative_gap'] * 100:+.1f}%)")
    elif recipe["verdict"] == "not applicable":
        lines.append(f"the paper's recipe ({c.recipe.label}) is not applicable: {recipe['reason']}")
    if check["verdict"] is not None:
        lines.append(f"verdict {check['verdict']['verdict']}: {check['verdict']['reason']}")
    if c.sound is not None:
        lines.append(f"checked as: {c.sound.label}")
    for alt in check["alternatives"]:
        lines.append(f"alternative reading, {alt['reading']}: {_num(alt['value'])}"
                     + (f" ({alt['reason']})" if alt["value"] is None else ""))
    lines.extend(c.notes)
    return lines


def _selected(args: argparse.Namespace) -> list[PaperClaim]:
    """The register's claims ``--paper`` and ``--id`` select (every one by default)."""
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
    return claims


def checks_of(claims: list[PaperClaim], *, progress: bool = True) -> dict[str, Check]:
    """Each claim's check as ``--json`` prints it: the committed one while the code it was computed by is unchanged
    (:mod:`privaudit.accountants.paper_claims.cache`), else computed now (a line on stderr says why, a progress bar
    counts them)."""
    from privaudit.accountants.paper_claims.cache import read_cache

    cached, why = read_cache()
    missing = [c for c in claims if c.id not in cached]
    if missing and progress:
        print(f"privaudit: computing {len(missing)} claims' checks ({why or 'not in the committed checks'})",
              file=sys.stderr)
    fresh = {c.id: strict_json(check_claim(c).to_dict())
             for c in tqdm(missing, desc="claims", file=sys.stderr, leave=False, disable=None if progress else True)}
    return {c.id: cached.get(c.id) or fresh[c.id] for c in claims}


def strict_json(obj: Any) -> Any:
    """``obj`` as the JSON ``--json`` prints (NumPy numbers plain), read back: what the committed checks hold."""
    return json.loads(to_json(obj, indent=None))


def run(args: argparse.Namespace) -> int:
    claims = _selected(args)
    checks = checks_of(claims, progress=not args.json)
    if args.json:
        emit_json([checks[c.id] for c in claims])
        return 0
    print(privacy_listing(claims, checks))
    if args.id:
        return 0
    # the papers' utility claims, judged from the benchmark's reference (imported here: its statistics need torch)
    from privaudit.audit.benchmark.listing import UTILITY_HEADERS, UTILITY_NOTE, utility_rows

    utility = utility_rows(args.paper)
    if utility:
        print(UTILITY_NOTE)
        print(format_table(UTILITY_HEADERS, utility))
    return 0


def privacy_listing(claims: list[PaperClaim], checks: dict[str, Check]) -> str:
    """The privacy claims' table, its legend and each claim's findings."""
    rows = [[c.id, _stated(c), _recipe(c, checks[c.id]), _paper_method(checks[c.id]), _bracket(checks[c.id]),
             _verdict(checks[c.id])] for c in claims]
    out = [format_table(["claim", "stated", "paper's recipe", "paper's method", "tight epsilon (accountant)",
                         "verdict"], rows),
           "\npaper's method = the paper's accountant on the mechanism as the algorithm runs it; tight epsilon = "
           "the tightest sound accountant's bracket [lower, upper] (pld: optimistic and pessimistic discretisation); "
           "every accountant's value is in --json.",
           "verdict: holds | holds; paper's method does not show it | false (even the lower end exceeds the "
           "claim) | undecided (the claim lies in the bracket, or only RDP applies) | conservative (well below)."]
    for c in claims:
        lines = _findings(c, checks[c.id])
        if lines:
            out.append(f"\n{c.id} ({c.paper} {c.source}): {c.description}")
            out += [f"  - {line}" for line in lines]
    return "\n".join(out)
