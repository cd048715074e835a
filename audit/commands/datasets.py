"""``privaudit datasets``: list the datasets and whether each is available locally."""

from __future__ import annotations

import argparse

from audit.commands.common import emit_json, format_table
from core.datasets import DATASETS, missing_files, resolve_data_dir


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("datasets", help="list datasets and whether their files are present")
    p.add_argument("--data-dir", default=None, help="directory holding torchvision-format datasets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = resolve_data_dir(args.data_dir)
    rows = []
    for name, spec in DATASETS.items():
        missing = missing_files(name, args.data_dir)
        rows.append({"name": name, "available": not missing, "embedded": spec.subdir is None,
                     "description": spec.info.description,
                     "location": "embedded" if spec.subdir is None else str((root or "<data-dir>")) + "/" + spec.subdir,
                     "missing": missing})
    if args.json:
        emit_json(rows)
    else:
        print(format_table(["dataset", "available", "location", "description"],
                           [[r["name"], "yes" if r["available"] else "no", r["location"], r["description"]]
                            for r in rows]))
    return 0
