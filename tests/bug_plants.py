"""A catalogue of planted DP bugs: one-line bugs of the kinds found in real DP libraries, planted into the DP-SGD
engine (:mod:`privaudit.defenses.dp.base`) for the length of a ``with`` block. Test fixtures, outside the product
path: each wraps a function the training calls (the sampler, the clipping factors, the noise, the release, the
claim) and changes nothing on disk. ``privaudit gate-power SUITE --bugs tests/bug_plants.py --allow-plugins``
plants each into each gated DP defense; tests/test_as_run_plants.py plants them into DP-GCL.

Five classes, each with at least two variants or realisations (:data:`BUGS`):

* ``sampling``: shuffled fixed-size batches under the claim's Poisson (or independent without-replacement)
  sampling (Chua et al. 2024); batches drawn at 1.5x the claimed rate (or size); federated rounds whose users come
  from a generator re-created with one seed (the same users every round).
* ``clipping``: units clipped at twice the clip the noise is calibrated to (as in the fast-clipping bug Opacus
  fixed in its PR #664); clipping skipped (every unit at its raw norm); in federated rounds, the client deltas.
* ``noise``: a noise generator re-created with one seed at every step (reused noise); no noise on the biases;
  a 1.1x noise shortfall that no record shows (the release adds 1/1.1 of the noise drawn); noise correlated across
  coordinates (DP-SGD-style engines): every tensor's noise from a generator re-created with the step's one seed,
  or one draw per tensor broadcast over it.
* ``accounting``: a normaliser that follows the realised batch size; the accountant composes half the steps run;
  the accountant is given a dataset 1.5x larger than the one sampled (a 1.5x smaller rate).
* ``auxiliary release``: a noisy statistic the step releases besides the gradient, left out of the claim: DPCL's
  noised similarity matrix or statistics (:data:`AUXILIARY`); adaptive clipping's noisy count in the federated rounds;
  and DPCL-SimCLR's similarity matrix given 1/1.1 of its claimed noise, or one noise draw at every step
  (:data:`SIMILARITY`: what its release probes see). DP-SGD, DP-GCL and Logit-DP release the gradient alone: it
  does not apply to them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator

import torch

import privaudit.defenses.dp.base as dp_base
import privaudit.defenses.dp.engine.clipping as dp_clipping
import privaudit.defenses.dp.engine.gradients as dp_gradients
import privaudit.defenses.dp.engine.pairs as dp_pairs
import privaudit.defenses.dp.release.step as dp_step
import privaudit.defenses.dpcl as dpcl
import privaudit.defenses.fedemb.aggregate as fed_aggregate
import privaudit.defenses.fedemb.defense as fed_defense
import privaudit.defenses.fedemb.users as fed_users
from privaudit.defenses.training.sampling import fixed_size_batches, poisson_batches, shuffled_batches, steps_per_epoch
from privaudit.defenses.training.seeding import torch_generator

DP_SGD_STYLE = ("dpsgd", "dp-clip", "dp-gcl", "logit-dp", "dpcl-simclr", "dpcl-barlow")
FEDERATED = ("dp-fedemb", "dp-fedavg")
#: The defenses that sample Poisson batches: under fixed-size batches (DPCL) the realised size is the planned one,
#: so a normaliser that follows it is still a constant (no bug to plant).
POISSON = ("dpsgd", "dp-clip", "dp-gcl", "logit-dp")


@dataclass(frozen=True)
class Bug:
    """One planted bug: its class, what it does, and the context manager that plants it into a defense."""

    name: str
    cls: str
    description: str
    plant: Callable[[str, dict], ContextManager[None]]
    applies: tuple[str, ...] = DP_SGD_STYLE


@contextlib.contextmanager
def patched(target: object, name: str, value: object) -> Iterator[None]:
    """``target.name = value`` for the block (the original restored after)."""
    original = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, original)


def federated_rounds(draws: Callable[[], Callable[[int, int, torch.Generator], torch.Tensor]],
                     per_client: Callable[[int], int] = lambda k: k) -> ContextManager[None]:
    """A federated run's rounds drawn by ``draws()`` (one per run: ``(num_users, per_round, gen) -> user indices``)
    instead of a fresh draw without replacement each round, grouped ``per_client(users_per_client)`` to a client; the
    claim keeps the configuration's sampling."""
    def planted(self, num_users: int, seed: int):
        cfg = self.config
        k, draw = per_client(cfg.users_per_client), draws()
        gen = torch_generator(seed, "fedemb", "rounds")
        for _ in range(cfg.rounds):
            picked = draw(num_users, cfg.clients_per_round * k, gen)
            yield fed_users.RoundPlan(tuple(picked.view(cfg.clients_per_round, k)))
    return patched(fed_defense._Federated, "round_plans", planted)


def shuffled(defense: str, params: dict) -> ContextManager[None]:
    """Epochs of a shuffled permutation cut into fixed-size batches, whatever the claim's sampler. Not planted in the
    federated defenses: at the suites' 10 rounds of 16 of 58 users, rounds cut from shuffled permutations differ from
    independent rounds by too little for any test at the trace's level (their disjoint pairs' overlaps, about 9
    against 22 expected, have p near 1e-3; the trace's sampling tests run at 1e-7)."""
    def planted(sampler, n, batch_size, epochs, gen):
        return shuffled_batches(n, batch_size, epochs, gen), steps_per_epoch(n, batch_size) * epochs
    return patched(dp_base, "make_batches", planted)


def reseeded_sampler(defense: str, params: dict) -> ContextManager[None]:
    """Each round's users drawn by a generator re-created with one seed: the same users every round."""
    return federated_rounds(lambda: lambda n, k, gen: torch.randperm(n, generator=torch_generator(0, "reseeded"))[:k])


def larger_rate(defense: str, params: dict) -> ContextManager[None]:
    """Batches drawn at 1.5x the planned expected size (Poisson: 1.5x the rate; federated: 1.5x the users per
    client); the claim keeps the plan's."""
    if defense in FEDERATED:
        return federated_rounds(lambda: lambda n, k, gen: torch.randperm(n, generator=gen)[:k],
                                per_client=lambda k: math.ceil(1.5 * k))

    def planted(sampler, n, batch_size, epochs, gen):
        steps, larger = steps_per_epoch(n, batch_size) * epochs, min(n, math.ceil(1.5 * batch_size))
        if sampler == "poisson":
            return poisson_batches(n, larger / n, steps, gen), steps
        return fixed_size_batches(n, larger, steps, gen), steps
    return patched(dp_base, "make_batches", planted)


@contextlib.contextmanager
def clip_scaled(scale: float | None) -> Iterator[None]:
    """Every engine's clipping factors computed at ``scale`` times the clip (None: no clipping at all)."""
    original = dp_clipping.clip_factors

    def planted(norms: torch.Tensor, clip: float) -> torch.Tensor:
        return torch.ones_like(norms) if scale is None else original(norms, scale * clip)
    clip_deltas = fed_aggregate.clip_deltas

    def planted_deltas(deltas, clip_norm):
        return ({k: v.clone() for k, v in deltas.items()}, fed_aggregate.stacked_norms(deltas)) if scale is None \
            else clip_deltas(deltas, scale * clip_norm)
    with patched(dp_clipping, "clip_factors", planted), patched(dp_gradients, "clip_factors", planted), \
            patched(dp_pairs, "clip_factors", planted), patched(fed_aggregate, "clip_deltas", planted_deltas):
        yield


def reused_noise(defense: str, params: dict) -> ContextManager[None]:
    """Every step's (federated: round's) noise from a generator re-created with one seed."""
    if defense in FEDERATED:
        release = fed_aggregate.noised_release
        return federated_release(lambda sums, norms, clip, z, gen, *a, **kw: release(
            sums, norms, clip, z, torch_generator(0, "reused"), *a, **kw))
    release = dp_base.release
    return patched(dp_base, "release", lambda total, std, generator, **kw: release(
        total, std, torch_generator(0, "reused"), **kw))


def federated_noise(scale: Callable[[str], float]) -> ContextManager[None]:
    """A round's release with the noise on tensor ``name`` scaled by ``scale(name)`` (the planted copy of
    :func:`privaudit.defenses.fedemb.aggregate.noised_release`: the noise is drawn, then scaled as added)."""
    release = fed_aggregate.noised_release

    def planted(sums, norms, clip, z, gen, canary=None, observer=None, **kw):
        out = release(sums, norms, clip, z, gen, canary, observer=None, **kw)
        if observer is None and all(scale(n) == 1 for n in sums):
            return out
        replay = release(sums, norms, clip, 0.0, gen, canary, observer=None)  # noise-free update, same draws skipped
        noisy = {n: replay.update[n] + scale(n) * (out.update[n] - replay.update[n]) for n in sums}
        if observer is not None:
            count = norms.numel()
            observer({n: v * count for n, v in noisy.items()}, {n: t.detach() for n, t in sums.items()})
        return dataclasses.replace(out, update=noisy)
    return federated_release(planted)


@contextlib.contextmanager
def federated_release(planted: Callable) -> Iterator[None]:
    """``planted`` in place of a round's release on both of its call paths (whole and chunked aggregation)."""
    with patched(fed_aggregate, "noised_release", planted), patched(fed_defense, "noised_release", planted):
        yield


def unnoised_biases(defense: str, params: dict) -> ContextManager[None]:
    """No noise on the tensors whose name ends in 'bias'."""
    if defense in FEDERATED:
        return federated_noise(lambda name: 0.0 if name.endswith("bias") else 1.0)
    return _unnoised_dp_biases()


@contextlib.contextmanager
def _unnoised_dp_biases() -> Iterator[None]:
    """The DP-SGD engine's noise zeroed on the bias coordinates (the layout read from the embedder)."""
    gaussian = dp_step.gaussian
    state: dict[str, torch.Tensor] = {}
    original_write = dp_base.Embedder.params

    def planted(shape, std, generator, **kw):
        draw = gaussian(shape, std, generator, **kw)
        keep = state.get("keep")
        return draw * keep.to(draw.device, draw.dtype) if keep is not None and draw.numel() == keep.numel() else draw

    def params_spy(self):
        out = original_write(self)
        state["keep"] = torch.cat([torch.full((k,), 0.0 if n.endswith("bias") else 1.0)
                                   for n, k in zip(self.space.names, self.space.numels)])
        return out
    with patched(dp_step, "gaussian", planted), patched(dp_base.Embedder, "params", params_spy):
        yield


@contextlib.contextmanager
def _per_tensor_noise(draw_tensor: Callable[[int, float, torch.Generator], torch.Tensor]) -> Iterator[None]:
    """The DP-SGD engine's flat noise draw replaced by ``draw_tensor(numel, std, generator)`` for every parameter
    tensor in the embedder's layout, concatenated (other draws, e.g. DPCL's similarity noise, untouched)."""
    gaussian = dp_step.gaussian
    state: dict[str, list[int]] = {}
    original_params = dp_base.Embedder.params

    def planted(shape, std, generator, **kw):
        numels = state.get("numels")
        if numels is None or math.prod(tuple(shape)) != sum(numels):
            return gaussian(shape, std, generator, **kw)
        flat = torch.cat([draw_tensor(k, std, generator) for k in numels])
        return flat.reshape(tuple(shape)).to(device=kw.get("device", "cpu"), dtype=kw.get("dtype", torch.float32))

    def params_spy(self):
        out = original_params(self)
        state["numels"] = list(self.space.numels)
        return out
    with patched(dp_step, "gaussian", planted), patched(dp_base.Embedder, "params", params_spy):
        yield


def tensor_reused_noise(defense: str, params: dict) -> ContextManager[None]:
    """Every tensor's noise from a generator re-created with the step's one seed: fresh at every step, the same
    stream on every tensor (a per-parameter noise loop that re-seeds its generator)."""
    def draw(k: int, std: float, generator: torch.Generator) -> torch.Tensor:
        return std * torch.randn(k, generator=torch_generator(generator.initial_seed(), "tensor"))
    return _per_tensor_noise(draw)


def broadcast_noise(defense: str, params: dict) -> ContextManager[None]:
    """One draw per tensor broadcast over it (noise of shape (1,) expanded to the parameter's shape): every
    coordinate's variance as claimed, fresh at every step, all coordinates of a tensor equal."""
    return _per_tensor_noise(lambda k, std, generator: (std * torch.randn(1, generator=generator)).expand(k))


def noise_shortfall(defense: str, params: dict) -> ContextManager[None]:
    """The release adds 1/1.1 of the noise it draws and records."""
    if defense in FEDERATED:
        return federated_noise(lambda name: 1 / 1.1)
    return patched(dp_base.DPDefense, "added_noise_scale", lambda self: 1 / 1.1)


def batch_normaliser(defense: str, params: dict) -> ContextManager[None]:
    """The noisy sum divided by the realised batch size (times the plan's normaliser per expected example)."""
    def planted(self, plan, batch):
        return self.normalizer(plan) * max(1, batch) / max(1, plan.batch_size)
    return patched(dp_base.DPDefense, "release_normalizer", planted)


def claim_with_plan(change: Callable) -> Callable[[str, dict], ContextManager[None]]:
    """A plant whose claim (and calibration) is made for ``change(plan)`` while training runs the plan."""
    def plant(defense: str, params: dict) -> ContextManager[None]:
        original = dp_base.DPDefense.claim_for

        def planted(self, plan, mechanisms, multiplier, delta):
            return original(self, change(plan), mechanisms, multiplier, delta)
        return patched(dp_base.DPDefense, "claim_for", planted)
    return plant


# -- auxiliary release: a noisy statistic the step releases besides the gradient, left out of the claim ------------
#: The DP-SGD-style defenses whose step releases a Gaussian query besides the gradient: DPCL's noisy similarity matrix
#: (SimCLR) and statistics (Barlow).
AUXILIARY = ("dpcl-simclr", "dpcl-barlow")


def unaccounted_auxiliary(defense: str, params: dict) -> ContextManager[None]:
    """The claim (and the calibration made with it) accounts the gradient's release alone while the step also
    releases DPCL's noised similarity matrix or statistics: the accountant told the gradient's multiplier (as an
    Opacus AdaClip accountant told the gradient's would be)."""
    build = dp_base.build_claim

    def planted(plan, mechanisms, gradient_multiplier, delta, **kw):
        return build(plan, mechanisms[:1], gradient_multiplier, delta, **kw)
    return patched(dp_base, "build_claim", planted)


#: The defenses whose step releases a noised similarity matrix (DPCL-SimCLR, Sec. 3.2.2): its own noise's bugs.
SIMILARITY = ("dpcl-simclr",)


def similarity_shortfall(defense: str, params: dict) -> ContextManager[None]:
    """DPCL's similarity matrix noised at 1/1.1 of the std its claim states (the gradient's noise right)."""
    std = dpcl.DPCLSimCLR.similarity_noise_std
    return patched(dpcl.DPCLSimCLR, "similarity_noise_std", lambda self, ctx, b: std(self, ctx, b) / 1.1)


class _OneDraw:
    """A step's randomness whose normal draws all come from a generator re-created with one seed."""

    def normal(self, shape, name, device=None, dtype=None):
        return torch.randn(shape, generator=torch_generator(0, "reused"), dtype=dtype).to(device)


def similarity_reused_noise(defense: str, params: dict) -> ContextManager[None]:
    """DPCL's similarity noise from a generator re-created with one seed at every step (its level right)."""
    loss = dpcl.DPCLSimCLR.noisy_loss
    return patched(dpcl.DPCLSimCLR, "noisy_loss", lambda self, ctx, z, b, rnd: loss(self, ctx, z, b, _OneDraw()))


@contextlib.contextmanager
def federated_count_unaccounted(defense: str, params: dict) -> Iterator[None]:
    """Federated rounds with adaptive clipping (the suite's clip made adaptive) and its noisy count of unclipped
    clients (std the default share's, sigma_b = z / sqrt(0.05)) drawn every round, while the claim's round multiplier
    z is the deltas' alone."""
    plan, rounds = fed_defense._Federated.noise_plan, fed_defense._Federated.train_rounds

    def planted_plan(self, budget, num_users):
        noise = plan(self, budget, num_users)
        if noise.event_z <= 0 or noise.count_stddev is not None:
            return noise
        return dataclasses.replace(noise, count_stddev=fed_aggregate.count_stddev_for(noise.event_z))

    def adaptive_rounds(self, *args, **kwargs):
        config = self.config
        self.config = dataclasses.replace(config, adaptive_clipping=True)
        try:
            return rounds(self, *args, **kwargs)
        finally:
            self.config = config
    with patched(fed_defense._Federated, "noise_plan", planted_plan), \
            patched(fed_defense._Federated, "train_rounds", adaptive_rounds):
        yield


half_the_steps = claim_with_plan(lambda plan: dataclasses.replace(plan, steps=max(1, math.ceil(plan.steps / 2))))
smaller_rate = claim_with_plan(lambda plan: dataclasses.replace(plan, n=math.ceil(1.5 * plan.n)))

BUGS = {b.name: b for b in (
    Bug("shuffled", "sampling", "shuffled fixed-size batches under the claim's sampling", shuffled),
    Bug("rate-1.5x", "sampling", "batches drawn at 1.5x the claimed rate", larger_rate, DP_SGD_STYLE + FEDERATED),
    Bug("reseeded-sampler", "sampling", "each round's users drawn by a generator re-created with one seed",
        reseeded_sampler, FEDERATED),
    Bug("clip-2x", "clipping", "units clipped at twice the claimed clip", lambda d, p: clip_scaled(2.0),
        DP_SGD_STYLE + FEDERATED),
    Bug("no-clip", "clipping", "clipping skipped", lambda d, p: clip_scaled(None), DP_SGD_STYLE + FEDERATED),
    Bug("reused-noise", "noise", "one noise draw reused at every step", reused_noise, DP_SGD_STYLE + FEDERATED),
    Bug("unnoised-biases", "noise", "no noise on the biases", unnoised_biases, DP_SGD_STYLE + FEDERATED),
    Bug("shortfall-1.1x", "noise", "1/1.1 of the recorded noise added", noise_shortfall, DP_SGD_STYLE + FEDERATED),
    Bug("tensor-reused-noise", "noise", "every tensor's noise from one re-created generator", tensor_reused_noise),
    Bug("broadcast-noise", "noise", "one noise draw per tensor broadcast over it", broadcast_noise),
    Bug("batch-normaliser", "accounting", "normaliser follows the realised batch size", batch_normaliser, POISSON),
    Bug("half-steps", "accounting", "the accountant composes half the steps run", half_the_steps),
    Bug("rate-misreported", "accounting", "the accountant is given a 1.5x smaller sampling rate", smaller_rate),
    Bug("aux-unaccounted", "auxiliary release", "DPCL's noised similarity or statistics left out of the claim",
        unaccounted_auxiliary, AUXILIARY),
    Bug("count-unaccounted", "auxiliary release", "adaptive clipping's noisy count left out of the claim",
        federated_count_unaccounted, FEDERATED),
    Bug("similarity-shortfall-1.1x", "auxiliary release", "DPCL's similarity matrix noised at 1/1.1 of its claimed "
        "std", similarity_shortfall, SIMILARITY),
    Bug("similarity-reused-noise", "auxiliary release", "DPCL's similarity noise reused at every step",
        similarity_reused_noise, SIMILARITY),
)}


# -- Dependent noise: one draw serving several parts of the gradient -------------------------------------------------
#
# Class ``dependent-noise`` (:data:`DEPENDENT_NOISE`): every coordinate's noise N(0, s^2) and fresh at every step, but
# some coordinates repeat others (exactly, or sign-flipped), so their difference (or sum) carries no noise: epsilon is
# infinite. Planted in the shared engine's noise draw (:func:`privaudit.defenses.dp.release.noise.gaussian` as the
# DP-SGD engine's release and DP-FedEmb's round call it), per parameter tensor: each tensor's first half drawn and
# repeated for its second half, or repeated sign-flipped (antithetic halves); one row drawn and broadcast over a
# matrix's rows; the second tensor of each size given the first's noise sign-flipped.

TensorDraw = Callable[[tuple, float, torch.Generator, list], torch.Tensor]


def _fresh(shape: tuple, std: float, generator: torch.Generator) -> torch.Tensor:
    return std * torch.randn(shape, generator=generator)


def halves(sign: float) -> TensorDraw:
    """A tensor's noise: one draw for its first half, repeated times ``sign`` for its second half."""
    def draw(shape, std, generator, previous):
        n = math.prod(shape)
        z = _fresh((math.ceil(n / 2),), std, generator)
        return torch.cat([z, sign * z])[:n].reshape(shape)
    return draw


def row_broadcast(shape, std, generator, previous):
    """A matrix's (or conv kernel's) noise: one row drawn and broadcast over its first axis; a vector's fresh."""
    if len(shape) < 2:
        return _fresh(shape, std, generator)
    return _fresh((1, *shape[1:]), std, generator).expand(shape).clone()


def sign_flipped_pairs(shape, std, generator, previous):
    """The second tensor of each size given the first's noise sign-flipped (the third fresh, the fourth its copy...)."""
    same = [p for p in previous if p.numel() == math.prod(shape)]
    if len(same) % 2:
        return -same[-1].reshape(shape)
    return _fresh(shape, std, generator)


@contextlib.contextmanager
def dependent_noise(draw: TensorDraw) -> Iterator[None]:
    """The shared engine's gradient noise drawn tensor by tensor by ``draw(shape, std, generator, previous)``
    (``previous``: the step's tensors drawn before it): the DP-SGD engine's one flat draw per step in the embedder's
    layout (other draws, e.g. DPCL's similarity noise, untouched), DP-FedEmb's round draw per tensor."""
    gaussian, state = dp_step.gaussian, {"previous": []}
    original_params, release = dp_base.Embedder.params, fed_aggregate.noised_release

    def flat(shape, std, generator, **kw):
        shapes = state.get("shapes")
        if shapes is None or math.prod(tuple(shape)) != sum(math.prod(s) for s in shapes):
            return gaussian(shape, std, generator, **kw)
        drawn: list[torch.Tensor] = []
        for s in shapes:
            drawn.append(draw(tuple(s), std, generator, drawn))
        return _placed(torch.cat([d.reshape(-1) for d in drawn]).reshape(tuple(shape)), kw)

    def per_tensor(shape, std, generator, **kw):
        out = draw(tuple(shape), std, generator, state["previous"])
        state["previous"].append(out)
        return _placed(out, kw)

    def params_spy(self):
        out = original_params(self)
        state["shapes"] = [tuple(s) for s in self.space.shapes]
        return out

    def round_release(*args, **kwargs):
        state["previous"] = []
        return release(*args, **kwargs)
    with patched(dp_step, "gaussian", flat), patched(dp_base.Embedder, "params", params_spy), \
            patched(fed_aggregate, "gaussian", per_tensor), federated_release(round_release):
        yield


def _placed(noise: torch.Tensor, kw: dict) -> torch.Tensor:
    return noise.to(device=kw.get("device", "cpu"), dtype=kw.get("dtype", torch.float32))


DEPENDENT_NOISE = (
    Bug("halves-shared", "dependent-noise", "each tensor's second half of noise a copy of its first",
        lambda d, p: dependent_noise(halves(1.0)), DP_SGD_STYLE + FEDERATED),
    Bug("halves-sign-flipped", "dependent-noise", "each tensor's second half of noise its first sign-flipped",
        lambda d, p: dependent_noise(halves(-1.0)), DP_SGD_STYLE + FEDERATED),
    Bug("row-broadcast", "dependent-noise", "one noise row per matrix broadcast over its rows",
        lambda d, p: dependent_noise(row_broadcast), DP_SGD_STYLE + FEDERATED),
    Bug("sign-flipped-tensor", "dependent-noise", "the second tensor of each size given the first's noise "
        "sign-flipped", lambda d, p: dependent_noise(sign_flipped_pairs), DP_SGD_STYLE + FEDERATED),
)
BUGS.update({b.name: b for b in DEPENDENT_NOISE})
