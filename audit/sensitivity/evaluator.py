"""What a sensitivity search works on: the :class:`Target` (a quantity at one configuration and the bound its claim
states there), the :class:`Evaluator` every pair goes through (it keeps the best pair, the witness, and caches
f(D)), the best pairs so far (:class:`TopK`) and the budget's :class:`Clock`. The samplers and their phases are
in :mod:`privaudit.audit.sensitivity.search`.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from privaudit.audit.sensitivity.domains import Domain, Pair, Rows
from privaudit.audit.sensitivity.verdict import distance
from privaudit.defenses.dp.engine.params import parameter_values


QuantityFn = Callable[[Any, int], torch.Tensor]


@dataclass
class Target:
    """A quantity at one configuration, with the bound the claim states there.

    ``units``: size of D in privacy units (D' has one more under add-remove). ``fixed_base``: the
    claim is about neighbours of this one dataset (ALM's fine-tuning set), so the search never
    changes it. ``setting``: JSON-able description (defense overrides, units, model state) to rebuild
    the target for a replay. ``extra``: anything worth reporting (the defense's own bound, corrected
    bounds). ``model_state``: the parameters of the model ``fn`` evaluates (saved with a witness).
    ``module``: that model itself (the DP defenses'); with it a pair may carry its own parameter
    values (``Pair.params``, evaluated through :func:`privaudit.defenses.dp.engine.params.parameter_values`) and the
    gradient ascent moves the parameters too.
    """

    fn: QuantityFn
    domain: Domain
    relation: str
    norm: str
    units: int
    bound: float
    params: dict[str, Any]
    setting: dict[str, Any]
    fixed_base: Rows | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    model_state: dict[str, torch.Tensor] | None = None
    seeds: Callable[["Target", torch.Generator], list[Pair]] | None = None
    module: Any = None

    def call(self, batch: Any, randomness: int, params: Any = None) -> torch.Tensor:
        """``fn(batch, randomness)``, at the parameter values ``params`` when given (needs ``module``)."""
        if params is None or self.module is None:
            return self.fn(batch, int(randomness))
        with parameter_values(self.module, params):
            return self.fn(batch, int(randomness))

    def parameters(self) -> dict[str, torch.Tensor] | None:
        """The trainable parameters of ``module`` by name (None without a module)."""
        if self.module is None:
            return None
        return {n: p.detach() for n, p in self.module.named_parameters() if p.requires_grad}


@dataclass
class Found:
    """A pair with both outputs and their distance."""

    pair: Pair
    distance: float
    fa: torch.Tensor
    fb: torch.Tensor


def detach_rows(rows: Rows) -> Rows:
    return {k: v.detach().clone() for k, v in rows.items()}


class Evaluator:
    """Evaluates pairs on a target, counts them, keeps the best, caches f(D) by base identity."""

    def __init__(self, target: Target, cache_size: int = 8):
        self.target = target
        self.evaluations = 0
        self.gradient_pairs = 0  # pairs evaluated (with gradients) by the gradient ascent
        self.calls = 0
        self.best: Found | None = None
        self._cache: OrderedDict[tuple[int, int, int], tuple[Rows, torch.Tensor]] = OrderedDict()
        self._cache_size = cache_size
        self.call_seconds = 0.0
        self.last_improvement = 0  # pairs spent (evaluated + gradient) when the best last improved

    @property
    def spent(self) -> int:
        return self.evaluations + self.gradient_pairs

    def output(self, rows: Rows, randomness: int, params: Any = None) -> torch.Tensor:
        start = time.perf_counter()
        with torch.no_grad():
            out = self.target.call(self.target.domain.batch(rows), int(randomness), params)
        self.calls += 1
        self.call_seconds += time.perf_counter() - start
        return out.detach().reshape(-1).cpu()

    @property
    def seconds_per_call(self) -> float:
        return self.call_seconds / max(self.calls, 1)

    def _base_output(self, pair: Pair) -> torch.Tensor:
        key = (id(pair.base), int(pair.randomness), id(pair.params))
        hit = self._cache.get(key)
        if hit is not None and hit[0] is pair.base:
            self._cache.move_to_end(key)
            return hit[1]
        out = self.output(pair.base, pair.randomness, pair.params)
        self._cache[key] = (pair.base, out)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return out

    def evaluate(self, pair: Pair) -> float:
        t = self.target
        _, b_rows = pair.neighbours(t.relation, t.domain.unit_size)
        fa = self._base_output(pair)
        fb = self.output(b_rows, pair.randomness, pair.params)
        d = distance(fa, fb, t.norm)
        if not math.isfinite(d):
            d = math.inf
        self.evaluations += 1
        if self.best is None or d > self.best.distance:
            if self.best is not None and d > self.best.distance * (1 + 1e-3):
                self.last_improvement = self.spent
            self.best = Found(pair, d, fa, fb)
        return d


class TopK:
    """The k best (distance, pair) seen, best first."""

    def __init__(self, k: int):
        self.k = k
        self.items: list[tuple[float, Pair]] = []

    def add(self, d: float, pair: Pair) -> None:
        self.items.append((d, pair))
        self.items.sort(key=lambda t: -t[0])
        del self.items[self.k:]

    def pairs(self) -> list[Pair]:
        return [p for _, p in self.items]


class Clock:
    """Progress through a budget in seconds (wall clock) or in evaluated pairs (deterministic)."""

    def __init__(self, ev: Evaluator, seconds: float | None = None, evaluations: int | None = None):
        if (seconds is None) == (evaluations is None):
            raise ValueError("Clock: give seconds or evaluations")
        self.ev = ev
        self.by_count = evaluations is not None
        self.total = float(evaluations if self.by_count else seconds)
        self._start = time.perf_counter()

    def now(self) -> float:
        if self.by_count:
            return float(self.ev.evaluations + self.ev.gradient_pairs)
        return time.perf_counter() - self._start

    def pairs_left(self, deadline: float) -> int:
        """How many more pairs fit before ``deadline`` (from the measured cost of a call)."""
        left = max(deadline - self.now(), 0.0)
        if self.by_count:
            return int(left)
        return int(left / (2 * max(self.ev.seconds_per_call, 1e-4)))
