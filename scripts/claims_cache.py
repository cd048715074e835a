"""Write accountants/paper_claims/verdicts.json, the papers' claims checked by every accountant, which
``privaudit claims`` reads while the code it records is unchanged (accountants/paper_claims/cache.py).

    python scripts/claims_cache.py            # compute every claim's check (about two minutes) and write the file
    python scripts/claims_cache.py --check    # compute them and compare with the committed file; exit 1 on a difference

Run it after changing an accountant or a claim: tests/test_claims_cache.py fails while the file's modules differ
from the code's.
"""

from __future__ import annotations

import argparse
import json
import sys

from tqdm import tqdm


def _plain(obj):
    """NumPy scalars and arrays as JSON numbers and lists (as the command's --json writes them)."""
    return obj.item() if hasattr(obj, "item") else obj.tolist()


def compute() -> dict:
    """Every claim's check, by claim id, in the register's order, as ``privaudit claims --json`` prints it."""
    from privaudit.accountants.paper_claims import check_claim, paper_claims

    return {c.id: json.loads(json.dumps(check_claim(c).to_dict(), default=_plain))
            for c in tqdm(paper_claims(), desc="claims", file=sys.stderr)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file; write nothing")
    args = parser.parse_args(argv)
    from privaudit.accountants.paper_claims.cache import CACHE, build_cache, differences

    cache = build_cache(compute())  # before anything else of privaudit's is imported: the modules the checks load
    if args.check:
        committed = json.loads(CACHE.read_text(encoding="utf-8"))
        found = differences(committed["claims"], cache["claims"])
        print("\n".join(found[:20]) or f"{CACHE.name}: every claim's check is what this code computes")
        return 1 if found else 0
    from privaudit.core.io import atomic_write_text

    atomic_write_text(CACHE, json.dumps(cache, indent=1) + "\n")
    print(f"wrote {CACHE} ({len(cache['claims'])} claims, {len(cache['modules'])} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
