"""Records of a DP run as it ran, for the trace's as-run checks (:mod:`privaudit.accountants.trace.as_run`).

* :class:`SamplingRecorder` sees every batch the training sampler drew (before anything else touches it): each
  unit's inclusion count, the overlap of each disjoint step pair (0, 1), (2, 3), ..., each step's drawn size and a
  digest of its index set, and one digest of the whole sequence (to compare two runs' batches).
* :func:`noise_digest`: a short digest of a step's noise vector (two steps with one digest reused their noise);
  :func:`tensor_noise_digests`: one of every tensor's leading noise values (noise reused across tensors, or on one
  tensor across steps).
* :func:`replay`: a step's own privatisation re-run on neighbouring batches under the same randomness
  (:class:`~privaudit.defenses.dp.release.randomness.StepRandomness` is position-stable: a record appended last, or the
  last removed, leaves every other record's views, groups and noise as they were), the releases' distance in units of
  the claimed normaliser, and its float32 rounding slack. The neighbours follow the claim's relation
  (:func:`neighbour_pairs`): add/remove appends a crafted record (:func:`crafted_record`: the batch's first row
  reflected through the data's range, far from the data) and removes a record (the one of largest clipped
  contribution, moved last with the base re-run in that order, where the units are the batch's records; else the
  last), and appends a copy of that record; replace-one replaces the last record by the crafted one.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from privaudit.accountants.trace import rounding
from privaudit.accountants.trace.as_run import NO_NOISE

#: How many steps of a run are replayed (the first, and the middle step).
REPLAY_STEPS = 2


def index_digest(idx: torch.Tensor) -> str:
    """A 16-hex digest of a batch's sorted index set."""
    data = np.sort(idx.detach().cpu().numpy().astype(np.int64))
    return hashlib.blake2b(data.tobytes(), digest_size=8).hexdigest()


def noise_digest(noise: torch.Tensor) -> str:
    """A 16-hex digest of a noise vector's bytes."""
    return hashlib.blake2b(noise.detach().cpu().contiguous().numpy().tobytes(), digest_size=8).hexdigest()


#: Leading noise values of a tensor that :func:`tensor_noise_digests` digests (a tensor with fewer gets None).
PREFIX = 8


def tensor_noise_digests(noise: torch.Tensor, numels: Sequence[int]) -> list[str | None]:
    """A 12-hex digest of the first :data:`PREFIX` noise values of every tensor in the flat layout ``numels``
    (None for a tensor with fewer values; :data:`NO_NOISE` where all of them are 0). Two (step, tensor) cells with
    one digest drew the same leading noise: a generator re-created per tensor or per step (a continuous Gaussian
    repeats 8 values with probability 0; 48 bits keep chance collisions below 1e-4 for 10^5 cells); a tensor whose
    leading noise is 0 drew none. No noise value is stored, only the digests."""
    flat = noise.detach().reshape(-1).to("cpu", torch.float32)
    out, start = [], 0
    for k in numels:
        k, head = int(k), flat[start:start + PREFIX]
        if k < PREFIX:
            out.append(None)
        else:
            out.append(NO_NOISE if not bool(head.any())
                       else hashlib.blake2b(head.numpy().tobytes(), digest_size=6).hexdigest())
        start += k
    return out


class SamplingRecorder:
    """Inclusion counts, disjoint-pair overlaps, sizes and digests of the batches drawn from ``n`` units."""

    def __init__(self, n: int):
        self.counts = np.zeros(n, dtype=np.int64)
        self.sizes: list[int] = []
        self.overlaps: list[int] = []
        self.step_digests: list[str] = []
        self._previous: torch.Tensor | None = None
        self._all = hashlib.blake2b(digest_size=16)

    def observe(self, idx: torch.Tensor) -> None:
        """Record one step's drawn batch (indices into the training set)."""
        flat = idx.detach().cpu().long().flatten()
        np.add.at(self.counts, flat.numpy(), 1)
        self.sizes.append(int(flat.numel()))
        digest = index_digest(flat)
        self.step_digests.append(digest)
        self._all.update(digest.encode())
        if len(self.sizes) % 2 == 0:
            self.overlaps.append(int(np.intersect1d(self._previous.numpy(), flat.numpy()).size))
        self._previous = flat

    def to_dict(self) -> dict[str, Any]:
        return {"counts": self.counts.tolist(), "sizes": list(self.sizes), "overlaps": list(self.overlaps),
                "step_digests": list(self.step_digests), "digest": self._all.hexdigest()}


def replay_steps(steps: int) -> set[int]:
    """The (0-based) steps a run replays."""
    return set(sorted({0, steps // 2})[:REPLAY_STEPS]) if steps > 0 else set()


def crafted_record(batch: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """The batch's first row reflected through the data's range: low + high - x_0 (one row)."""
    return (low + high - batch[0]).unsqueeze(0)


def strongest_last(batch: torch.Tensor, clipped: Any) -> torch.Tensor | None:
    """The batch with its record of largest clipped contribution moved last, where units are the batch's records
    (one unit per row); None otherwise."""
    entered = getattr(clipped, "entered", None)
    if entered is None or entered.numel() != len(batch) or len(batch) < 2:
        return None
    j = int(entered.argmax())
    order = torch.cat([torch.arange(j), torch.arange(j + 1, len(batch)), torch.tensor([j])])
    return batch[order.to(batch.device)]


def neighbour_pairs(batch: torch.Tensor, crafted: torch.Tensor, relation: str, base: Any,
                    privatize: Callable[[torch.Tensor], Any]) -> dict[str, tuple[Any, torch.Tensor]]:
    """name -> (the base (clipped, release) it is compared with, the neighbouring batch). Add/remove: the crafted
    record appended; the last record removed (the record of largest contribution, moved last, where units are
    records: the base is then re-run in that order). Replace-one: the last record replaced by the crafted one."""
    if relation == "replace-one":
        return {"replace": (base, torch.cat([batch[:-1], crafted]))}
    pairs = {"add": (base, torch.cat([batch, crafted]))}
    moved = strongest_last(batch, base[0])
    if moved is None:
        pairs["remove"] = (base, batch[:-1])
    else:
        pairs["remove"] = (privatize(moved), moved[:-1])
        pairs["add-copy"] = (base, torch.cat([batch, moved[-1:]]))
    return pairs


def release_distance(base: torch.Tensor, other: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(other.double() - base.double()))


def probabilistic_gamma(k: int, dtype: str = "float32") -> float:
    """Higham & Mary's probabilistic gamma for a sum of k terms in ``dtype``
    (:func:`privaudit.accountants.trace.rounding.sum_rounding`)."""
    return rounding.sum_rounding(dtype, k)


def rounding_slack(size: float, units: int, mass: float, dtype: str = "float32") -> float:
    """The rounding a replay's release distance may carry in ``dtype`` (the releases'): 2 u ``size`` for two releases
    of norms summing to ``size`` (normaliser included), plus 2 gamma~_k ``mass`` for two clipped sums of ``units``
    terms whose clipped norms sum to ``mass`` (:func:`probabilistic_gamma`)."""
    return 2 * rounding.unit_roundoff(dtype) * size + 2 * probabilistic_gamma(units, dtype) * mass


def replay(step: int, batch: torch.Tensor, crafted: torch.Tensor, relation: str, base: Any,
           privatize: Callable[[torch.Tensor], Any], *, normalizer: float, sensitivity: float) -> list[dict[str, Any]]:
    """Each neighbour's release distance from its base (:func:`neighbour_pairs`; the step's own release without
    canaries) times the claimed ``normalizer``. ``privatize(batch) -> (clipped, release)`` is the step's own code.
    The slack bounds the rounding of the releases' dtype (float32): the two releases' (2 u (|a| + |a'|) normalizer) and
    the two clipped sums'
    (2 gamma~_k times their units' clipped norms, k the units summed: :func:`probabilistic_gamma`)."""
    out = []
    for name, ((base_clipped, base_release), nb) in neighbour_pairs(batch, crafted, relation, base,
                                                                     privatize).items():
        clipped, rel = privatize(nb)
        dist = release_distance(base_release.gradient, rel.gradient) * normalizer
        size = float(torch.linalg.vector_norm(base_release.gradient.double()) +
                     torch.linalg.vector_norm(rel.gradient.double())) * normalizer
        mass = _entered_mass(base_clipped) + _entered_mass(clipped)
        slack = rounding_slack(size, base_clipped.n_units + clipped.n_units, mass,
                               rounding.least_precise(rounding.dtype_name(base_release.gradient),
                                                      rounding.dtype_name(rel.gradient)))
        out.append({"step": step + 1, "neighbour": name, "distance": dist, "sensitivity": float(sensitivity),
                    "slack": slack, "ratio": dist / sensitivity if sensitivity > 0 else float("inf"),
                    "units": [base_clipped.n_units, clipped.n_units]})
    return out


def _entered_mass(clipped: Any) -> float:
    """The sum of the clipped units' norms as they entered (the magnitudes a float32 sum of them rounds over)."""
    entered = getattr(clipped, "entered", None)
    return 0.0 if entered is None else float(entered.double().abs().sum())
