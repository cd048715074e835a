"""Clipping, noising and aggregation of virtual-client deltas (DP-FedEmb Algorithm 1 lines 13–15,
Algorithm 2 lines 10–12), and adaptive clipping (Andrew, Thakkar, McMahan & Ramaswamy 2021).

Each virtual client's delta (backbone only for DP-FedEmb; backbone and head for DP-FedAvg) is
clipped to L2 norm gamma as one vector over all its tensors; the clipped deltas are summed,
N(0, (sigma gamma)^2) noise is added to every coordinate of the sum, and the result is divided by
the number of virtual clients |S^(t)|.

Sensitivity: replacing one user changes at most one virtual client's clipped delta, from one point
of the gamma-ball to another, so the sum moves by at most **2 gamma** under the replace-one relation
that sampling without replacement requires (App. C). The accounting event's noise multiplier is
therefore sigma / 2 (see :func:`event_noise_multiplier`).

Adaptive clipping (Andrew et al., Alg. 1 with the geometric update): b = (sum_V 1[||Delta_V|| <= C]
+ N(0, sigma_b^2)) / |S|, C <- C exp(-eta_C (b - kappa)). Under replace-one the count moves by at
most 1 (not 1/2 as with their centred add/remove bits), so the round is a Gaussian mechanism with
1 / z^2 = (2 / sigma)^2 + 1 / sigma_b^2. Andrew et al. suggest sigma_b = |S| / 20, which assumes
hundreds of clients per round; with a handful it would spend most of the budget, so by default the
count query gets a fixed 5% of the round's RDP budget (1 / sigma_b^2 = 0.05 / z^2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from privaudit.core.errors import ConfigError
from privaudit.defenses.dp.release.as_run import noise_digest, tensor_noise_digests
from privaudit.defenses.dp.release.noise import gaussian
from privaudit.defenses.dp.release.noise_law import noise_law

Params = dict[str, torch.Tensor]


def stacked_norms(deltas: Params) -> torch.Tensor:
    """L2 norm of each client's delta over all its tensors: (C,)."""
    return torch.sqrt(sum(d.flatten(1).pow(2).sum(dim=1) for d in deltas.values()))


def clip_deltas(deltas: Params, clip_norm: float) -> tuple[Params, torch.Tensor]:
    """Scale each client's delta to norm <= clip_norm; returns (clipped deltas, pre-clipping norms).

    A delta with a non-finite entry (local training diverged) is replaced by zero: clipping must map
    *every* input into the clip_norm ball for the sensitivity argument, and 0 is in the ball.
    """
    norms = stacked_norms(deltas)
    finite = torch.isfinite(norms)
    scale = torch.where(finite, torch.clamp(clip_norm / norms.clamp_min(1e-12), max=1.0), torch.zeros_like(norms))
    clipped = {}
    for name, d in deltas.items():
        d = torch.where(finite.view(-1, *([1] * (d.dim() - 1))), d, torch.zeros_like(d))
        clipped[name] = d * scale.view(-1, *([1] * (d.dim() - 1)))
    return clipped, norms


@dataclass(frozen=True)
class Aggregate:
    """The noised mean update (keys = exactly the parameters that were aggregated) and its statistics; what the
    round's trace records as it ran (:mod:`privaudit.defenses.fedemb.trace`): the largest norm a clipped delta
    entered the sum with (``entered_max``, measured on the clipped deltas), the norm of the noise drawn, its digest
    and every tensor's leading-noise digest (:mod:`privaudit.defenses.dp.release.as_run`)."""

    update: Params
    noised_numel: int
    norms: torch.Tensor
    clipped_fraction: float
    noise_std: float
    nonfinite_fraction: float = 0.0
    entered_max: float | None = None
    noise_norm: float | None = None
    noise_digest: str | None = None
    tensor_digests: list[str | None] | None = None
    noise_law: dict | None = None  # the noise's joint law within the round (defenses.dp.release.noise_law)


def noised_mean(deltas: Params, clip_norm: float, noise_multiplier: float, gen: torch.Generator,
                canary: Params | None = None, observer: Callable[[Params, Params], None] | None = None,
                withdrawn: Params | None = None) -> Aggregate:
    """Clip each client's delta, sum, add N(0, (noise_multiplier * clip_norm)^2) per coordinate, divide by |S|.

    White-box canary hook (canary users, :mod:`privaudit.attacks.canaries.user_canary`): ``canary`` (same keys and
    shapes as the sum) is added to the sum of clipped deltas before the noise, as the clipped updates of the
    canary users taking part this round would be; ``observer(noisy_sum, data_sum)`` sees the privatised
    sum (before the division by the data-independent |S|) and the clipped sum of the real clients
    (what an auditor who knows the rest of the data can compute; see :mod:`privaudit.defenses.dp.release.step`). The
    noise draw does not depend on the canaries. ``withdrawn`` (part of ``canary``: the trajectory probes) leaves the
    update after the observer has seen it.
    """
    sums, norms, entered = clipped_sum(deltas, clip_norm)
    return noised_release(sums, norms, clip_norm, noise_multiplier, gen, canary, observer, entered=entered,
                          withdrawn=withdrawn)


def clipped_sum(deltas: Params, clip_norm: float) -> tuple[Params, torch.Tensor, float]:
    """The sum over clients of the clipped deltas (:func:`clip_deltas`), the pre-clipping norms (C,), and the largest
    norm a clipped delta has as it enters the sum (measured on the clipped deltas themselves)."""
    clipped, norms = clip_deltas(deltas, clip_norm)
    entered = float(stacked_norms(clipped).detach().max()) if len(norms) else 0.0
    return {name: d.sum(dim=0) for name, d in clipped.items()}, norms, entered


def noised_release(sums: Params, norms: torch.Tensor, clip_norm: float, noise_multiplier: float,
                   gen: torch.Generator, canary: Params | None = None,
                   observer: Callable[[Params, Params], None] | None = None, *,
                   entered: float | None = None, withdrawn: Params | None = None) -> Aggregate:
    """:func:`noised_mean` from the clipped deltas' sum ``sums`` and the clients' norms (clients in chunks);
    ``entered``: the largest clipped norm that entered ``sums`` (:func:`clipped_sum`), kept on the aggregate."""
    n_clients = norms.numel()
    std = noise_multiplier * clip_norm
    update, numel = {}, 0
    noisy_sums, data_sums, drawn = {}, {}, []
    for name, total in sums.items():
        data_sums[name] = total.detach()
        if canary is not None:
            total = total + canary[name].to(total)
        if std > 0:
            noise = gaussian(total.shape, std, gen, device=total.device, dtype=total.dtype)
            drawn.append(noise.detach().reshape(-1))
            total = total + noise
        noisy_sums[name] = total
        update[name] = total / n_clients
        numel += total.numel()
    if observer is not None:
        observer({k: v.detach() for k, v in noisy_sums.items()}, data_sums)
    if withdrawn is not None:  # the trajectory probes leave the update (they were seen by the observer only)
        update = {k: (v - withdrawn[k].to(v)) / n_clients for k, v in noisy_sums.items()}
    finite = torch.isfinite(norms)
    noise = torch.cat(drawn).cpu() if drawn else None
    return Aggregate(update, numel, norms, float(((norms > clip_norm) | ~finite).float().mean()), std,
                     float((~finite).float().mean()), entered_max=entered,
                     noise_norm=None if noise is None else float(noise.double().norm()),
                     noise_digest=None if noise is None else noise_digest(noise),
                     tensor_digests=None if noise is None else tensor_noise_digests(noise, [d.numel() for d in drawn]),
                     noise_law=None if noise is None else noise_law(noise, [t.shape for t in sums.values()]))


COUNT_BUDGET_SHARE = 0.05  # default share of a round's RDP budget spent on the clipped-count query


def event_noise_multiplier(noise_multiplier: float, count_stddev: float | None = None) -> float:
    """The replace-one Gaussian noise multiplier of one round: noise std over sensitivity.

    Without adaptive clipping: sigma / 2 (sum of clipped deltas, sensitivity 2 gamma). With the
    noised clipped-count query of stddev sigma_b (sensitivity 1): 1/z^2 = (2/sigma)^2 + 1/sigma_b^2.
    """
    if noise_multiplier <= 0:
        return 0.0
    inv = (2.0 / noise_multiplier) ** 2
    if count_stddev is not None:
        inv += 1.0 / count_stddev ** 2
    return 1.0 / math.sqrt(inv)


def count_stddev_for(event_z: float, share: float = COUNT_BUDGET_SHARE) -> float:
    """sigma_b giving the clipped-count query ``share`` of a round whose event multiplier is z."""
    return event_z / math.sqrt(share)


def split_noise(noise_multiplier: float, share: float = COUNT_BUDGET_SHARE) -> tuple[float, float]:
    """For a fixed sigma on the deltas: (event z, sigma_b) with the count query taking ``share`` of the budget."""
    z = noise_multiplier * math.sqrt(1.0 - share) / 2.0
    return z, count_stddev_for(z, share)


def delta_noise_multiplier(event_z: float, count_stddev: float | None = None) -> float:
    """Inverse of :func:`event_noise_multiplier`: the sigma to use on the clipped sum for event multiplier z."""
    if count_stddev is None:
        return 2.0 * event_z
    rest = event_z ** -2 - count_stddev ** -2
    if rest <= 0:
        raise ConfigError(f"clip_count_stddev: {count_stddev} must exceed the round's noise multiplier {event_z:.4g} "
                          "(the clipped-count query alone would spend the whole budget)")
    return 2.0 / math.sqrt(rest)


def adaptive_clip_update(clip_norm: float, norms: torch.Tensor, *, target_quantile: float, learning_rate: float,
                         count_stddev: float, gen: torch.Generator) -> tuple[float, float]:
    """Andrew et al.'s geometric update; returns (new clip norm, the noised unclipped fraction b)."""
    unclipped = float((norms <= clip_norm).float().sum())
    noisy = unclipped + count_stddev * float(torch.randn((), generator=gen)) if count_stddev > 0 else unclipped
    b = noisy / norms.numel()
    return clip_norm * math.exp(-learning_rate * (b - target_quantile)), b
