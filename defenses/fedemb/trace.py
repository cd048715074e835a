"""DP-FedEmb's rounds as they ran: the training trace of a federated run (Algorithm 1 l. 4-15, Algorithm 2 l. 4-12).

Each round is one step of the claim's event (users sampled without replacement, a Gaussian release;
:func:`~privaudit.defenses.fedemb.defense.round_claim`), so the round is recorded in the columns of
:class:`~privaudit.accountants.trace.trace_record.TrainingTrace` that
:func:`~privaudit.accountants.trace.trace.check_trace`
judges for the DP-SGD engine:

* ``batch_size``: the users the round sampled (their index set also goes to the sampling recorder: per-user
  inclusion counts, disjoint round pairs' overlaps, repeated rounds), ``units``: its virtual clients;
* ``noise_std``: sigma x the round's clip, on the clipped sum; ``sensitivity``: 2 x the round's clip (one user's
  replacement moves one client's clipped delta across the clip ball, :mod:`~privaudit.defenses.fedemb.aggregate`);
  ``multiplier``: the round's multiplier composed from the noise it drew, sigma on the deltas and, under adaptive
  clipping, the clipped-count query's std at sensitivity 1 (also its ``releases`` column, which names it);
* as ran: ``noise_norm``, ``noise_digest``, ``tensor_noise_digests`` and ``noise_law`` (its joint law within the
  round, :mod:`privaudit.defenses.dp.release.noise_law`) of the noise drawn, ``unit_norm_max``
  (the largest norm a clipped delta entered the sum with, in units of the configured clip: entered x clip_0 /
  clip_t, so that under adaptive clipping the check against the trace's one clip is the check against each round's),
  and ``normalizer`` (the number of clients the noised sum is divided by).

Replayed neighbours (:func:`round_replay`, ``replays``): the first and the middle round are re-run with the same
randomness (every generator restored, no canaries) on the members and on the members with one sampled user's examples
replaced by their reflection through the data's range (the replace-one neighbour the claim covers); the two noised
sums (the update times the clients) may differ by at most the round's sensitivity, twice its clip, up to float32
rounding (:func:`~privaudit.defenses.dp.release.as_run.rounding_slack`). It sees any contribution of one user beyond one
client's clipped delta, or a normaliser or noise that moves with the user's data.

What it cannot see: a release that scales the noise after drawing it (the canary users' released-noise checks
measure the noise added).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from privaudit.accountants.trace import rounding
from privaudit.accountants.trace.trace_record import AS_RUN_FIELDS, STEP_FIELDS, TrainingTrace
from privaudit.defenses.dp.release.as_run import SamplingRecorder, release_distance, rounding_slack
from privaudit.defenses.fedemb.aggregate import event_noise_multiplier

#: One user's replacement moves the clipped-count query by at most one client's bit (the count of clients at or
#: under the clip, :func:`~privaudit.defenses.fedemb.aggregate.adaptive_clip_update`).
COUNT_SENSITIVITY = 1.0
#: What a round's compared values are computed in: the stds, sensitivities and normaliser are Python floats, a
#: client delta's clipped norm float32 (recomputed over the delta's values: :meth:`RoundTrace.trace` sets the terms).
PRECISION = {"noise": rounding.DEFAULT, "sample_rate": rounding.DEFAULT, "unit_norm": "float32", "unit_norm_terms": 0,
             "normalizer": rounding.DEFAULT}


class RoundTrace:
    """Records every round of a federated run (module docstring) over ``num_users`` users at configured clip
    ``clip``."""

    def __init__(self, num_users: int, clip: float):
        self.num_users, self.clip = int(num_users), float(clip)
        self.sampling = SamplingRecorder(self.num_users)
        self.columns: dict[str, list[Any]] = {k: [] for k in STEP_FIELDS + AS_RUN_FIELDS}
        self.replays: list[dict[str, Any]] = []
        self.dim = 0

    def record(self, users: Any, aggregate: Any, *, clip: float, sigma: float, count_std: float | None) -> None:
        """One round: its sampled ``users`` (indices), its :class:`~privaudit.defenses.fedemb.aggregate.Aggregate`,
        the round's ``clip``, the noise multiplier ``sigma`` on the clipped sum and the std of the clipped-count
        query's noise the round draws (None: no adaptive clipping): the round's multiplier composes the two."""
        self.sampling.observe(users)
        entered = aggregate.entered_max
        row = {"batch_size": int(users.numel()), "noise_std": sigma * clip, "sensitivity": 2.0 * clip,
               "multiplier": event_noise_multiplier(sigma, count_std), "units": int(aggregate.norms.numel()),
               "noise_norm": aggregate.noise_norm,
               "unit_norm_max": None if entered is None else entered * self.clip / clip,
               "normalizer": float(aggregate.norms.numel()), "noise_digest": aggregate.noise_digest,
               "tensor_noise_digests": aggregate.tensor_digests, "noise_law": aggregate.noise_law}
        for k, v in row.items():
            self.columns[k].append(v)
        if count_std is not None:
            self.columns.setdefault("releases", []).append(
                [{"name": "clipped count", "std": float(count_std), "sensitivity": COUNT_SENSITIVITY, "values": 1}])
        self.dim = int(aggregate.noised_numel)

    def trace(self, users_per_round: int) -> TrainingTrace:
        """The run's :class:`TrainingTrace` (unit ``user``, sampled without replacement)."""
        return TrainingTrace(unit="user", sampler="without-replacement", population=self.num_users,
                             sample_rate=users_per_round / self.num_users, batch_size_configured=int(users_per_round),
                             dim=self.dim, clip=self.clip, columns=dict(self.columns),
                             sampling=self.sampling.to_dict(), replays=list(self.replays),
                             precision={**PRECISION, "unit_norm_terms": self.dim})


def _noised_sum(aggregate: Any) -> torch.Tensor:
    """The round's noised sum, flat (its update times the clients it was divided by)."""
    return torch.cat([u.detach().reshape(-1) for u in aggregate.update.values()]).double() * aggregate.norms.numel()


def round_replay(t: int, run: Callable[[torch.Tensor], Any], x: torch.Tensor, rows: torch.Tensor,
                 clip: float, base: Any = None) -> dict[str, Any]:
    """Round ``t`` re-run by ``run(x) -> Aggregate`` (the round's own code, its randomness restored, no canaries) on
    ``x`` (unless ``base``, the round as it ran, had no canaries) and on ``x`` with the examples ``rows`` of one
    sampled user reflected through the data's range: the replace-one record (module docstring), its distance at
    most 2 ``clip``."""
    low, high = x.amin(0), x.amax(0)
    base = run(x) if base is None else base
    other = x.clone()
    other[rows] = low + high - x[rows]
    nb = run(other)
    a, b = _noised_sum(base), _noised_sum(nb)
    n, sensitivity = base.norms.numel(), 2.0 * clip
    dist = release_distance(a, b)
    dtype = rounding.least_precise(*(rounding.dtype_name(u) for u in base.update.values()))
    slack = rounding_slack(float(a.norm() + b.norm()), n, 2 * n * clip, dtype)
    return {"step": t + 1, "neighbour": "replace", "distance": dist, "sensitivity": sensitivity, "slack": slack,
            "ratio": dist / sensitivity if sensitivity > 0 else float("inf"), "units": [n, nb.norms.numel()]}
