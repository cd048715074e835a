"""DPCL's similarity trials: the auditor's side of the similarity probes (DPCL Sec. 3.2.2, Thm. 1; Nasr et al. 2023).

The gradient-canary audit of DPCL-SimCLR (:mod:`privaudit.attacks.gradient_canary_audit`) sets, at every step, probes
on k fixed distinct off-diagonal entries of the 2|B| x 2|B| similarity matrix (:class:`SimilarityTrials`: the entries
drawn once from the auditor's seed, a fresh fair coin s = +-1 per entry and step from its own generator): the code
path adds s Delta_S / 2 before the noise, the observer reads the noised entries and the probes are withdrawn before
the loss (:mod:`privaudit.defenses.dp.similarity_probes`). The observation, centred by the noiseless entry, is
y = s / 2 + N / Delta_S in units of Delta_S (the claim's Thm. 1 sensitivity), so x = y - s / 2 + [s > 0] =
y + 1/2 ~ N([s > 0], z_S^2) under the claim: one trial per entry and step, present for the + probe, the same two
hypotheses (difference Delta_S) as the gradient trials (:mod:`privaudit.attacks.bounds.trajectory`). Given the labels
the trials are independent (each entry's noise is drawn afresh at every step, entrywise; the coins are the
auditor's, independent of the noise), which is what the trajectory bound's theorem needs. The counts feed the
combined bound (:mod:`privaudit.attacks.bounds.similarity_trajectory`).
"""

from __future__ import annotations

import numpy as np
import torch

from privaudit.attacks.bounds.trajectory import TrajectoryCounts, plan_trajectory
from privaudit.core.errors import ConfigError
from privaudit.defenses.dp.similarity_probes import SimilarityProbes
from privaudit.defenses.seeding import numpy_rng, torch_generator


def off_diagonal_entries(size: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """k distinct off-diagonal entries (i, j), i != j, of a size x size matrix, uniformly without replacement."""
    cells = size * (size - 1)
    if k < 1 or k > cells:
        raise ConfigError(f"similarity_probes: {k} entries need 1 <= k <= {cells} (off-diagonal entries of a "
                          f"{size} x {size} similarity matrix)")
    flat = numpy_rng(seed, "similarity-entries").choice(cells, size=k, replace=False)
    rows, rest = flat // (size - 1), flat % (size - 1)
    return rows.astype(np.int64), (rest + (rest >= rows)).astype(np.int64)


class SimilarityTrials:
    """k probed entries of a ``size`` x ``size`` similarity matrix of sensitivity ``sensitivity`` (the claim's
    Delta_S) and their trials' counts at the threshold and form planned from the claim's z_S (module docstring)."""

    def __init__(self, size: int, k: int, *, sensitivity: float, multiplier: float, steps: int, beta: float,
                 seed: int):
        if sensitivity <= 0 or multiplier <= 0:
            raise ConfigError(f"similarity probes: need a sensitivity and a multiplier > 0, got {sensitivity!r}, "
                              f"{multiplier!r}")
        rows, cols = off_diagonal_entries(size, k, seed)
        self.rows, self.cols = torch.as_tensor(rows), torch.as_tensor(cols)
        self.k, self.sensitivity, self.multiplier = k, float(sensitivity), float(multiplier)
        self._gen = torch_generator(seed, "similarity-probes")
        n = k * max(steps, 1) / 2  # balanced: half the probes are + in expectation
        self.counts = TrajectoryCounts(*plan_trajectory(noise_multiplier=multiplier, n0=n, n1=n, beta=beta / 2))
        self.steps = 0

    def step_probes(self) -> SimilarityProbes:
        """This step's probes: s Delta_S / 2 on each entry, s = +-1 a fresh fair coin; the observer counts them."""
        signs = torch.randint(0, 2, (self.k,), generator=self._gen).double() * 2 - 1
        return SimilarityProbes(self.rows, self.cols, signs * (self.sensitivity / 2),
                                lambda released: self.observe(released, signs))

    def observe(self, released: torch.Tensor, signs: torch.Tensor) -> None:
        """Count one step's trials: x = y - s / 2 + [s > 0], y the centred observation in units of Delta_S; the
        residuals y - s / 2 (the noise the release added, in units of Delta_S) are kept for a released-noise check."""
        y = np.asarray(released.double().cpu()).ravel() / self.sensitivity
        s = np.asarray(signs.cpu()).ravel()
        if y.shape != s.shape:
            raise ConfigError(f"similarity probes: expected {s.size} observed entries, got {y.size}")
        present = s > 0
        x = y - s / 2 + present
        self.counts.add(x[~present], x[present])
        self.counts.add_noise(y - s / 2)
        self.steps += 1
