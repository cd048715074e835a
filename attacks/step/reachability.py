"""The reachability test: does a release's floating-point support have holes that tell neighbours apart?

Why. A DP guarantee about real-valued noise says nothing about which doubles a floating-point release can produce.
The float64 release y = x + s (log u - log1p(-u)), u = k 2^-53, produces at most 2^53 doubles, and *which* doubles
depends on x: an output y that some k gives for x may be one that no k gives for a neighbour x'. Such an output is
impossible under the neighbour, so the event {y} has positive probability under x and probability 0 under x', and
no epsilon covers it; if such outputs together have probability p under x, the release is not (epsilon, delta)-DP
for any delta < p (Mironov 2012, "On significance of the least significant bits for differential privacy", CCS,
Sec. 4). A statistical test of the output distribution cannot see it: the distribution is right, its support is
full of holes.

The test (exact, per output). Draw outputs y of the release at x through the release's own code, and decide for
each whether the neighbour's release can produce y *bit for bit*:

* a release on a grid (``support(y)``: ALM's exact discrete logistic and discrete Gaussian, the snapped Laplace)
  produces every grid point in its range from every input: y is reachable from x' iff it is on the grid and in
  range;
* a release that is a nondecreasing function ``at(x', k)`` of its randomness k in a finite range (the textbook
  float64 logistic: k in [0, 2^53)) is inverted: bisection finds the smallest k with at(x', k) >= y, and the
  k within ``WINDOW`` of it are evaluated exactly (the float arithmetic is monotone only up to an ulp); y is
  reachable iff one of them gives y.

Soundness of the inversion rests on ``at`` being the sampler's own arithmetic; the test checks it: every output
drawn at x must be reachable from x itself (``self_unreachable`` counts those that are not; any is an error: the
description does not describe the sampler, or the sampler is not the mechanism its claim is about). An output found
impossible under x' is a certainty, not an estimate; its probability under x is estimated with a one-sided
Clopper-Pearson lower bound p_lo at level alpha, and the release is refuted at delta whenever p_lo > delta (pure DP:
whenever one output is impossible).

Float32 post-processing (the saved ``nn.Linear``) needs no test of its own when the release's support is the same
for every input: every function of the release then has the same support too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
from scipy import stats

from privaudit.core.errors import ConfigError, check_positive, check_probability

#: k within this distance of the bisection's answer are evaluated exactly
WINDOW = 2


@dataclass(frozen=True)
class Reachability:
    """The reachability test of one direction (outputs drawn at x, checked against the neighbour x').

    ``draws`` outputs, ``impossible`` of them not producible from x', ``self_unreachable`` not producible from x
    itself by the release's description (must be 0), ``fraction_lower``: one-sided Clopper-Pearson lower bound on
    P_x[an output impossible under x'] at level ``alpha``; ``method``: ``grid`` or ``inversion``."""

    draws: int
    impossible: int
    self_unreachable: int
    fraction_lower: float
    alpha: float
    method: str

    @property
    def fraction(self) -> float:
        return self.impossible / self.draws

    @property
    def consistent(self) -> bool:
        return self.self_unreachable == 0

    def refutes(self, delta: float) -> bool:
        """Whether the impossible outputs refute (eps, ``delta``)-DP for every eps (consistent tests only)."""
        return self.consistent and self.impossible > 0 and self.fraction_lower > delta

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fraction": self.fraction}


def impossible_fraction_lower(impossible: int, draws: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound at level ``alpha`` on the probability of the impossible outputs."""
    check_positive("draws", draws)
    if impossible <= 0:
        return 0.0
    return float(stats.beta.ppf(alpha, impossible, draws - impossible + 1))


def _bisect(y: torch.Tensor, x: torch.Tensor, at: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
            lo: int, hi: int) -> torch.Tensor:
    """Per element, the smallest k in [lo, hi] with at(x, k) >= y (hi where none): ~log2(hi - lo) evaluations."""
    low = torch.full(y.shape, lo, dtype=torch.int64)
    high = torch.full(y.shape, hi, dtype=torch.int64)
    while bool((low < high).any()):
        mid = (low + high) // 2
        below = at(x, mid) < y
        low = torch.where(below, mid + 1, low)
        high = torch.where(below, high, mid)
    return low


def reachable(release: Any, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per element, whether ``release`` can produce output ``y`` from input ``x`` bit for bit (see module doc).

    ``release`` has ``support(y)`` (a grid: same support for every input) or ``at(x, k)`` with ``randomness`` =
    (lo, hi) (nondecreasing in k). ``y`` and ``x`` broadcast elementwise.
    """
    y = y.double()
    if hasattr(release, "support"):
        return release.support(y)
    if not (hasattr(release, "at") and hasattr(release, "randomness")):
        raise ConfigError(f"reachability: cannot invert the release {getattr(release, 'description', release)!r} "
                          "(it states neither its support nor its sampler as a function of its randomness)")
    x = x.double().expand_as(y).reshape(-1)
    flat = y.reshape(-1)
    lo, hi = (int(v) for v in release.randomness)
    k = _bisect(flat, x, release.at, lo, hi)
    found = torch.zeros_like(flat, dtype=torch.bool)
    for j in range(-WINDOW, WINDOW + 1):
        kj = (k + j).clamp(lo, hi)
        found |= release.at(x, kj) == flat
    return found.reshape(y.shape) & torch.isfinite(y)


def reachability_test(release: Any, x: torch.Tensor, x_neighbour: torch.Tensor, draws: int, gen: torch.Generator, *,
                      alpha: float = 0.05, outputs: torch.Tensor | None = None) -> Reachability:
    """Draw ``draws`` releases of ``x`` (``release.draw``, or the given ``outputs``), check each coordinate of each
    output against ``x_neighbour`` and against ``x`` itself; one output counts as impossible when any of its
    coordinates is. ``x`` and ``x_neighbour``: one input (a vector, or a scalar)."""
    check_positive("draws", draws)
    check_probability("alpha", alpha)
    x, xn = x.double().reshape(1, -1), x_neighbour.double().reshape(1, -1)
    if x.shape != xn.shape:
        raise ConfigError(f"reachability: the two inputs differ in shape ({tuple(x.shape)} vs {tuple(xn.shape)})")
    y = release.draw(x.expand(int(draws), -1), gen) if outputs is None else outputs.double().reshape(int(draws), -1)
    impossible = ~reachable(release, y, xn.expand_as(y))
    own = ~reachable(release, y, x.expand_as(y))
    n_bad = int(impossible.any(dim=1).sum())
    return Reachability(int(draws), n_bad, int(own.any(dim=1).sum()),
                        impossible_fraction_lower(n_bad, int(draws), alpha),
                        float(alpha), "grid" if hasattr(release, "support") else "inversion")


def describe(r: Reachability | dict[str, Any]) -> str:
    """One line: how many outputs were impossible under the neighbour, and what it means."""
    d = r.to_dict() if isinstance(r, Reachability) else r
    if d["self_unreachable"]:
        return (f"{d['self_unreachable']} of {d['draws']} outputs are not in the release's own stated support: it is "
                "not the mechanism its claim describes")
    if not d["impossible"]:
        return f"0 of {d['draws']} outputs impossible under the neighbour ({d['method']})"
    return (f"{d['impossible']} of {d['draws']} outputs ({d['fraction']:.3g}) impossible under the neighbour "
            f"({d['method']}): not (eps, delta)-DP for any delta below {d['fraction_lower']:.3g}")


def recorded_refutes(d: dict[str, Any], delta: float) -> bool:
    """A saved direction's verdict recomputed from its counts (the gate's check of saved evidence): its
    Clopper-Pearson lower bound from ``impossible`` / ``draws`` at ``alpha``, above ``delta``, and a consistent
    test; a grid release's output outside its own support refutes its claim by itself."""
    if d["self_unreachable"]:
        return d["method"] == "grid"
    return d["impossible"] > 0 and impossible_fraction_lower(int(d["impossible"]), int(d["draws"]),
                                                             float(d["alpha"])) > delta


def recorded_error(d: dict[str, Any]) -> str | None:
    """Why a saved direction cannot be judged (an inversion that does not reproduce its own outputs), or None."""
    if d["self_unreachable"] and d["method"] != "grid":
        return (f"reachability: the inversion does not reproduce {d['self_unreachable']} of {d['draws']} outputs from "
                "their own input (the release's description is not its sampler)")
    return None
