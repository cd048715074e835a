"""The recipe's first release replayed with one record added and with one removed: it may move by at most the claimed
sensitivity either way.

Record and replay (the release-distance check of Cebere et al. 2026's dp-recorder, on the code as it ran). The
recipe's first release is recorded on the user's n records: the batches its loader yielded for it (one, or several
under Opacus' virtual steps), every noise tensor Opacus' ``_generate_noise`` drew, and the released gradient after
the normaliser (:class:`~privaudit.defenses.watch.opacus_watch.OpacusWatch` with ``keep``). It is then replayed twice
with those batches and that noise (:class:`~privaudit.defenses.watch.opacus_watch.ReplayScript`; every draw is still
made, so the generators advance as they ran):

* on the same n records: the release must repeat, to the rounding of a sum of its records in its dtype
  (:func:`repeat_tolerance`, relative to its norm). If it does not, the release is not a function of its batch and
  noise (other randomness, nondeterminism) and no distance is judged: a note says why;
* on n + 1 records, the crafted record appended (the size replays' record,
  :func:`~privaudit.audit.user.training.training_neighbours.resized`), the new record last in the release's last batch;
* on n - 1 records, one of the user's own records removed (the last one its loader yielded into the release's
  largest batch, so that no batch empties; the records after it keep their order), the batches re-indexed.

Under the add/remove claim each neighbour's release differs from the base by one record's clipped gradient alone,
over the normaliser: d = ||r' - r|| x normaliser <= C, the clip the noise is calibrated to. A larger d refutes the
claim, naming the distance and the neighbour: the record's contribution as the code applied it exceeds C, or
something else in the release moved with one record (a normaliser or any statistic of the batch or the dataset).
The two directions see different things: the added record is crafted (its gradient far above C, so clipping lies on
its path); the removed one is the user's own, and the dataset and the batch shrink (a size-derived quantity that
rounds alike at n and n + 1 may not at n - 1). The slack bounds the rounding of the released gradient's dtype
(float32; :mod:`privaudit.accountants.trace.rounding`):
2 u (||r|| + ||r'||) x normaliser for the releases, plus 2 gamma_k k C for the clipped sums (k records summed,
:func:`~privaudit.defenses.dp.release.as_run.rounding_slack`), plus the repeat's own difference.

Sees: a clip above the claimed one or clipping skipped, for a record whose gradient exceeds C; a normaliser or any
term of the release that follows the batch or the dataset's size, in either direction. Cannot see: a bug at other steps
only, a noise shortfall (both releases carry the same noise: the trace and the canaries see it), a clipping that spares
norms below the crafted record's (the watch's clipping probe sees it).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from privaudit.accountants.trace import rounding
from privaudit.audit.user.training.training_neighbours import resized
from privaudit.audit.user.training.training_runs import Recipe, WatchedRun, run_watched
from privaudit.defenses.dp.release.as_run import release_distance, rounding_slack
from privaudit.defenses.watch.opacus_watch import ReplayScript

def repeat_tolerance(release: Any, chunks: tuple[tuple[int, ...], ...]) -> float:
    """The relative difference under which a repeated release counts as the same release: the rounding of a sum of
    its records in the released gradient's dtype (a reduction in another order)."""
    return rounding.relative_tolerance(release.dtypes.get("release"), sum(len(c) for c in chunks))


def _first(run: WatchedRun) -> Any:
    return run.watch.steps[0]


def _scripted(run: WatchedRun, chunks: tuple[tuple[int, ...], ...], draws: int) -> str | None:
    """Why a replay did not run as scripted (None: its loader batches and every draw were replaced, and its release
    drew exactly the scripted records)."""
    done, seen = run.watch.replaced, _first(run).indices
    if done["batches"] != len(chunks) or done["draws"] != draws or done["mismatched"]:
        return (f"the replay could not substitute the recorded batches and noise (batches {done['batches']} of "
                f"{len(chunks)}, draws {done['draws']} of {draws}, {done['mismatched']} of another shape)")
    if seen is None or sorted(seen.tolist()) != sorted(i for c in chunks for i in c):
        return "the replayed release drew other records than its scripted batches"
    return None


def _not_judged(reason: str, runs: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return {"judged": False, "note": f"release distance not judged: {reason}", "runs": runs}, []


def release_replay(recipe: Recipe, x: torch.Tensor, y: torch.Tensor) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the replay's record, its findings): the module docstring's check on the recipe's first release."""
    n = len(x)
    base = _first(run_watched(recipe, x, y, stop_after=1, keep=True))
    if not base.chunks or base.release is None or not base.draws or not base.normalizer:
        return _not_judged("the first release drew no batch from a loader over the members, or no noise through "
                           "Opacus' _generate_noise", 1)
    chunks, draws = tuple(base.chunks), tuple(base.draws)
    again = run_watched(recipe, x, y, stop_after=1, keep=True, script=ReplayScript(chunks, (draws,)))
    wrong = _scripted(again, chunks, len(draws))
    if wrong:
        return _not_judged(wrong, 2)
    repeat = release_distance(base.release, _first(again).release)
    size = float(torch.linalg.vector_norm(base.release))
    if repeat > repeat_tolerance(base, chunks) * max(size, 1e-30):
        return _not_judged(f"the first release did not repeat with its own batch and noise (it moved by {repeat:.3g}, "
                           f"{repeat / max(size, 1e-30):.3g} of its norm): it depends on other randomness", 2)
    xs, ys = resized(x, y, n + 1)
    added = chunks[:-1] + (chunks[-1] + (n,),)  # the new record last, in the release's last loader batch
    judged = {"add": _neighbour(recipe, base, repeat, xs, ys, added, draws)}
    removal = _removal(chunks)
    if removal is not None:
        kept = torch.arange(n) != removal[0]
        judged["remove"] = _neighbour(recipe, base, repeat, x[kept], y[kept], removal[1], draws)
    return _combined(judged)


def _removal(chunks: tuple[tuple[int, ...], ...]) -> tuple[int, tuple[tuple[int, ...], ...]] | None:
    """(the record removed, the batches re-indexed without it): the last record of the largest batch (None: every
    batch holds one record, and removing one would empty it)."""
    big = max(range(len(chunks)), key=lambda i: (len(chunks[i]), i))
    if len(chunks[big]) < 2:
        return None
    gone = chunks[big][-1]
    return gone, tuple(tuple(i - (i > gone) for i in c if i != gone) for c in chunks)


def _neighbour(recipe: Recipe, base: Any, repeat: float, x: torch.Tensor, y: torch.Tensor,
               chunks: tuple[tuple[int, ...], ...], draws: tuple[torch.Tensor, ...]) -> dict[str, Any] | str:
    """One neighbour replayed with the base's noise: its :func:`_distance` record, or why it did not run as
    scripted."""
    run = run_watched(recipe, x, y, stop_after=1, keep=True, script=ReplayScript(chunks, (draws,)))
    wrong = _scripted(run, chunks, len(draws))
    return wrong or _distance(base, _first(run), repeat, sum(len(c) for c in chunks))


def _distance(base: Any, nb: Any, repeat: float, k: int) -> dict[str, Any]:
    """A neighbour's distance (times the base's normaliser), its slack and its ratio to the clip."""
    c, normalizer = float(base.clip), float(base.normalizer)
    dist = release_distance(base.release, nb.release) * normalizer
    sizes = float(torch.linalg.vector_norm(base.release) + torch.linalg.vector_norm(nb.release)) * normalizer
    dtype = rounding.least_precise(base.dtypes.get("release"), nb.dtypes.get("release"))
    slack = rounding_slack(sizes, k, k * c, dtype) + repeat * normalizer
    return {"distance": dist, "sensitivity": c, "ratio": dist / c if c > 0 else math.inf, "slack": slack,
            "normalizer": normalizer, "batch": k}


def _combined(judged: dict[str, dict[str, Any] | str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The replay's record (the add-one neighbour's fields at the top, each neighbour under ``neighbours``) and one
    finding per neighbour whose distance exceeds the clip."""
    runs = 2 + len(judged)
    if isinstance(judged["add"], str):
        return _not_judged(judged["add"], runs)
    record = {"judged": True, **judged["add"], "batch": judged["add"]["batch"] - 1, "runs": runs,
              "neighbours": dict(judged)}
    found = []
    for name, r in judged.items():
        if isinstance(r, str):
            record.setdefault("notes", []).append(f"{name}-one release not judged: {r}")
        elif r["distance"] > r["sensitivity"] + r["slack"]:
            found.append(_finding(name, r))
    return record, found


def _finding(name: str, r: dict[str, Any]) -> dict[str, Any]:
    verb = "added" if name == "add" else "removed"
    return {"check": "neighbours", "quantity": "release_distance",
            "values": {"distance": r["distance"], "clip": r["sensitivity"], "neighbour": name},
            "message": f"the first release moved by {r['distance']:.6g} (times the normaliser {r['normalizer']:.6g}) "
                       f"when one record was {verb}, with the same batch and noise: more than the clip "
                       f"{r['sensitivity']:.6g} the noise is calibrated to (slack {r['slack']:.2g}). The {verb} "
                       f"record's contribution as the code applied it exceeds the sensitivity, or something else in "
                       f"the release moved with one record"}
