"""DP-FTRL tree aggregation: zCDP (and the (epsilon, delta) it implies), for the DP-FTRL variant of DP-FedEmb.

Tree aggregation (Kairouz et al. 2021, "Practical and private (deep) learning without sampling or
shuffling", Alg. 1 and App. D) adds independent Gaussian noise of std ``z`` x (per-leaf sensitivity) to
every node of a binary tree over the steps. A unit whose contributions enter leaves P changes every node
v by at most |P ∩ leaves(v)| leaf sensitivities, so the whole release is one Gaussian mechanism with
squared sensitivity S^2 = max_P sum_v |P ∩ leaves(v)|^2, hence rho-zCDP with rho = S^2 / (2 z^2)
(Bun & Steinke 2016, Prop. 1.6) and (alpha, alpha rho)-RDP for all alpha.

- Restarted tree, one participation per tree (dp-accounting's ``SingleEpochTreeAggregationDpEvent``):
  S^2 = depth = ceil(log2(steps + 1)) (App. D.1).
- One tree, no restart (:class:`~privaudit.accountants.events.TreeAggregationDpEvent`): at most k participations at
  least ``min_separation`` leaves apart; S^2 is found by the dynamic programme of App. D.2, which splits
  each subtree into its largest power-of-two left part and the rest, and counts a complete subtree's root
  with (participations)^2. :func:`tree_sensitivity_squared` is our implementation of that programme; when
  the separation is so large that few participation patterns exist (where the programme, cubic in the
  separation, is slow) it enumerates the patterns instead. Tests check the two against each other.

The noise multiplier is relative to the per-leaf sensitivity under the claim's relation (DP-FTRL's own
relation is add/remove of a special element; a leaf that sums virtual clients of several users has
twice the clip norm as sensitivity, see :mod:`privaudit.accountants.paper_claims`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from privaudit.accountants.base import Accountant, NotApplicable
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.rdp.conversions import check_conversion, zcdp_to_dp
from privaudit.accountants.events import (ComposedDpEvent, DpEvent, GaussianDpEvent, NoOpDpEvent, SelfComposedDpEvent,
                                SingleEpochTreeAggregationDpEvent, TreeAggregationDpEvent, describe)
from privaudit.core.errors import ConfigError


def restart_tree_depth(steps: int) -> int:
    """Nodes of one restarted tree that a single participation touches: ceil(log2(steps + 1))."""
    return math.ceil(math.log2(steps + 1)) if steps > 0 else 0


def tree_sensitivity_squared(total_steps: int, max_participation: int, min_separation: int) -> float:
    """Worst-case sum over tree nodes of (participations under the node)^2 (Kairouz et al. 2021, App. D.2).

    ``f(n, start, end, size)``: best value for n participations in a block of ``size`` leaves whose first
    participation is at least ``start`` leaves in and which leaves ``end`` leaves of separation free to its
    right neighbour. A block of power-of-two size is a tree node and adds n^2; otherwise it is a forest of
    its largest power-of-two left part and the rest.
    """
    for name, value in (("total_steps", total_steps), ("max_participation", max_participation),
                        ("min_separation", min_separation)):
        if int(value) != value or value < 0:
            raise ConfigError(f"{name}: must be a non-negative integer, got {value!r}")
    return _sensitivity_squared(int(total_steps), int(max_participation), int(min_separation))


def tree_nodes(steps: int) -> list[tuple[int, int]]:
    """(first leaf, size) of every node of the online tree over ``steps`` leaves: a block whose size is a
    power of two is a complete subtree (a node, with two halves below it); any other block is a forest
    of its largest power-of-two left part and the rest."""
    nodes: list[tuple[int, int]] = []
    stack = [(0, steps)]
    while stack:
        start, size = stack.pop()
        if size <= 0:
            continue
        power = 1 << (size.bit_length() - 1)
        if power == size:
            nodes.append((start, size))
            if size > 1:
                stack.extend([(start, size // 2), (start + size // 2, size // 2)])
        else:
            stack.extend([(start, power), (start + power, size - power)])
    return nodes


def _patterns(steps: int, n: int, sep: int) -> int:
    free = steps - sep * (n - 1)
    return math.comb(free, n) if free >= n else 0


def _enumerated_sensitivity_squared(steps: int, k: int, sep: int, chunk: int = 4096) -> float:
    """max over participation patterns (<= k leaves, gaps >= sep + 1) of sum_nodes count^2, by enumeration."""
    import itertools

    nodes = np.array(tree_nodes(steps))
    lo, hi = nodes[:, 0], nodes[:, 0] + nodes[:, 1]
    best = 0.0
    for n in range(1, k + 1):
        free = steps - sep * (n - 1)
        if free < n:
            break
        combos = itertools.combinations(range(free), n)
        shift = np.arange(n) * sep
        while True:
            block = np.array(list(itertools.islice(combos, chunk)), dtype=np.int64)
            if block.size == 0:
                break
            positions = block + shift  # (M, n) leaves, consecutive gaps >= sep + 1
            inside = (positions[:, :, None] >= lo) & (positions[:, :, None] < hi)  # (M, n, nodes)
            counts = inside.sum(axis=1)
            best = max(best, float((counts ** 2).sum(axis=1).max()))
    return best


@functools.lru_cache(maxsize=256)
def _sensitivity_squared(steps: int, k: int, sep: int) -> float:
    if steps == 0 or k == 0:
        return 0.0
    if sum(_patterns(steps, n, sep) for n in range(1, k + 1)) <= 300_000:
        return _enumerated_sensitivity_squared(steps, k, sep)
    return _programmed_sensitivity_squared(steps, k, sep)


def _programmed_sensitivity_squared(steps: int, k: int, sep: int) -> float:
    def feasible(n: int, start: int, end: int, size: int) -> bool:
        return start + (sep + 1) * n <= size + end

    @functools.lru_cache(maxsize=None)
    def best(n: int, start: int, end: int, size: int) -> float:
        if not feasible(n, start, end, size):
            return -math.inf
        if n == 0:
            return 0.0
        if size == 1:
            return 1.0
        power = 1 << (size.bit_length() - 1)
        root = float(n * n) if power == size else 0.0
        left = power // 2 if power == size else power
        value = -math.inf
        for right_n in range(n + 1):
            for right_start in range(sep + 1):
                left_value = best(n - right_n, start, right_start, left)
                if left_value == -math.inf:
                    continue
                right_value = best(right_n, right_start, end, size - left)
                value = max(value, left_value + right_value)
        return root + value

    n_max = k
    while n_max > 0 and not feasible(n_max, 0, sep, steps):
        n_max -= 1
    return max(best(n, 0, sep, steps) for n in range(1, n_max + 1))


def zcdp_rho(event: DpEvent) -> float:
    """rho (zCDP) of a composition of tree aggregations and unsampled Gaussians; NotApplicable otherwise."""
    if isinstance(event, NoOpDpEvent):
        return 0.0
    if isinstance(event, SelfComposedDpEvent):
        return event.count * zcdp_rho(event.event)
    if isinstance(event, ComposedDpEvent):
        return sum(zcdp_rho(e) for e in event.events)
    if isinstance(event, (GaussianDpEvent, TreeAggregationDpEvent, SingleEpochTreeAggregationDpEvent)):
        z = float(event.noise_multiplier)
        if z <= 0:
            return math.inf
        if isinstance(event, GaussianDpEvent):
            s2 = 1.0
        elif isinstance(event, TreeAggregationDpEvent):
            s2 = tree_sensitivity_squared(event.total_steps, event.max_participation, event.min_separation)
        else:
            counts = event.step_counts if isinstance(event.step_counts, (list, tuple)) else [event.step_counts]
            s2 = float(restart_tree_depth(max(counts)))
        return s2 / (2 * z * z)
    raise NotApplicable(f"tree: only tree aggregation and unsampled Gaussian noise have a zCDP guarantee "
                        f"here, not {describe(event)}")


def tree_rdp(event: DpEvent, orders) -> np.ndarray:
    """RDP curve alpha * rho of a tree-aggregation event."""
    return np.asarray(orders, dtype=float) * zcdp_rho(event)


class TreeAccountant(Accountant):
    """zCDP of DP-FTRL tree aggregation, converted to (epsilon, delta) through the RDP curve alpha * rho."""

    name = "tree"

    def __init__(self, conversion: str = "balle2020"):
        self.conversion = check_conversion(conversion)

    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        if not any(isinstance(e, (TreeAggregationDpEvent, SingleEpochTreeAggregationDpEvent))
                   for e in self.walk(claim.event)):
            raise NotApplicable("tree: the mechanism has no tree aggregation (DP-FTRL) event")
        rho = zcdp_rho(claim.event)
        eps, order = zcdp_to_dp(rho, claim.delta, self.conversion)
        return eps, {"rho": rho, "order": order, "conversion": self.conversion}
