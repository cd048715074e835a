"""``privaudit datasets``: list the datasets and whether each is available locally."""

from __future__ import annotations

import argparse

from privaudit.audit.commands.common import emit_json, format_table
from privaudit.core.datasets import DATASETS, install_hint, locate, missing_files


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("datasets", help="list datasets and whether their files are present")
    p.add_argument("--data-dir", default=None, help="directory holding torchvision-format datasets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = []
    for name, spec in DATASETS.items():
        missing = missing_files(name, args.data_dir)
        found = locate(name, args.data_dir)
        rows.append({"name": name, "available": not missing, "embedded": spec.subdir is None,
                     "description": spec.info.description,
                     "location": "embedded" if spec.subdir is None else (str(found) if found else None),
                     "missing": missing, "install": None if not missing else install_hint(name)})
    if args.json:
        emit_json(rows)
    else:
        print(format_table(["dataset", "available", "location / how to get it", "description"],
                           [[r["name"], "yes" if r["available"] else "no",
                             r["location"] if r["available"] else r["install"], r["description"]]
                            for r in rows]))
    return 0
