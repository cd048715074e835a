"""Release trials: the auditor's side of the release probes (DPCL Secs. 3.2.2 and 3.3.2; Nasr et al. 2023).

The gradient-canary audit of a defense whose step releases noised statistics besides its gradient (DPCL: SimCLR's
similarity matrix, Barlow Twins' means and SSEs; :meth:`privaudit.defenses.dp.base.DPDefense.probed_releases`) sets,
at every step, probes on k fixed distinct entries of each such release (:class:`ReleaseTrials`: the entries drawn once
from the auditor's seed, a fresh fair coin s = +-1 per entry and step from its own generator): the code path adds
s Delta / 2 before the noise, the observer reads the noised entries and the probes are withdrawn before the loss
(:mod:`privaudit.defenses.dp.release.release_probes`). The observation, centred by the noiseless entry, is y = s / 2 + N
/ Delta in units of the release's claimed sensitivity Delta, so x = y - s / 2 + [s > 0] = y + 1/2 ~ N([s > 0], z^2)
under the claim: one trial per entry and step, present for the + probe, the same two hypotheses (difference Delta) as
the gradient trials (:mod:`privaudit.attacks.bounds.trajectory`). Given the labels the trials are independent (each
entry's noise is drawn afresh at every step, entrywise; the coins are the auditor's), which is what the trajectory
bound's theorem needs.

One :class:`ReleaseTrials` pools releases whose claimed multipliers are equal (Barlow's four statistics share theirs):
under the claim all their trials have the same law, so one count of them bounds the common per-release mu. The
residuals (y - s / 2: the noise each release added, in units of its Delta) are kept per step, every release's in one
fixed order, for the released-noise checks (:mod:`privaudit.attacks.noise.released_noise`, :mod:`privaudit.attacks.
noise_structure`). The counts feed the whole step's bound (:mod:`privaudit.attacks.bounds.release_trajectory`).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch

from privaudit.attacks.bounds.trajectory import TrajectoryCounts, plan_trajectory
from privaudit.core.errors import ConfigError
from privaudit.defenses.dp.release.release_probes import ReleaseProbes
from privaudit.defenses.training.seeding import numpy_rng, torch_generator


def probe_entries(numel: int, k: int, seed: int, name: str) -> np.ndarray:
    """k distinct entries (flat indices) of a release of ``numel`` entries, uniformly without replacement."""
    if k < 1 or k > numel:
        raise ConfigError(f"release_probes: {k} entries of release {name!r} need 1 <= k <= {numel} (its entries)")
    return np.sort(numpy_rng(seed, "release-entries", name).choice(numel, size=k, replace=False)).astype(np.int64)


class ReleaseTrials:
    """Probes on at most ``k`` entries of each release of ``releases`` (name -> (entries, claimed sensitivity)), all at
    the claimed multiplier ``multiplier``, and their trials' counts at the threshold and form planned from it alone
    at level ``beta`` (module docstring)."""

    def __init__(self, releases: Mapping[str, tuple[int, float]], k: int, *, multiplier: float, steps: int,
                 beta: float, seed: int):
        if multiplier <= 0 or any(d <= 0 for _, d in releases.values()) or not releases:
            raise ConfigError(f"release probes: need releases with sensitivities and a multiplier > 0, got "
                              f"{dict(releases)!r} at {multiplier!r}")
        self.names = sorted(releases)
        self.sensitivity = {n: float(releases[n][1]) for n in self.names}
        self.index = {n: torch.as_tensor(probe_entries(releases[n][0], min(k, releases[n][0]), seed, n))
                      for n in self.names}
        self.k = sum(int(i.numel()) for i in self.index.values())
        self.multiplier = float(multiplier)
        self._gen = torch_generator(seed, "release-probes", *self.names)
        n = self.k * max(steps, 1) / 2  # balanced: half the probes are + in expectation
        self.counts = TrajectoryCounts(*plan_trajectory(noise_multiplier=self.multiplier, n0=n, n1=n, beta=beta))
        self.steps = 0
        self._pending: dict[str, np.ndarray] = {}

    def step_probes(self) -> dict[str, ReleaseProbes]:
        """This step's probes: s Delta / 2 on each entry of each release, s = +-1 a fresh fair coin per entry."""
        if self._pending:
            raise ConfigError(f"release probes: a step observed only {sorted(self._pending)} of {self.names}")
        out = {}
        for name in self.names:
            signs = torch.randint(0, 2, (self.index[name].numel(),), generator=self._gen).double() * 2 - 1
            out[name] = ReleaseProbes(self.index[name], signs * (self.sensitivity[name] / 2),
                                      lambda released, name=name, signs=signs: self.observe(name, released, signs))
        return out

    def observe(self, name: str, released: torch.Tensor, signs: torch.Tensor) -> None:
        """Count one release's trials of this step: x = y - s / 2 + [s > 0], y the centred observation in units of
        its Delta; its residuals y - s / 2 wait for the step's other releases (one residual record per step)."""
        y = np.asarray(released.double().cpu()).ravel() / self.sensitivity[name]
        s = np.asarray(signs.cpu()).ravel()
        if y.shape != s.shape or name in self._pending:
            raise ConfigError(f"release probes: release {name!r} observed twice in a step, or with {y.size} of its "
                              f"{s.size} entries")
        present = s > 0
        x = y - s / 2 + present
        self.counts.add(x[~present], x[present])
        self._pending[name] = y - s / 2
        if len(self._pending) == len(self.names):
            self.counts.add_noise(np.concatenate([self._pending.pop(n) for n in self.names]))
            self.steps += 1

    def to_dict(self) -> dict:
        """The counts with what the gate re-derives them against: the releases, their multiplier, their number."""
        return {**self.counts.to_dict(), "names": list(self.names), "multiplier": self.multiplier,
                "multiplicity": len(self.names), "entries": self.k}
