"""Witnesses of violated claims: saved atomically, replayed bit for bit.

A witness is one safetensors file (no code runs on load) holding both neighbours' input rows
(``a.<field>``, ``b.<field>``: D and D'), both outputs (``out.a``, ``out.b``) and the parameters of
the model the quantity was evaluated at (``model.<name>``, when the defense takes a model), with a JSON header
(safetensors metadata ``privaudit``) naming everything needed to rebuild the function: the claim id,
the setting (defense hyper-parameter overrides, batch size in units), the context the defense was
built in (seed, dataset), the shared randomness seed, the torch version and thread count, and the
bound, observed distance, tolerance and verdict found (no wall-clock time: the same search gives the same
bytes). A ``.json`` copy of the header sits beside it for people; the replay reads only the safetensors file.

:func:`replay` rebuilds the quantity from the register, recomputes both outputs with the recorded
thread count, compares them with the stored ones bit for bit, recomputes the distance and the
verdict, and reports whether everything matched.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from privaudit.core.errors import ConfigError
from privaudit.core.io import atomic_save_tensors, atomic_write_json
from privaudit.audit.sensitivity.domains import Rows
from privaudit.audit.sensitivity.evaluator import Found, Target
from privaudit.audit.sensitivity.verdict import distance, is_violation, tolerance

FORMAT = "privaudit-sensitivity-witness"
VERSION = 1
METADATA_KEY = "privaudit"


def witness_name(claim_id: str, seed: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", claim_id).strip("-")
    return f"{safe}.seed{seed}.safetensors"


def save_witness(directory: str | Path, claim: Any, target: Target, found: Found, context: dict[str, Any],
                 result: dict[str, Any]) -> Path:
    """Write the witness of ``found`` (a pair on ``target``) for ``claim`` (a ClaimSpec); returns its path."""
    a_rows, b_rows = found.pair.neighbours(target.relation, target.domain.unit_size)
    tensors = {f"a.{k}": v.detach().cpu().contiguous() for k, v in a_rows.items()}
    tensors.update({f"b.{k}": v.detach().cpu().contiguous() for k, v in b_rows.items()})
    tensors["out.a"] = found.fa.detach().cpu().contiguous()
    tensors["out.b"] = found.fb.detach().cpu().contiguous()
    state = dict(target.model_state or {})
    if found.pair.params is not None and target.model_state is not None:
        state.update(found.pair.params)  # the searched parameter values (names as in the state dict)
    for k, v in state.items():
        tensors[f"model.{k}"] = v.detach().cpu().contiguous()
    meta = {
        "format": FORMAT, "version": VERSION, "claim": claim.id, "source": claim.source, "relation": claim.relation,
        "norm": claim.norm, "formula": claim.formula, "setting": target.setting, "params": target.params,
        "randomness": int(found.pair.randomness), "fields": sorted(a_rows), "context": context,
        "model_state": target.model_state is not None,
        "bound": result["bound"], "observed": result["observed"], "tolerance": result["tolerance"],
        "ratio": result["ratio"], "verdict": result["verdict"], "torch": torch.__version__,
        "num_threads": torch.get_num_threads(),
    }  # no time of day: a witness is evidence (its SHA-256 is in sensitivity.json), the same for the same seed
    return save_with_header(Path(directory) / witness_name(claim.id, int(context.get("seed", 0))), tensors, meta)


def save_with_header(path: Path, tensors: dict[str, torch.Tensor], header: dict[str, Any]) -> Path:
    """A witness file: ``tensors`` as safetensors with ``header`` in their metadata (:data:`METADATA_KEY`), and
    ``header`` beside them as JSON (same name, ``.json``), each written atomically."""
    atomic_save_tensors(path, tensors, metadata={METADATA_KEY: json.dumps(header, default=float)})
    atomic_write_json(path.with_suffix(".json"), header)
    return path


def load_witness(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors and header of a witness file; a bad file is a ConfigError naming it."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--replay: no such file {str(path)!r}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {})[METADATA_KEY])
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own SafetensorError on a file of another format
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"--replay: {str(path)!r} is not a privaudit sensitivity witness ({reason})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ConfigError(f"--replay: {str(path)!r} is not a privaudit sensitivity witness")
    return tensors, meta


@contextmanager
def num_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` intra-op threads (reductions can round differently with another count)."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _rows(tensors: dict[str, torch.Tensor], side: str) -> Rows:
    prefix = f"{side}."
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def replay(path: str | Path) -> dict[str, Any]:
    """Recompute a witness; the result has the check's keys plus ``identical_outputs`` and ``reproduced``."""
    from privaudit.audit.sensitivity.register import CLAIMS, Context, Setting

    tensors, meta = load_witness(path)
    claim = CLAIMS.get(meta["claim"])
    if claim is None:
        raise ConfigError(f"--replay: the witness's claim {meta['claim']!r} is not in this register")
    ctx = Context(**meta["context"])
    rows_a, rows_b = _rows(tensors, "a"), _rows(tensors, "b")
    seed = int(meta["randomness"])
    # The defense is rebuilt (pretraining included) with the recorded thread count too.
    with num_threads(meta.get("num_threads")):
        state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")} or None
        target = claim.target(Setting.from_dict(meta["setting"]), ctx, state)
        with torch.no_grad():
            fa = target.fn(target.domain.batch(rows_a), seed).detach().reshape(-1).cpu()
            fb = target.fn(target.domain.batch(rows_b), seed).detach().reshape(-1).cpu()
    identical = bool(torch.equal(fa, tensors["out.a"]) and torch.equal(fb, tensors["out.b"]))
    observed = distance(fa, fb, claim.norm)
    bound = target.bound
    tol = tolerance(fa, fb, bound, claim.norm)
    # One pair can refute a bound, never confirm one.
    v = "violated" if is_violation(observed, bound, tol) else "inconclusive"
    same = identical and v == meta["verdict"] and observed == meta["observed"] and bound == meta["bound"]
    return {"claim": claim.id, "source": claim.source, "relation": claim.relation, "bound": bound,
            "observed": observed, "ratio": observed / bound if bound else None, "verdict": v, "witness": str(path),
            "config": {"setting": meta["setting"], "params": target.params, "randomness": seed,
                       "context": meta["context"], "tolerance": tol, "recorded": {k: meta[k] for k in (
                           "bound", "observed", "verdict")}},
            "identical_outputs": identical, "reproduced": same}
