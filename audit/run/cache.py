"""The run's keyed cache: every artifact a run may reuse (a cell's ``cell.json``, ``sensitivity.json``, the step
audits' results, the manifest ``run.json``) is written with the schema version :data:`CACHE_SCHEMA`, its key, a
SHA-256 digest of its own content and the SHA-256 of every file it references, and trusted only when
:func:`read_keyed` verifies all of them (the layout of the output directory: :mod:`privaudit.audit.run.runner`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from privaudit.audit.report.records import CellRecord
from privaudit.audit.report.schema import SchemaError
from privaudit.audit.run.cell import CellOutcome
from privaudit.audit.run.claim_checks import EVIDENCE_FILE as CLAIM_EVIDENCE
from privaudit.core.io import TEMP_GLOB, atomic_write_json, read_json, strict, to_json
from privaudit.audit.suite.model import CellSpec, Suite, config_hash


def clean_temporaries(out: Path) -> int:
    """Remove temporary files a killed run left behind: only privaudit's own (:data:`privaudit.core.io.TEMP_GLOB`),
    and only under the output directory, whose lock this run holds (so no other run's in-flight file is touched)."""
    removed = 0
    if out.is_dir():
        for tmp in out.rglob(TEMP_GLOB):
            if tmp.is_file() and not tmp.is_symlink():
                tmp.unlink(missing_ok=True)
                removed += 1
    return removed


def cell_dir(out: Path, spec: CellSpec) -> Path:
    return out / "cells" / spec.slug


#: Version of the cached artifacts' layout (cell.json, sensitivity.json, step_audit/results.json); a cache of another
#: version is recomputed. 4: no wall-clock time in any of them (the init's pretraining seconds, the sensitivity
#: claims' seconds), step audits in strict JSON. 5: a DP cell's record holds its claim checks (its
#: claim_checks.json beside it).
CACHE_SCHEMA = 5


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(payload: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a cached artifact's content (everything but the digest itself)."""
    body = {k: v for k, v in payload.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
                          .encode()).hexdigest()


def write_keyed(path: Path, out: Path, key: str, content: dict[str, Any], files: Sequence[Path]) -> None:
    """Write a cached artifact: its schema version, key, content, the SHA-256 of every file it references
    (paths relative to ``out``) and a digest of all that, so an edit or a torn file is seen on ``--resume``."""
    payload = {"schema": CACHE_SCHEMA, "key": key, **content,
               "files": {f.relative_to(out).as_posix(): file_sha256(f) for f in files}}
    payload = json.loads(to_json(payload, indent=None))  # the digest is of what is read back
    atomic_write_json(path, {**payload, "digest": _digest(payload)})


def read_keyed(path: Path, key: str, out: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The one reader for key-checked cached artifacts: ``(content, None)`` when ``path`` parses, has this
    schema version and ``key``, its digest matches its content and every file it references is unchanged;
    ``(None, None)`` when there is no cache; ``(None, why)`` when there is one that must not be trusted."""
    if not path.exists():
        return None, None
    try:
        saved = read_json(path)
    except (OSError, ValueError) as exc:
        return None, f"{path.name} does not parse ({type(exc).__name__})"
    if not isinstance(saved, dict):
        return None, f"{path.name} is not a JSON object"
    if saved.get("schema") != CACHE_SCHEMA:
        return None, f"{path.name} has schema {saved.get('schema')!r}, not {CACHE_SCHEMA}"
    if saved.get("key") != key:
        return None, f"{path.name} was written for another configuration"
    if saved.get("digest") != _digest(saved):
        return None, f"{path.name} was edited or is corrupt (digest mismatch)"
    files = saved.get("files")
    if not isinstance(files, dict):
        return None, f"{path.name} lists no file hashes"
    root = out.resolve()
    for rel, sha in files.items():
        target = (out / rel).resolve()
        if not target.is_relative_to(root):
            return None, f"{path.name} references {rel!r} outside the output directory"
        if not target.is_file():
            return None, f"{rel} is missing"
        if file_sha256(target) != sha:
            return None, f"{rel} was changed or is corrupt (sha256 mismatch)"
    return saved, None


def load_cached(out: Path, spec: CellSpec) -> tuple[CellRecord | None, str | None]:
    """A finished cell's record (and None) when its cache is intact (:func:`read_keyed`) and names a score file
    for every attack; else (None, why it is recomputed) or (None, None) when it never finished."""
    saved, problem = read_keyed(cell_dir(out, spec) / "cell.json", spec.key, out)
    if saved is None:
        return None, problem
    if saved.get("resolved") != strict(spec.resolved()):
        return None, "cell.json was written for another configuration"
    return cell_record(saved)


def cell_record(saved: dict[str, Any]) -> tuple[CellRecord | None, str | None]:
    """The record of a verified cell.json (:func:`read_keyed`) when it holds one of the schema
    (:class:`~privaudit.audit.report.records.CellRecord`) whose every attack's score file is among the files it holds
    a hash of; else (None, why)."""
    record = saved.get("record")
    if not isinstance(record, dict):
        return None, "cell.json holds no record"
    for attack in (record.get("attacks") or {}).values():
        if not isinstance(attack, dict) or not attack.get("scores") or attack["scores"] not in saved["files"]:
            return None, "cell.json names a score file it holds no hash of"
    try:
        return CellRecord.from_dict(record, "record"), None
    except SchemaError as exc:
        return None, f"cell.json holds no cell record ({exc})"


def persist(out: Path, outcome: CellOutcome) -> CellRecord:
    """Write a finished cell's scores, then its record (the commit point), read and written through the schema
    (:meth:`~privaudit.audit.report.records.CellRecord.from_run`); return the record."""
    spec = outcome.spec
    directory = cell_dir(out, spec)
    record = outcome.record
    atomic_write_json(directory / "timings.json", outcome.timings)
    if outcome.error is not None:
        atomic_write_json(directory / "error.json", {"id": spec.id, "error": outcome.error,
                                                      "traceback": record["details"].get("traceback")})
        record["details"].pop("traceback", None)
        return CellRecord.from_run(record, "record")
    files = []
    if outcome.evidence is not None:  # the claim checks' evidence, for the gate to recompute them
        atomic_write_json(directory / CLAIM_EVIDENCE, outcome.evidence)
        record["claim_checks"]["evidence"] = (directory / CLAIM_EVIDENCE).relative_to(out).as_posix()
        files.append(directory / CLAIM_EVIDENCE)
    for label, result in outcome.results.items():
        result.save(directory / "attacks" / label)
        scores = directory / "attacks" / label / "scores.npz"
        record["attacks"][label]["scores"] = scores.relative_to(out).as_posix()
        files += [scores, scores.with_name("result.json")]
    typed = CellRecord.from_run(record, "record")
    write_keyed(directory / "cell.json", out, spec.key,
                {"resolved": strict(spec.resolved()), "record": typed.to_dict()}, files)
    (directory / "error.json").unlink(missing_ok=True)
    return typed


#: The run's manifest and its side checks' results (the evidence :mod:`privaudit.audit.verify.evidence` recomputes
#: from).
MANIFEST, SENSITIVITY, STEP_AUDIT = "run.json", "sensitivity.json", "step_audit/results.json"


def write_manifest(out: Path, suite: Suite, sensitivity_key: str | None, step_key: str | None) -> None:
    """Write ``run.json``, the manifest of the run's evidence (:mod:`privaudit.audit.verify.evidence`): the resolved
    suite, the grid, the side checks' keys and the SHA-256 of the evidence files present (each cell's record, error and
    claim checks' evidence, the side checks' results)."""
    suite_dict = strict(suite.to_dict())
    grid, files = [], []
    for spec in suite.cells():
        directory = cell_dir(out, spec)
        grid.append({"id": spec.id, "key": spec.key, "dir": directory.relative_to(out).as_posix()})
        files += [directory / name for name in ("cell.json", "error.json", CLAIM_EVIDENCE)
                  if (directory / name).is_file()]
    files += [out / rel for rel in (SENSITIVITY, STEP_AUDIT) if (out / rel).is_file()]
    evidence = {f.relative_to(out).as_posix(): file_sha256(f) for f in files}
    write_keyed(out / MANIFEST, out, config_hash(suite_dict),
                {"suite": suite_dict, "grid": grid, "keys": {"sensitivity": sensitivity_key, "step_audit": step_key},
                 "evidence": evidence}, [])


def recompute_notice(what: str, why: str) -> None:
    """The one line that says a cache was not trusted (on stderr, even with --quiet: it changes what runs)."""
    print(f"privaudit: resume: {what}: {why}; recomputing", file=sys.stderr, flush=True)
