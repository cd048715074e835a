"""Claims of DP-SGD-shaped training runs: T steps, each sampling a batch and releasing K Gaussian mechanisms.

This is the mechanism of every sampled defense (DP-SGD, DPCL, DP-GCL, Logit-DP, DP-FedEmb with
independent noise) and of the ``privaudit epsilon`` / ``calibrate`` commands:

- ``sampling="poisson"``: each unit joins the batch independently with probability q
  (``PoissonSampledDpEvent``; natural relation add/remove);
- ``sampling="without-replacement"``: a uniformly random batch of exactly B of the N units
  (``SampledWithoutReplacementDpEvent``; natural relation replace-one, N public), DPCL's and DP-FedEmb's.

``mechanisms=K`` Gaussian mechanisms with the same noise multiplier z are released per step (DPCL: the
gradient and the similarity matrix, K = 2; the gradient, two means and two variances, K = 5). How they are
accounted is ``composition``:

- ``"joint"`` (default, the correct model when all K are computed on the same batch):
  ``SelfComposed(Sampled(Composed([G(z)] * K)), T)`` — subsampling amplifies the composition of the K
  mechanisms as a whole (equivalently one Gaussian of noise z / sqrt(K) on the sample);
- ``"separate"``: ``SelfComposed(Composed([Sampled(G(z))] * K), T)`` — each mechanism amplified as if it
  had its own independent sample. This is DPCL's recipe (Sec. 4.2.2 / 4.3.2: "the subsampled version
  eps'_1(alpha), eps'_2(alpha) ... overall RDP T (eps'_1(alpha) + eps'_2(alpha))"). It is *not* a valid
  bound for mechanisms that share a batch: at DPCL's parameters it understates epsilon by two orders of
  magnitude (see :mod:`privaudit.accountants.paper_claims`).
"""

from __future__ import annotations

import math
from typing import Callable

from privaudit.accountants.claim import RELATIONS, PrivacyClaim
from privaudit.accountants.events import (ComposedDpEvent, DpEvent, GaussianDpEvent, PoissonSampledDpEvent,
                                SampledWithoutReplacementDpEvent, SelfComposedDpEvent)
from privaudit.core.errors import ConfigError, check_positive, check_probability, one_of

SAMPLINGS = ("poisson", "without-replacement")
COMPOSITIONS = ("joint", "separate")
NATURAL_RELATION = {"poisson": "add-remove", "without-replacement": "replace-one"}


def _check_int(field: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < minimum:
        raise ConfigError(f"{field}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


def sampled_gaussian_event(noise_multiplier: float | list[float], steps: int, *, sample_rate: float | None = None,
                           dataset_size: int | None = None, batch_size: int | None = None,
                           sampling: str = "poisson", mechanisms: int = 1,
                           composition: str = "joint") -> DpEvent:
    """The event of T sampled steps, each releasing ``mechanisms`` Gaussians (or the listed noise multipliers)."""
    if sampling not in SAMPLINGS:
        raise one_of("sampling", sampling, SAMPLINGS)
    if composition not in COMPOSITIONS:
        raise one_of("composition", composition, COMPOSITIONS)
    steps = _check_int("steps", steps)
    zs = list(noise_multiplier) if isinstance(noise_multiplier, (list, tuple)) else \
        [noise_multiplier] * _check_int("mechanisms", mechanisms)
    for z in zs:
        check_positive("noise_multiplier", z)
    if sampling == "poisson":
        if sample_rate is None:
            if dataset_size is None or batch_size is None:
                raise ConfigError("sample_rate: give --sample-rate, or --dataset-size and --batch-size")
            dataset_size = _check_int("dataset_size", dataset_size)
            batch_size = _check_int("batch_size", batch_size)
            if batch_size > dataset_size:
                raise ConfigError(f"batch_size: must be <= dataset_size ({dataset_size}), got {batch_size}")
            sample_rate = batch_size / dataset_size
        check_probability("sample_rate", sample_rate, open_interval=False)

        def sample(e: DpEvent) -> DpEvent:
            return PoissonSampledDpEvent(float(sample_rate), e)
    else:
        if dataset_size is None or batch_size is None:
            raise ConfigError("sampling: without-replacement needs --dataset-size and --batch-size "
                              "(the batch size is fixed)")
        n, m = _check_int("dataset_size", dataset_size), _check_int("batch_size", batch_size)
        if m > n:
            raise ConfigError(f"batch_size: must be <= dataset_size ({n}), got {m}")

        def sample(e: DpEvent) -> DpEvent:
            return SampledWithoutReplacementDpEvent(n, m, e)
    gaussians = [GaussianDpEvent(float(z)) for z in zs]
    if composition == "joint" or len(gaussians) == 1:
        step = sample(gaussians[0] if len(gaussians) == 1 else ComposedDpEvent(gaussians))
    else:
        step = ComposedDpEvent([sample(g) for g in gaussians])
    return SelfComposedDpEvent(step, steps)


def sampled_gaussian_claim(noise_multiplier: float | list[float], steps: int, delta: float, *,
                           sample_rate: float | None = None, dataset_size: int | None = None,
                           batch_size: int | None = None, sampling: str = "poisson",
                           relation: str | None = None, unit: str = "example", mechanisms: int = 1,
                           composition: str = "joint", paper_accountant: str = "rdp", source: str = "",
                           notes: tuple[str, ...] = ()) -> PrivacyClaim:
    """:func:`sampled_gaussian_event` wrapped in a claim; ``relation`` defaults to the sampling's natural one."""
    if relation is None:
        relation = NATURAL_RELATION.get(sampling, "add-remove")
    if relation not in RELATIONS:
        raise one_of("relation", relation, RELATIONS)
    event = sampled_gaussian_event(noise_multiplier, steps, sample_rate=sample_rate, dataset_size=dataset_size,
                                   batch_size=batch_size, sampling=sampling, mechanisms=mechanisms,
                                   composition=composition)
    if composition == "separate" and (len(noise_multiplier) if isinstance(noise_multiplier, (list, tuple))
                                      else mechanisms) > 1:
        notes = notes + ("each mechanism is accounted as if it had its own independent sample (DPCL's recipe); "
                         "this does not bound mechanisms computed on the same batch",)
    params = {"noise_multiplier": noise_multiplier, "steps": steps, "sample_rate": sample_rate,
              "dataset_size": dataset_size, "batch_size": batch_size, "sampling": sampling,
              "mechanisms": mechanisms, "composition": composition}
    return PrivacyClaim(event=event, relation=relation, unit=unit, delta=delta, paper_accountant=paper_accountant,
                        sampler=sampling, source=source, notes=tuple(notes),
                        params={k: v for k, v in params.items() if v is not None})


def sampled_gaussian_template(**kwargs) -> Callable[[float], PrivacyClaim]:
    """``z -> sampled_gaussian_claim(z, **kwargs)``, the template :func:`~privaudit.accountants.calibrate.calibrate` takes."""
    kwargs = dict(kwargs)
    sampled_gaussian_claim(1.0, **kwargs)  # validate once, up front
    return lambda z: sampled_gaussian_claim(z, **kwargs)


def steps_for_epochs(epochs: float, dataset_size: int, batch_size: int) -> int:
    """T = E N / B rounded up: the step count of E epochs of fixed-size batches, counting a fractional last
    batch of each epoch as DPCL does (50,000 / 128 = 390.625 steps per epoch, T = E / q)."""
    return math.ceil(epochs * dataset_size / batch_size - 1e-9)
