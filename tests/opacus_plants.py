"""The honest Opacus recipe (``examples/opacus_recipe.py``) with one planted bug each: the catalogue's classes
(:mod:`tests.bug_plants`: noise, sampling, clipping) planted in the recipe and in Opacus' optimizer instance, as a
user's code could. Test fixtures only: privaudit imports them as ``opacus_plants:train_<name>``."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import opacus_recipe as recipe  # noqa: E402

make_net = recipe.make_net


class _Mapped:
    """The loader's batches, each passed through ``fn(xb, yb)`` (re-iterable, one pass per epoch as the loader)."""

    def __init__(self, loader, fn):
        self.loader, self.fn = loader, fn

    def __iter__(self):
        return (self.fn(xb, yb) for xb, yb in self.loader)


def _finish(private, model, accountant):
    private._close()
    model.eval()
    return accountant


def train_shortfall(model, x, y, *, seed):
    """The noise drawn at 1/1.1 of the multiplier the accountant records."""
    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    add_noise = opt.add_noise

    def short() -> None:
        opt.noise_multiplier /= 1.1
        try:
            add_noise()
        finally:
            opt.noise_multiplier *= 1.1
    opt.add_noise = short
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_reused_noise(model, x, y, *, seed):
    """The noise generator re-seeded before every step: every step draws the same noise."""
    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    add_noise = opt.add_noise

    def reused() -> None:
        opt.generator = torch.Generator().manual_seed(seed)
        add_noise()
    opt.add_noise = reused
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_tensor_reused_noise(model, x, y, *, seed):
    """A per-parameter noise loop that re-seeds its generator for every tensor (fresh at every step): every tensor
    starts with the same noise values."""
    from opacus.optimizers.optimizer import _generate_noise

    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    steps = iter(range(10 ** 9))

    def per_tensor() -> None:
        step_seed = seed * 100_003 + next(steps)
        for p in opt.params:
            gen = torch.Generator().manual_seed(step_seed)
            p.grad = (p.summed_grad + _generate_noise(opt.noise_multiplier * opt.max_grad_norm, p.summed_grad,
                                                      gen)).view_as(p)
    opt.add_noise = per_tensor
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_antithetic_noise(model, x, y, *, seed):
    """Antithetic noise (a variance-reduction idea): each tensor's noise drawn as Opacus draws it, then its second
    half overwritten with its first half sign-flipped before it is added. Every coordinate still N(0, (z C)^2) and
    fresh at every step; the two halves' sum carries no noise."""
    from opacus.optimizers.optimizer import _generate_noise

    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)

    def antithetic() -> None:
        for p in opt.params:
            noise = _generate_noise(opt.noise_multiplier * opt.max_grad_norm, p.summed_grad, opt.generator)
            flat, half = noise.view(-1), noise.numel() // 2
            flat[half:2 * half] = -flat[:half]
            p.grad = (p.summed_grad + noise).view_as(p)
    opt.add_noise = antithetic
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_shuffled(model, x, y, *, seed):
    """Shuffled fixed-size batches (an epoch's disjoint batches) while the accountant is told Poisson at the rate."""
    private, opt, _, acc = recipe.private_parts(model, x, y, seed)
    batches = DataLoader(TensorDataset(x, y), batch_size=recipe.EXPECTED_BATCH, shuffle=True,
                         generator=torch.Generator().manual_seed(seed))
    recipe.fit(private, opt, batches)
    return _finish(private, model, acc)


def _clip_at_twice(opt) -> None:
    """The optimizer's per-sample clipping run at twice its ``max_grad_norm`` (the noise still calibrated to it)."""
    clip = opt.clip_and_accumulate

    def loose() -> None:
        opt.max_grad_norm *= 2
        try:
            clip()
        finally:
            opt.max_grad_norm /= 2
    opt.clip_and_accumulate = loose


def train_clip_mismatch(model, x, y, *, seed):
    """Per-sample gradients clipped at twice the norm the noise is calibrated to."""
    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    _clip_at_twice(opt)
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_spared_clip(model, x, y, *, seed):
    """Clipping that spares mid-norm units: only a per-sample gradient above twice the clip norm is clipped (to the
    clip norm), so the largest units look right and a unit of norm in (C, 2C] enters the sum whole."""
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)

    def spared() -> None:
        rows = [opt._get_flat_grad_sample(p) for p in opt.params]
        norms = torch.stack([r.reshape(len(r), -1).norm(dim=1) for r in rows], dim=1).norm(dim=1)
        c = opt.max_grad_norm
        factor = torch.where(norms > 2 * c, c / (norms + 1e-6), torch.ones_like(norms))
        for p, r in zip(opt.params, rows):
            _check_processed_flag(p.grad_sample)
            g = torch.einsum("i,i...", factor, r)
            p.summed_grad = g if p.summed_grad is None else p.summed_grad + g
            _mark_as_processed(p.grad_sample)
    opt.clip_and_accumulate = spared
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_missing_noise(model, x, y, *, seed):
    """The last parameter tensor (the output bias) released without noise."""
    from opacus.optimizers.optimizer import _generate_noise

    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)

    def partial() -> None:
        for p in opt.params[:-1]:
            p.grad = (p.summed_grad + _generate_noise(opt.noise_multiplier * opt.max_grad_norm, p.summed_grad,
                                                      opt.generator)).view_as(p)
        last = opt.params[-1]
        last.grad = last.summed_grad.clone().view_as(last)
    opt.add_noise = partial
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_unseeded_jitter(model, x, y, *, seed):
    """Not a privacy bug: the inputs jittered by a generator seeded from the operating system at every run, so the
    release depends on randomness no replay can repeat (the release-distance check must then decline to judge)."""
    import os

    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    jitter = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
    recipe.fit(private, opt, _Mapped(loader, lambda xb, yb: (xb + 1e-3 * torch.randn(xb.shape, generator=jitter), yb)))
    return _finish(private, model, acc)


def train_virtual_steps(model, x, y, *, seed):
    """Not a privacy bug: the honest recipe's logical batches split into physical batches of 16 by Opacus'
    BatchMemoryManager (virtual steps: one release spans several loader batches)."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=16, optimizer=opt) as physical:
        recipe.fit(private, opt, physical)
    return _finish(private, model, acc)


def _ghost_parts(model, x, y, seed):
    """The honest recipe under Opacus' fast gradient (ghost) clipping: (the fast-clipping module, its DP optimizer,
    the DP loss, the Poisson loader, the RDP accountant), at the recipe's fixed rate, normaliser and noise."""
    from opacus.accountants import RDPAccountant
    from opacus.data_loader import DPDataLoader
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.optimizers import DPOptimizerFastGradientClipping
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

    torch.manual_seed(seed)
    loader = DPDataLoader(TensorDataset(x, y), sample_rate=recipe.SAMPLE_RATE,
                          generator=torch.Generator().manual_seed(seed))
    private = GradSampleModuleFastGradientClipping(model, max_grad_norm=recipe.MAX_GRAD_NORM)
    opt = DPOptimizerFastGradientClipping(torch.optim.SGD(private.parameters(), lr=recipe.LR),
                                          noise_multiplier=recipe.noise_multiplier(),
                                          max_grad_norm=recipe.MAX_GRAD_NORM, expected_batch_size=recipe.EXPECTED_BATCH)
    accountant = RDPAccountant()
    opt.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=recipe.SAMPLE_RATE))
    criterion = DPLossFastGradientClipping(private, opt, torch.nn.CrossEntropyLoss())
    return private, opt, criterion, loader, accountant


def _ghost_fit(private, opt, criterion, loader) -> None:
    for _ in range(recipe.EPOCHS):
        for xb, yb in loader:
            if len(xb):
                opt.zero_grad()
                criterion(private(xb), yb).backward()
                opt.step()


def train_ghost(model, x, y, *, seed):
    """Not a bug: the honest recipe under fast gradient (ghost) clipping."""
    private, opt, criterion, loader, acc = _ghost_parts(model, x, y, seed)
    _ghost_fit(private, opt, criterion, loader)
    return _finish(private, model, acc)


def train_ghost_virtual_steps(model, x, y, *, seed):
    """Not a bug: the honest recipe under ghost clipping, its logical batches split into physical batches of 16 by
    BatchMemoryManager (several backward passes, each clipped, per release)."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    private, opt, criterion, loader, acc = _ghost_parts(model, x, y, seed)
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=16, optimizer=opt) as physical:
        _ghost_fit(private, opt, criterion, physical)
    return _finish(private, model, acc)


def train_ghost_clip_mismatch(model, x, y, *, seed):
    """Ghost clipping at twice the norm the noise is calibrated to: the module's clip norm is not the optimizer's
    (the class of Opacus' PR #664, a clip norm fast clipping did not use)."""
    private, opt, criterion, loader, acc = _ghost_parts(model, x, y, seed)
    private.max_grad_norm = 2 * recipe.MAX_GRAD_NORM
    _ghost_fit(private, opt, criterion, loader)
    return _finish(private, model, acc)


def train_ghost_late_clip_mismatch(model, x, y, *, seed):
    """Ghost clipping whose module clip norm doubles after the first release (a schedule gone wrong): the first
    release, the one the replay repeats, is correct."""
    private, opt, criterion, loader, acc = _ghost_parts(model, x, y, seed)
    step = opt.step

    def loosen_after(*args, **kwargs):
        out = step(*args, **kwargs)
        private.max_grad_norm = 2 * recipe.MAX_GRAD_NORM
        return out
    opt.step = loosen_after
    _ghost_fit(private, opt, criterion, loader)
    return _finish(private, model, acc)


def train_ghost_norm_missing_layer(model, x, y, *, seed):
    """Ghost clipping whose per-sample norms leave out the output bias: every norm is under-reported, so a unit the
    code clips to C enters the sum above it."""
    private, opt, criterion, loader, acc = _ghost_parts(model, x, y, seed)
    private.trainable_parameters = private.trainable_parameters[:-1]
    _ghost_fit(private, opt, criterion, loader)
    return _finish(private, model, acc)


#: The float32 recipe: the clip a float32 tensor (as Opacus' adaptive clip makes it after its first update, or a
#: config reader gives it) and a noise multiplier whose std z * C rounds below z * C in float32.
FLOAT32_CLIP, FLOAT32_Z = 0.3, 2 / 3 ** 0.5


def train_float32_clip(model, x, y, *, seed):
    """Not a bug: the honest recipe with its clip given as a float32 tensor (0.3) and noise multiplier 1.1547005...
    (the accountant records that multiplier; the std Opacus draws with, z * C, is computed in float32)."""
    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    opt.noise_multiplier, opt.max_grad_norm = FLOAT32_Z, torch.tensor(FLOAT32_CLIP)
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_float64_shortfall(model, x, y, *, seed):
    """The noise drawn at 1/1.0001 of the multiplier the accountant records, every value a Python float (float64)."""
    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    add_noise = opt.add_noise

    def short() -> None:
        z = opt.noise_multiplier
        opt.noise_multiplier = z / 1.0001
        try:
            add_noise()
        finally:
            opt.noise_multiplier = z
    opt.add_noise = short
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def adaclip_multipliers(opt) -> tuple[float, float]:
    """(the gradient's multiplier, the release's with the count composed at its sensitivity 1) of an
    AdaClipDPOptimizer: z_g = (z^-2 - (2 sigma_u)^-2)^-1/2 (Opacus' adjustment), 1 / z^2 = 1 / z_g^2 + 1 / sigma_u^2."""
    z, su = float(opt.noise_multiplier), float(opt.unclipped_num_std)
    gradient = (z ** -2 - (2 * su) ** -2) ** -0.5
    return gradient, (gradient ** -2 + su ** -2) ** -0.5


#: What an adaptive recipe's accountant is told each step: ``composed`` (the gradient and the count composed, the
#: count at the sensitivity the code gives it: honest), ``opacus`` (Opacus' own hook: the nominal z, which accounts
#: the count at sensitivity 1/2, Andrew et al.'s centred count), ``gradient`` (the gradient's multiplier alone).
ACCOUNTED = {"composed": lambda opt: adaclip_multipliers(opt)[1], "opacus": lambda opt: float(opt.noise_multiplier),
             "gradient": lambda opt: adaclip_multipliers(opt)[0]}


def _adaclip_parts(model, x, y, seed, target, clip=recipe.MAX_GRAD_NORM, accounted="composed", cls=None):
    """The honest recipe with Opacus' adaptive clipping (AdaClipDPOptimizer, or ``cls``, its clip moved towards the
    ``target`` quantile of the units' norms, from ``clip`` within [0.05, 10]) instead of a fixed clip; its accountant
    told :data:`ACCOUNTED` [``accounted``] at every step."""
    from opacus import GradSampleModule
    from opacus.accountants import RDPAccountant
    from opacus.data_loader import DPDataLoader
    from opacus.optimizers import AdaClipDPOptimizer

    torch.manual_seed(seed)
    loader = DPDataLoader(TensorDataset(x, y), sample_rate=recipe.SAMPLE_RATE,
                          generator=torch.Generator().manual_seed(seed))
    private = GradSampleModule(model)
    opt = (cls or AdaClipDPOptimizer)(torch.optim.SGD(private.parameters(), lr=recipe.LR), noise_multiplier=1.0,
                                      max_grad_norm=clip, expected_batch_size=recipe.EXPECTED_BATCH,
                                      target_unclipped_quantile=target, clipbound_learning_rate=0.5,
                                      max_clipbound=10.0, min_clipbound=0.05,
                                      unclipped_num_std=recipe.EXPECTED_BATCH / 20)
    accountant = RDPAccountant()
    told = ACCOUNTED[accounted]
    opt.attach_step_hook(lambda o: accountant.step(noise_multiplier=told(o), sample_rate=recipe.SAMPLE_RATE))
    return private, opt, loader, accountant


def train_adaclip_growing(model, x, y, *, seed):
    """Not a bug: adaptive clipping whose clip grows (most units clipped, target quantile 0.9), the count accounted
    at its sensitivity."""
    private, opt, loader, acc = _adaclip_parts(model, x, y, seed, 0.9)
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_adaclip_shrinking(model, x, y, *, seed):
    """Not a bug: adaptive clipping whose clip shrinks (from 8, above every unit, towards the target quantile 0: clip
    every unit), the count accounted at its sensitivity."""
    private, opt, loader, acc = _adaclip_parts(model, x, y, seed, 0.0, clip=8.0)
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_adaclip_gradient_only(model, x, y, *, seed):
    """Adaptive clipping whose accountant is told the gradient's multiplier alone: the count query left out."""
    private, opt, loader, acc = _adaclip_parts(model, x, y, seed, 0.9, accounted="gradient")
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_adaclip_opacus_accounting(model, x, y, *, seed):
    """Adaptive clipping accounted as Opacus 1.6 accounts it: the nominal multiplier, which composes the gradient
    with a count of sensitivity 1/2 (Andrew et al.'s centred count), while Opacus counts each unit as 0 or 1."""
    private, opt, loader, acc = _adaclip_parts(model, x, y, seed, 0.9, accounted="opacus")
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


@functools.lru_cache(maxsize=None)
def _centred_adaclip():
    """AdaClipDPOptimizer counting as Andrew et al. (2021, Alg. 1, Thm. 1) do: each unit's bit less 1/2 (a count
    of sensitivity 1/2), the noisy count read against the expected batch size (public)."""
    from opacus.optimizers import AdaClipDPOptimizer

    class CentredAdaClip(AdaClipDPOptimizer):
        def clip_and_accumulate(self):
            size = self.sample_size
            super().clip_and_accumulate()
            self.unclipped_num = self.unclipped_num - (self.sample_size - size) / 2

        def update_max_grad_norm(self):
            m = self.expected_batch_size
            frac = (self.unclipped_num + m / 2) / m
            self.max_grad_norm = float(min(self.max_clipbound, max(self.min_clipbound, self.max_grad_norm * float(
                torch.exp(-self.clipbound_learning_rate * (frac - self.target_unclipped_quantile))))))
    return CentredAdaClip


def train_adaclip_centred(model, x, y, *, seed):
    """Not a bug: adaptive clipping with Andrew et al.'s centred count (sensitivity 1/2) and Opacus' own accounting
    (the nominal multiplier, exact for that count)."""
    private, opt, loader, acc = _adaclip_parts(model, x, y, seed, 0.9, accounted="opacus", cls=_centred_adaclip())
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def train_adaclip_clip_mismatch(model, x, y, *, seed):
    """Adaptive clipping whose per-sample gradients are clipped at twice the moving clip the noise is calibrated to."""
    private, opt, loader, acc = _adaclip_parts(model, x, y, seed, 0.9)
    _clip_at_twice(opt)
    recipe.fit(private, opt, loader)
    return _finish(private, model, acc)


def make_private_epoch(model, x, y, *, seed, mode):
    """One epoch of ``PrivacyEngine.make_private`` at its defaults with ``grad_sample_mode=mode`` (hooks, functorch,
    ew or ghost: ghost's criterion is the DP loss make_private returns); the engine's accountant."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    engine = PrivacyEngine(accountant="rdp")
    extra = {"criterion": torch.nn.CrossEntropyLoss()} if mode == "ghost" else {}
    parts = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=recipe.LR),
                                data_loader=DataLoader(TensorDataset(x, y), batch_size=recipe.EXPECTED_BATCH),
                                noise_multiplier=1.0, max_grad_norm=recipe.MAX_GRAD_NORM, grad_sample_mode=mode,
                                **extra)
    private, opt, loader = parts[0], parts[1], parts[-1]
    criterion = parts[2] if mode == "ghost" else torch.nn.CrossEntropyLoss()
    for xb, yb in loader:
        if len(xb):
            opt.zero_grad()
            criterion(private(xb), yb).backward()
            opt.step()
    return engine.accountant


def train_cuda(model, x, y, *, seed):
    """Not a bug: the honest recipe on a GPU (the model and every batch on CUDA; the loader draws on the CPU)."""
    model.cuda()
    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    recipe.fit(private, opt, _Mapped(loader, lambda xb, yb: (xb.cuda(), yb.cuda())))
    return _finish(private, model, acc)


def train_raises(model, x, y, *, seed):
    raise RuntimeError("the user's bug")


def train_no_optimizer(model, x, y, *, seed):
    """A plain SGD loop: never steps an Opacus DPOptimizer."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def train_returns_text(model, x, y, *, seed):
    """The honest recipe's first two releases, then a string (a summary line) returned instead of its accountant."""
    private, opt, loader, acc = recipe.private_parts(model, x, y, seed)
    recipe.fit(private, opt, [b for b, _ in zip(loader, range(2))])
    _finish(private, model, acc)
    return "trained 1 epoch"


def train_returns_nothing(model, x, y, *, seed):
    """The honest recipe that returns nothing: the claim is the accountant the run stepped."""
    recipe.train(model, x, y, seed=seed)
