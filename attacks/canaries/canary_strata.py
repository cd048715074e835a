"""Dirac canaries placed so that every parameter tensor holds some: the per-tensor noise check's coverage.

Why. A uniform draw of m coordinates out of d leaves a tensor of n parameters without a canary with probability
about (1 - m / d)^n: a bias of 64 entries in a model of a million parameters, audited by 20,000 canaries, holds
none about a quarter of the time, and a release that adds no noise there is then never seen
(:mod:`privaudit.attacks.noise.noise_structure`). :func:`stratified_coordinates` keeps the uniform draw and tops every
tensor up to ``min(n, k)`` canaries (k = :data:`PER_TENSOR`, or m // tensors when m is too small), taking the
places from tensors that hold more than their minimum. The draw reads only the seed and the tensor sizes (never
an observation), so every bound on the canaries stays sound; a tensor that already holds its minimum everywhere
leaves the uniform draw as it was.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from privaudit.core.errors import ConfigError

#: Canaries every tensor holds at least (all of a smaller tensor): an unnoised tensor's residuals are ~0, so even
#: this many canaries over two steps give a chi-square lower tail far below the gate's level.
PER_TENSOR = 10


def tensor_index(coordinates: np.ndarray, numels: Sequence[int]) -> np.ndarray:
    """The tensor (index into ``numels``, the tensors' sizes in the flat layout's order) of each flat coordinate."""
    ends = np.cumsum(np.asarray(numels, dtype=np.int64))
    coordinates = np.asarray(coordinates, dtype=np.int64)
    if coordinates.size and (coordinates.min() < 0 or coordinates.max() >= ends[-1]):
        raise ConfigError(f"canaries: coordinates must lie in [0, {int(ends[-1])})")
    return np.searchsorted(ends, coordinates, side="right")


def stratified_coordinates(uniform: np.ndarray, numels: Sequence[int], rng: np.random.Generator,
                           per_tensor: int = PER_TENSOR) -> np.ndarray:
    """``uniform`` (distinct flat coordinates) with every tensor topped up to min(its size, k) canaries, k =
    min(``per_tensor``, m // tensors); the same number of canaries drawn at random from tensors above their
    minimum are moved. The canary count and distinctness are kept; the order is the uniform draw's, then the
    added ones."""
    numels = np.asarray(numels, dtype=np.int64)
    if numels.sum() < 1 or (numels < 0).any():
        raise ConfigError(f"canaries: tensor sizes must be >= 0 with a positive total, got {numels.tolist()}")
    coords = np.asarray(uniform, dtype=np.int64)
    k = min(per_tensor, coords.size // max(1, int((numels > 0).sum())))
    floor = np.minimum(numels, k)
    held = np.bincount(tensor_index(coords, numels), minlength=numels.size)
    need = np.maximum(floor - held, 0)
    if not need.any():
        return coords
    starts = np.cumsum(numels) - numels
    added = []
    for g in np.flatnonzero(need):
        free = np.setdiff1d(np.arange(starts[g], starts[g] + numels[g]), coords, assume_unique=True)
        added.append(rng.choice(free, size=int(need[g]), replace=False))
    surplus = held - floor
    drop = np.zeros(coords.size, dtype=bool)
    groups = tensor_index(coords, numels)
    left = int(need.sum())
    for pos in rng.permutation(coords.size):
        if left == 0:
            break
        if surplus[groups[pos]] > 0:
            surplus[groups[pos]] -= 1
            drop[pos], left = True, left - 1
    out = np.concatenate([coords[~drop], *added])
    return out
