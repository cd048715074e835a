"""Neighbours replayed: does the recipe treat a dataset one record larger or smaller differently?

A DP claim is a statement about one mechanism applied to any dataset: its sampling rate, number of steps, noise,
clip and the constant the noisy sum is divided by are fixed before the data is seen (the accountant composes those
numbers, whatever the data). A recipe that derives any of them from the dataset's size releases a neighbouring
dataset through another mechanism than the one accounted; the claim then does not describe the run, whatever its
epsilon. (Opacus' ``make_private`` derives ``sample_rate = 1 / len(data_loader)`` and ``expected_batch_size =
int(len(dataset) * sample_rate)``, the normaliser of ``loss_reduction="mean"``, from the data loader it is given.)

The check is by replay, not by reading the library: the user's function is run, with the same seeds, on the
user's records truncated to each size n + j for j in [-radius, radius] (j < 0: the last |j| records removed;
j > 0: j crafted records appended, each the first record reflected through the data's range,
:func:`~privaudit.defenses.dp.release.as_run.crafted_record`), and stopped after its first ``steps`` releases. What each
replay's code did is read from the watch (:data:`QUANTITIES`): the sampler and its configured rate, its batches per
epoch (the steps of an epoch), the normaliser, noise multiplier and clip of its releases, and the (noise multiplier,
sample rate) its accountant was told. Any of them that differs between sizes is a finding, naming the quantity and
its value at each size (exact: the replays' code ran with these values). A number of steps per epoch that changes
with the size makes the count of releases itself tell the two datasets apart (epsilon infinite).
"""

from __future__ import annotations

from typing import Any

import torch

from privaudit.audit.user.training.training_runs import Recipe, WatchedRun, run_watched
from privaudit.defenses.dp.release.as_run import crafted_record

QUANTITIES = ("sampler", "sample_rate", "batches_per_epoch", "normalizer", "noise_multiplier", "clip",
              "accountant_multiplier", "accountant_rate")
#: Relative tolerance between replays' measured values (float32 rounding of the measured normaliser).
REL_TOL = 1e-5


def quantities(run: WatchedRun) -> dict[str, Any]:
    """What one replay's code used (:data:`QUANTITIES`), from its first release, and its parameter layout."""
    w, first = run.watch, run.watch.steps[0]
    loader = w.loader or {}
    acc = first.accountant[0] if first.accountant else (None, None)
    return {"sampler": loader.get("sampler"), "sample_rate": loader.get("sample_rate"),
            "batches_per_epoch": loader.get("batches_per_epoch"), "normalizer": first.normalizer,
            "noise_multiplier": first.drawn_std / first.clip if first.drawn_std is not None and first.clip
            else first.multiplier, "clip": first.clip, "accountant_multiplier": acc[0], "accountant_rate": acc[1],
            "tensors": (w.optimizer or {}).get("tensors")}


def resized(x: torch.Tensor, y: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The user's records truncated to ``size``, or extended with crafted records (module docstring)."""
    n = len(x)
    if size <= n:
        return x[:size], y[:size]
    flat = x.reshape(n, -1)
    extra = crafted_record(flat, flat.min(dim=0).values, flat.max(dim=0).values).reshape(1, *x.shape[1:])
    k = size - n
    return torch.cat([x, extra.expand(k, *x.shape[1:])]), torch.cat([y, y[:1].expand(k)])


def replay_sizes(recipe: Recipe, x: torch.Tensor, y: torch.Tensor, *, radius: int, steps: int = 2
                 ) -> dict[int, dict[str, Any]]:
    """size -> :func:`quantities` of the recipe replayed at that size (n - radius .. n + radius, n included)."""
    n = len(x)
    out = {}
    for size in range(max(1, n - radius), n + radius + 1):
        xs, ys = resized(x, y, size)
        out[size] = quantities(run_watched(recipe, xs, ys, stop_after=steps))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= REL_TOL * max(abs(a), abs(b))
    return a == b


def size_findings(replays: dict[int, dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """One finding per quantity that differs between sizes: its value at every size, and the neighbours (n - 1,
    n + 1) at which it differs from n's."""
    out = []
    base = replays[n]
    for q in QUANTITIES:
        values = {size: r[q] for size, r in replays.items()}
        if all(_same(v, base[q]) for v in values.values()):
            continue
        moved = [size for size in (n - 1, n + 1) if size in values and not _same(values[size], base[q])]
        shown = ", ".join(f"{_fmt(v)} at n={size}" for size, v in sorted(values.items()))
        steps = " (the count of releases then tells the neighbours apart: epsilon is infinite)" \
            if q == "batches_per_epoch" else ""
        out.append({"check": "neighbours", "quantity": q, "values": {str(k): v for k, v in sorted(values.items())},
                    "neighbours_differ": moved,
                    "message": f"{q} depends on the dataset's size: {shown}; the claim's mechanism does not depend on "
                               f"the data, so a neighbouring dataset is released by another mechanism than the one "
                               f"accounted" + (f" (it differs at the neighbour(s) n={moved})" if moved else "") + steps})
    return out


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)
