"""Samplers that search for the neighbouring pair maximising ||f(D) - f(D')||.

One :class:`~privaudit.audit.sensitivity.evaluator.Target` is a quantity at one configuration: its function
``fn(batch, randomness)`` (taken from the defense's ``privatized_quantities``, the code it trains with), the input
:class:`~privaudit.audit.sensitivity.domains.Domain`, the relation, the norm and the claimed bound there.
:func:`search` spends a time budget on it in phases, each feeding the next its best pairs:

0. **constructed** — the claim's extremal pairs (``seeds``: derived from the quantity's formula in
   :mod:`privaudit.audit.sensitivity.extremal`), evaluated first and always among the restarts;
1. **random** — pairs drawn from the data distribution and from extremes (noise, binary, constant,
   repeated and inverted inputs; negated, tiny and huge vectors), each with a fresh shared seed;
2. **ascent** — from the best pairs found so far (restarts), maximise the distance over the changed
   unit *and* the rest of the batch (unless the claim is about one fixed dataset). Quantities that
   are differentiable in their inputs first get gradient ascent (:func:`gradient_ascent`). Then every
   quantity -- and only this for the non-differentiable ones (Logit-DP's pair sums, fitted heads) --
   gets a zeroth-order elitist search: each restart proposes mutations (Gaussian steps in the same
   coordinates with a 1/5-success-rule step size, resampled or inverted units, new labels, new shared
   seed, another position) and keeps the best;
3. **rubinstein-alda** (black-box training algorithms only) — Rubinstein & Aldà's sampler from
   :mod:`privaudit.defenses.sensitivity_sampling` (databases D ~ P^(n-1) plus x or x', P uniform over the data
   pool): the order statistic G_(k) with its random-DP confidence gamma, reported beside the
   maximum. Its pairs are real neighbours, so its maximum also competes for the witness.

Every evaluated pair goes through one
:class:`~privaudit.audit.sensitivity.evaluator.Evaluator`, which keeps the best pair with both
outputs (the witness) and caches f(D) while only the changed unit moves. Budget honesty: each
phase reports its pairs and the best ratio (distance / bound) reached by its end, and the search
says whether its last phase still improved in the final quarter of its pairs (``still_improving``):
a search still climbing at its budget has not measured the supremum.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from privaudit.audit.sensitivity.domains import Domain, Pair, Rows, cat_rows, n_rows, slice_rows
from privaudit.defenses.dp.engine.contrastive import differentiable_quantities
from privaudit.audit.sensitivity.evaluator import Clock, Evaluator, Found, Target, TopK, detach_rows

SEED_RANGE = 2 ** 31
MIN_PAIRS = 20  # a setting searched with fewer pairs is not covered: its claim cannot "hold"


# -- proposals --------------------------------------------------------------------------------------
def _rand(gen: torch.Generator) -> float:
    return float(torch.rand((), generator=gen))


def _randint(n: int, gen: torch.Generator) -> int:
    return int(torch.randint(n, (1,), generator=gen))


def _unit(rows: Rows, i: int, unit_size: int) -> Rows:
    return slice_rows(rows, i * unit_size, (i + 1) * unit_size)


def _set_unit(rows: Rows, i: int, unit: Rows, unit_size: int) -> Rows:
    total = n_rows(rows)
    return cat_rows(slice_rows(rows, 0, i * unit_size), unit, slice_rows(rows, (i + 1) * unit_size, total))


def draw_base(target: Target, gen: torch.Generator) -> Rows:
    """A batch of ``units`` units: one source for all (w.p. 0.7) or a mixture unit by unit."""
    if target.fixed_base is not None:
        return target.fixed_base
    dom, n = target.domain, target.units
    if n > 1 and _rand(gen) < 0.3:
        return cat_rows(*[dom.draw(1, gen) for _ in range(n)])
    return dom.draw(n, gen)


def propose(target: Target, gen: torch.Generator) -> Pair:
    """A random neighbouring pair: a random base, a random position and a new unit that is fresh,
    the inverse of the replaced (or a random) unit, or a copy of another unit."""
    dom, n, u = target.domain, target.units, target.domain.unit_size
    base = draw_base(target, gen)
    position = _randint(n, gen) if target.relation == "replace-one" else n
    old = _unit(base, position if target.relation == "replace-one" else _randint(n, gen), u) if n else None
    r = _rand(gen)
    if old is not None and r < 0.25:
        new = dom.opposite(old, gen)
    elif old is not None and n > 1 and r < 0.35:
        new = {k: v.clone() for k, v in _unit(base, _randint(n, gen), u).items()}
    else:
        new = dom.draw(1, gen)
    if target.relation == "replace-one":
        new = dom.conform(new, old)
    return Pair(base, new, position, _randint(SEED_RANGE, gen))


def random_search(target: Target, ev: Evaluator, gen: torch.Generator, clock: Clock, deadline: float, top: TopK,
                  min_evaluations: int = 1) -> int:
    """Random pairs until the deadline (at least ``min_evaluations``); returns how many were tried."""
    count = 0
    while count < min_evaluations or clock.now() < deadline:
        pair = propose(target, gen)
        top.add(ev.evaluate(pair), pair)
        count += 1
    return count


# -- zeroth-order ascent -----------------------------------------------------------------------------
MUTATIONS = ("new", "base", "resample", "opposite", "labels", "randomness", "position")
_WEIGHTS = (0.45, 0.15, 0.1, 0.08, 0.08, 0.08, 0.06)


def mutate(target: Target, pair: Pair, sigma: float, gen: torch.Generator) -> Pair:
    """One random change of a pair (see module doc); the shared seed changes only by choice."""
    dom, n, u = target.domain, target.units, target.domain.unit_size
    replace_one = target.relation == "replace-one"
    r, acc, op = _rand(gen), 0.0, MUTATIONS[0]
    for name, w in zip(MUTATIONS, _WEIGHTS):
        acc += w
        if r < acc:
            op = name
            break
    base, new, position, seed = pair.base, pair.new, pair.position, pair.randomness
    old = _unit(base, position, u) if replace_one else None
    if op == "base" and target.fixed_base is None and n > 0:
        if _rand(gen) < 0.3:
            base = dom.perturb(base, sigma, gen)
        else:
            i = _randint(n, gen)
            base = _set_unit(base, i, dom.perturb(_unit(base, i, u), sigma, gen), u)
    elif op == "resample":
        new = dom.draw(1, gen)
    elif op == "opposite" and n > 0:
        new = dom.opposite(old if replace_one else _unit(base, _randint(n, gen), u), gen)
    elif op == "labels":
        new = dom.mutate_discrete(new, gen)
    elif op == "randomness":
        seed = _randint(SEED_RANGE, gen)
    elif op == "position" and replace_one and n > 1:
        position = _randint(n, gen)
    else:
        new = dom.perturb(new, sigma, gen)
    if replace_one:
        new = dom.conform(new, _unit(base, position, u))
    return Pair(base, new, position, seed, pair.params)


def zeroth_order_ascent(target: Target, ev: Evaluator, starts: list[Pair], gen: torch.Generator, clock: Clock,
                        deadline: float, population: int = 4) -> int:
    """Elitist (1 + population) search from each start, round robin, until the deadline; returns iterations."""
    if not starts:
        return 0
    states = [[p, ev.evaluate(p), 0.5] for p in starts]
    iterations = 0
    while iterations == 0 or clock.now() < deadline:
        state = states[iterations % len(states)]
        pair, best, sigma = state
        improved = False
        for _ in range(population):
            cand = mutate(target, pair, sigma, gen)
            d = ev.evaluate(cand)
            if d > best:
                pair, best, improved = cand, d, True
            if iterations and clock.now() >= deadline:
                break
        sigma = min(sigma * 1.5, 4.0) if improved else max(sigma * 0.8, 1e-3)
        state[:] = [pair, best, sigma]
        iterations += 1
    return iterations


# -- gradient ascent ---------------------------------------------------------------------------------
def _smooth_distance(diff: torch.Tensor, norm: str) -> torch.Tensor:
    diff = diff.reshape(-1).double()
    if norm == "l1":
        return diff.abs().sum()
    return torch.sqrt(diff.pow(2).sum() + 1e-300)


def _decode(dom: Domain, rows: Rows, free: dict[str, torch.Tensor]) -> Rows:
    out = dict(rows)
    for f, v in free.items():
        out[f] = dom.from_free(f, v)
    return out


def ignores_randomness(target: Target, pair: Pair, ev: Evaluator) -> bool:
    """Whether ``fn`` gives bit-identical outputs on ``pair``'s D' under two different seeds."""
    _, b = pair.neighbours(target.relation, target.domain.unit_size)
    return bool(torch.equal(ev.output(b, pair.randomness, pair.params), ev.output(b, pair.randomness + 1, pair.params)))


def differentiable(target: Target, pair: Pair) -> bool:
    """Whether ``fn``'s output carries a gradient with respect to the changed unit's continuous fields."""
    dom = target.domain
    try:
        free = {f: dom.to_free(f, pair.new[f]).clone().requires_grad_(True) for f in dom.continuous}
        new = _decode(dom, pair.new, free)
        _, b = Pair(pair.base, new, pair.position, pair.randomness).neighbours(target.relation, dom.unit_size)
        with differentiable_quantities():
            out = target.call(dom.batch(b), int(pair.randomness), pair.params)
            if not out.requires_grad:
                return False
            (g,) = torch.autograd.grad(out.double().pow(2).sum(), list(free.values())[:1], allow_unused=True)
        return g is not None and bool(torch.isfinite(g).all()) and bool(g.abs().sum() > 0)
    except Exception:  # noqa: BLE001 - any failure means: use the zeroth-order search
        return False


def _stack_batches(batches: list[Any]) -> Any:
    if isinstance(batches[0], tuple):
        return tuple(torch.stack(parts) for parts in zip(*batches))
    return torch.stack(batches)


def _distances(target: Target, pairs: list[tuple[Rows, Rows, int, Any]], vectorised: list[bool]
               ) -> list[torch.Tensor]:
    """Differentiable distances of several (D, D', seed, parameters) at once.

    Pairs sharing a seed and their parameters go through one ``torch.func.vmap`` of ``fn`` over the
    stacked batches (``vectorised[0]`` is cleared, for good, the first time ``fn`` cannot be
    vmapped); otherwise one call per neighbour.
    """
    dom = target.domain
    out: list[torch.Tensor | None] = [None] * len(pairs)
    by_key: dict[tuple[int, int], list[int]] = {}
    for i, (_, _, seed, params) in enumerate(pairs):
        by_key.setdefault((int(seed), id(params)), []).append(i)
    for (seed, _), idx in by_key.items():
        params = pairs[idx[0]][3]
        if vectorised[0] and len(idx) > 1:
            try:
                fn = torch.func.vmap(lambda batch: target.call(batch, seed, params).reshape(-1))
                fa = fn(_stack_batches([dom.batch(pairs[i][0]) for i in idx]))
                fb = fn(_stack_batches([dom.batch(pairs[i][1]) for i in idx]))
                for k, i in enumerate(idx):
                    out[i] = _smooth_distance(fa[k] - fb[k], target.norm)
                continue
            except Exception:  # noqa: BLE001 - not vmappable (data-dependent shapes, generators, ...)
                vectorised[0] = False
        for i in idx:
            a, b, _, _ = pairs[i]
            out[i] = _smooth_distance(target.call(dom.batch(a), seed, params) - target.call(dom.batch(b), seed, params),
                                      target.norm)
    return out  # type: ignore[return-value]


def _parameter_free(target: Target, pair: Pair) -> dict[str, torch.Tensor] | None:
    """Leaf copies of the pair's model parameters (or the target model's) for the ascent."""
    start = pair.params if pair.params is not None else target.parameters()
    if start is None:
        return None
    return {n: v.detach().clone().requires_grad_(True) for n, v in start.items()}


def _ascent_states(target: Target, starts: list[Pair], lr: float, parameters: bool, parameter_lr: float
                   ) -> tuple[list[dict[str, Any]], list[tuple[Pair, dict[str, torch.Tensor], Any, Any]]]:
    """Adam's parameter groups and, per start, (pair, free coordinates of the new unit, of the base or None,
    free model parameters or None). Restarts that start from the same parameters share one ascending copy
    (and one vmap)."""
    dom = target.domain
    groups, states = [], []
    thetas: dict[int, dict[str, torch.Tensor]] = {}
    for p in starts:
        new_free = {f: dom.to_free(f, p.new[f]).detach().clone().requires_grad_(True) for f in dom.continuous}
        base_free = None
        if target.fixed_base is None and target.units > 0:
            base_free = {f: dom.to_free(f, p.base[f]).detach().clone().requires_grad_(True) for f in dom.continuous}
        tensors = list(new_free.values()) + (list(base_free.values()) if base_free else [])
        scale = max(dom.free_scale(t.detach()) for t in tensors)
        groups.append({"params": tensors, "lr": lr * scale})
        theta = None
        if parameters:
            theta = thetas.get(id(p.params))
            if theta is None:
                theta = _parameter_free(target, p)
                if theta is not None:
                    thetas[id(p.params)] = theta
                    for t in theta.values():
                        rms = float(t.detach().pow(2).mean().sqrt()) if t.numel() else 0.0
                        groups.append({"params": [t], "lr": parameter_lr * max(rms, 1e-3)})
        states.append((p, new_free, base_free, theta))
    return groups, states


def _ascent_pairs(target: Target, states: list[tuple[Pair, dict[str, torch.Tensor], Any, Any]]
                  ) -> tuple[list[tuple[Rows, Rows, int, Any]], list[Pair]]:
    """The decoded (D, D', seed, parameters) of every ascent state, and each as a detached pair (with a
    snapshot of its parameters) for exact re-evaluation."""
    dom = target.domain
    kept_by: dict[int, dict[str, torch.Tensor]] = {}
    pairs, candidates = [], []
    for p, new_free, base_free, theta in states:
        base = _decode(dom, p.base, base_free) if base_free else p.base
        new = _decode(dom, p.new, new_free)
        a, b = Pair(base, new, p.position, p.randomness).neighbours(target.relation, dom.unit_size)
        params = theta if theta is not None else p.params
        pairs.append((a, b, p.randomness, params))
        if params is not None and id(params) not in kept_by:
            kept_by[id(params)] = {n: v.detach().clone() for n, v in params.items()}
        kept = None if params is None else kept_by[id(params)]
        candidates.append(Pair(detach_rows(base), detach_rows(new), p.position, p.randomness, kept))
    return pairs, candidates


def gradient_ascent(target: Target, ev: Evaluator, starts: list[Pair], clock: Clock, deadline: float,
                    lr: float = 0.05, info: dict[str, Any] | None = None, parameters: bool = True,
                    parameter_lr: float = 0.02) -> int:
    """Adam on every start's free coordinates until the deadline: the changed unit, the base (unless
    fixed) and, with ``parameters`` and a target ``module``, the model parameters (each tensor's step
    ``parameter_lr`` times its RMS): the claim must hold at every parameter value, so the ascent
    climbs ||f(D) - f(D')|| in (D, D', theta) jointly.

    Adam runs in unconstrained coordinates (images through a logit). The DP defenses' quantities are
    differentiable inside :func:`privaudit.defenses.dp.engine.contrastive.differentiable_quantities`: the
    embeddings keep their graph, the loss cotangents are built with ``create_graph`` and the per-unit
    ``vmap(grad(.))`` engine, the unit norms and the clipping factors min(1, C/||g||) (piecewise smooth;
    at a clipped unit the gradient is the one of C g/||g||, at an unclipped one of g) are differentiated
    by a double backward.

    All restarts step together: restarts that share a seed and parameters are evaluated in one
    vmapped call of ``fn`` when it allows (one loop otherwise), and their summed distances are
    differentiated in one backward pass. A step whose distance beats the best seen is re-evaluated
    exactly (no grad) and kept with its parameters.
    """
    if not starts:
        return 0
    groups, states = _ascent_states(target, starts, lr, parameters, parameter_lr)
    opt = torch.optim.Adam(groups)
    vectorised = [True]
    steps = 0
    while steps == 0 or clock.now() < deadline:
        opt.zero_grad(set_to_none=True)
        with differentiable_quantities():
            pairs, candidates = _ascent_pairs(target, states)
            dists = _distances(target, pairs, vectorised)
            total = torch.stack(dists).sum()
        if not total.requires_grad or not torch.isfinite(total):
            break
        (-total).backward()
        opt.step()
        steps += 1
        ev.gradient_pairs += len(states)
        best = ev.best.distance if ev.best is not None else -math.inf
        for d, pair in zip(dists, candidates):
            if float(d.detach()) > best:
                best = max(best, ev.evaluate(pair))
    if info is not None:
        info["vmapped"] = vectorised[0] and len({(p.randomness, id(st[3] if st[3] is not None else p.params))
                                                 for p, st in zip(starts, states)}) < len(starts)
        info["parameters"] = bool(parameters and any(st[3] is not None for st in states))
    return steps


# -- Rubinstein–Aldà ---------------------------------------------------------------------------------
def rubinstein_alda(target: Target, ev: Evaluator, pool: Rows, gen: torch.Generator, clock: Clock, deadline: float,
                    max_m: int = 500) -> dict[str, Any] | None:
    """R–A's sampler (Algorithm 1, P uniform over ``pool``) with as many pairs as the time left allows.

    Uses :func:`privaudit.defenses.sensitivity_sampling.oracle_pairs` for the draw and
    :func:`~privaudit.defenses.sensitivity_sampling.rubinstein_alda_parameters` / ``order_statistic`` for G_(k)
    and gamma. Each pair is D u {x} vs D u {x'} with x, x' last (replace-one at the last position).
    """
    from privaudit.defenses.sensitivity_sampling import oracle_pairs, order_statistic, rubinstein_alda_parameters

    u = target.domain.unit_size
    pool_units = n_rows(pool) // u
    n = target.units
    m = min(max_m, clock.pairs_left(deadline))
    if m < 1 or pool_units < 1 or n < 1:
        return None
    params = rubinstein_alda_parameters(m=m)
    w1, w2 = oracle_pairs(pool_units, n, m, gen)
    dists = []
    for i in range(m):
        diff = w1[i] - w2[i]
        shared = w1[i] - diff.clamp_min(0)
        idx = torch.repeat_interleave(torch.arange(pool_units), shared.round().long())
        x = int(torch.nonzero(diff > 0).flatten()[0]) if (diff > 0).any() else int(idx[-1])
        x2 = int(torch.nonzero(diff < 0).flatten()[0]) if (diff < 0).any() else x
        rest = cat_rows(*[_unit(pool, int(j), u) for j in idx.tolist()]) if len(idx) else None
        base = cat_rows(rest, _unit(pool, x, u)) if rest is not None else _unit(pool, x, u)
        pair = Pair(base, _unit(pool, x2, u), n - 1, _randint(SEED_RANGE, gen))
        dists.append(ev.evaluate(pair))
    values = torch.tensor(dists, dtype=torch.float64)
    return {"m": params.m, "k": params.k, "gamma": params.gamma, "rho": params.rho,
            "gamma_exact": (params.m - params.k + 1) / (params.m + 1), "order_statistic": order_statistic(values, params.k),
            "median": float(values.median()), "maximum": float(values.max()), "database_size": n,
            "oracle": f"uniform over {pool_units} pool units"}


# -- the phases together -----------------------------------------------------------------------------
@dataclass
class SearchResult:
    """What a search found on one target and how it spent its time."""

    best: Found | None
    evaluations: int
    seconds: float
    phases: dict[str, Any]
    covered: bool

    @property
    def observed(self) -> float | None:
        return None if self.best is None else self.best.distance


def _phase(ev: Evaluator, bound: float, start_spent: int, start_best: float | None, **extra: Any) -> dict[str, Any]:
    """A phase's account: pairs it spent, the best ratio at its end, and whether it improved the best."""
    best = ev.best.distance if ev.best is not None else None
    out: dict[str, Any] = {**extra, "pairs": ev.spent - start_spent,
                           "best_ratio": None if best is None or not bound else best / bound,
                           "improved": best is not None and (start_best is None or best > start_best * (1 + 1e-3))}
    return out


def _best_distance(ev: Evaluator) -> float | None:
    return ev.best.distance if ev.best else None


def _constructed_phase(target: Target, ev: Evaluator, gen: torch.Generator,
                       phases: dict[str, Any]) -> list[tuple[float, Pair]]:
    """Evaluate the target's constructed pairs (if any); returns them with their distances, best first."""
    constructed: list[tuple[float, Pair]] = []
    if target.seeds is not None:
        s0 = ev.spent
        for pair in target.seeds(target, gen):
            constructed.append((ev.evaluate(pair), pair))
        constructed.sort(key=lambda t: -t[0])
        phases["constructed"] = _phase(ev, target.bound, s0, None, evaluated=len(constructed))
    return constructed


def _restart_pairs(constructed: list[tuple[float, Pair]], top: TopK, restarts: int) -> list[Pair]:
    """The ascent's restarts: up to half from the constructed pairs (best first), the rest from the random phase."""
    keep = [p for _, p in constructed[:max(1, restarts // 2)]]
    return keep + [p for p in top.pairs() if all(p is not k for k in keep)][:restarts - len(keep)]


def _gradient_phase(target: Target, ev: Evaluator, starts: list[Pair], clock: Clock, deadline: float,
                    restarts: int, phases: dict[str, Any]) -> list[Pair]:
    """Gradient ascent from ``starts`` until ``deadline``; returns the restarts of the mutation phase that
    follows (the best pair first: mutations also move the discrete parts -- labels, shared seed,
    position -- that gradients cannot)."""
    s0, b0 = ev.spent, _best_distance(ev)
    if ignores_randomness(target, starts[0], ev):
        # one shared seed lets the restarts go through one vmapped call
        starts = [Pair(p.base, p.new, p.position, starts[0].randomness, p.params) for p in starts]
    info: dict[str, Any] = {}
    steps_g = gradient_ascent(target, ev, starts, clock, deadline, info=info)
    phases["gradient"] = _phase(ev, target.bound, s0, b0, restarts=len(starts), gradient_steps=steps_g, **info)
    return [ev.best.pair] + [p for p in starts if p is not ev.best.pair][:restarts - 1]


def _rubinstein_phase(target: Target, ev: Evaluator, pool: Rows, gen: torch.Generator, clock: Clock,
                      deadline: float, phases: dict[str, Any]) -> None:
    s2, b2 = ev.spent, _best_distance(ev)
    ra = rubinstein_alda(target, ev, pool, gen, clock, deadline)
    phases["rubinstein-alda"] = {**(ra if ra is not None else {"skipped": "no budget left for one pair"}),
                                 **_phase(ev, target.bound, s2, b2)}


def search(target: Target, gen: torch.Generator, *, seconds: float | None = None, evaluations: int | None = None,
           rubinstein_pool: Rows | None = None, random_share: float = 0.4, restarts: int = 4) -> SearchResult:
    """Constructed pairs, random search, then ascent from the best pairs, then (with ``rubinstein_pool``) R–A.

    The budget is ``seconds`` of wall clock or, for reproducible runs, ``evaluations`` pairs (a
    gradient step counts one pair per restart). The constructed pairs are evaluated first (they
    count against the random phase's share), the random phase takes ``random_share`` of the budget,
    R–A (when run) 30%, the ascent the rest (half by gradient where the quantity is differentiable,
    then mutations). The constructed pairs always keep places among the restarts. ``covered`` is True
    when the random phase and the ascent both ran and at least :data:`MIN_PAIRS` pairs were evaluated.
    ``phases`` gives, per phase, its pairs, the best ratio at its end and whether it improved;
    ``still_improving`` is True when the best improved within the last quarter of the final phase's pairs.
    """
    start = time.perf_counter()
    ev = Evaluator(target)
    clock = Clock(ev, seconds=seconds, evaluations=evaluations)
    total, top, phases = clock.total, TopK(restarts), {}
    random_end = total * random_share
    ascent_end = total * (1.0 - (0.3 if rubinstein_pool is not None else 0.0))
    constructed = _constructed_phase(target, ev, gen, phases)
    s0, b0 = ev.spent, _best_distance(ev)
    n_random = random_search(target, ev, gen, clock, random_end, top, min_evaluations=2)
    phases["random"] = _phase(ev, target.bound, s0, b0, best=top.items[0][0] if top.items else None)
    starts = _restart_pairs(constructed, top, restarts)
    grad = differentiable(target, starts[0]) if starts else False
    ascent_start = ev.spent
    if grad:
        starts = _gradient_phase(target, ev, starts, clock, random_end + (ascent_end - random_end) / 2, restarts,
                                 phases)
    last_start, last_best = ev.spent, _best_distance(ev)
    steps = zeroth_order_ascent(target, ev, starts, gen, clock, ascent_end)
    phases["mutation"] = _phase(ev, target.bound, last_start, last_best, restarts=len(starts), iterations=steps)
    # the summary the reports read ("ascent": both ascent phases together)
    phases["ascent"] = {"restarts": len(starts), "mutation_iterations": steps, "pairs": ev.spent - ascent_start}
    if grad:
        phases["ascent"].update({k: phases["gradient"][k] for k in ("gradient_steps", "vmapped")
                                 if k in phases["gradient"]})
    last_phase = "mutation"
    if rubinstein_pool is not None:
        last_phase, last_start = "rubinstein-alda", ev.spent
        _rubinstein_phase(target, ev, rubinstein_pool, gen, clock, total, phases)
    used = ev.spent - last_start
    phases.update({"still_improving": bool(used > 0 and ev.last_improvement > last_start + 0.75 * used),
                   "last_phase": last_phase, "restarts": len(starts), "pairs_total": ev.spent})
    covered = n_random >= 1 and steps >= 1 and ev.spent >= MIN_PAIRS
    return SearchResult(ev.best, ev.evaluations, time.perf_counter() - start, phases, covered)
