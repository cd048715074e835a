"""Batch samplers. The sampler a defense uses is recorded in its privacy claim, because accountants
assume a specific one:

* ``poisson``: each example joins each batch independently with probability q (Abadi et al. 2016;
  what Opacus' and dp-accounting's Poisson-subsampled accountants assume);
* ``without-replacement``: every step draws a fixed-size batch uniformly without replacement,
  independently across steps (DPCL Sec. 5.1; Wang, Balle & Kasiviswanathan 2019);
* ``shuffle``: epochs of a random permutation cut into batches (what most non-private training does;
  no standard DP accountant matches it, so DP defenses do not use it).
"""

from __future__ import annotations

from typing import Iterator

import torch

from privaudit.core.errors import check_positive, check_probability, one_of

SAMPLERS = ("poisson", "without-replacement", "shuffle")


def poisson_batches(n: int, sample_rate: float, steps: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """``steps`` batches, each containing every index in [0, n) independently with probability q."""
    check_probability("sample_rate", sample_rate, open_interval=False)
    for _ in range(steps):
        yield (torch.rand(n, generator=gen) < sample_rate).nonzero().flatten()


def fixed_size_batches(n: int, batch_size: int, steps: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """``steps`` independent batches of ``batch_size`` distinct indices drawn uniformly from [0, n)."""
    if not 0 < batch_size <= n:
        raise ValueError(f"batch_size: must lie in [1, {n}], got {batch_size}")
    for _ in range(steps):
        yield torch.randperm(n, generator=gen)[:batch_size]


def shuffled_batches(n: int, batch_size: int, epochs: int, gen: torch.Generator,
                     drop_last: bool = True) -> Iterator[torch.Tensor]:
    """``epochs`` passes over a fresh random permutation of [0, n), cut into batches."""
    batch_size = min(batch_size, n)
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        stop = n - n % batch_size if drop_last else n
        for start in range(0, stop, batch_size):
            yield perm[start:start + batch_size]


def steps_per_epoch(n: int, batch_size: int) -> int:
    return max(1, n // min(batch_size, n))


def make_batches(sampler: str, n: int, batch_size: int, epochs: int, gen: torch.Generator) -> tuple[Iterator[torch.Tensor], int]:
    """Batches for ``epochs`` epochs of expected batch size ``batch_size``, and the number of steps.

    For ``poisson`` the sampling rate is q = batch_size / n; for the others the batch size is exact.
    """
    check_positive("batch_size", batch_size)
    check_positive("epochs", epochs)
    steps = steps_per_epoch(n, batch_size) * epochs
    if sampler == "poisson":
        return poisson_batches(n, min(1.0, batch_size / n), steps, gen), steps
    if sampler == "without-replacement":
        return fixed_size_batches(n, min(batch_size, n), steps, gen), steps
    if sampler == "shuffle":
        return shuffled_batches(n, batch_size, epochs, gen), steps
    raise one_of("sampler", sampler, SAMPLERS)

