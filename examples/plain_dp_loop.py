"""A plain PyTorch DP-SGD loop (no Opacus optimizer) that shows ``privaudit audit-training`` its releases.

    privaudit audit-training --factory plain_dp_loop:make_net --train-fn plain_dp_loop:train \
        --members members.npz --delta 1e-5 --out audit/

Each step draws a Poisson batch at the fixed rate ``SAMPLE_RATE`` (its own coins), computes per-example gradients with
``torch.func``, clips each to ``MAX_GRAD_NORM``, sums them and adds Gaussian noise inside ``privaudit.declare_release``
(outside an audit the block does nothing), divides by the constant ``EXPECTED_BATCH`` and steps. Opacus' RDP
accountant is told each step; its noise is calibrated by Opacus to ``PLAIN_LOOP_EPSILON`` (default 8) at delta 1e-5
over ``PLAIN_LOOP_STEPS`` (default 140) steps. ``python examples/opacus_recipe.py --out DIR`` writes the members.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import privaudit

TARGET_EPSILON, DELTA = float(os.environ.get("PLAIN_LOOP_EPSILON", "8")), 1e-5
STEPS = int(os.environ.get("PLAIN_LOOP_STEPS", "140"))
SAMPLE_RATE, EXPECTED_BATCH, LR, MAX_GRAD_NORM = 1 / 14, 64, 0.5, 1.0


def make_net() -> nn.Module:
    """The model: an MLP on the 64 pixel features."""
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


@functools.lru_cache(maxsize=None)
def noise_multiplier() -> float:
    """Opacus' calibration to the target epsilon at the fixed rate and steps (no data read)."""
    from opacus.accountants.utils import get_noise_multiplier

    return get_noise_multiplier(target_epsilon=TARGET_EPSILON, target_delta=DELTA, sample_rate=SAMPLE_RATE,
                                steps=STEPS, accountant="rdp")


def clipped_units(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> list[torch.Tensor]:
    """Each example's gradient clipped to ``MAX_GRAD_NORM`` (one tensor (batch, *shape) per parameter)."""
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, x, y):
        return F.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    per = vmap(grad(loss), in_dims=(None, 0, 0))(params, xb, yb)
    grads = [per[k] for k in params]
    norms = torch.cat([g.reshape(len(xb), -1) for g in grads], dim=1).norm(dim=1)
    factor = (MAX_GRAD_NORM / (norms + 1e-6)).clamp(max=1.0)
    return [g * factor.view(-1, *[1] * (g.dim() - 1)) for g in grads]


def noisy_step(model: nn.Module, units: list[torch.Tensor], batch: torch.Tensor, gen: torch.Generator,
               std_scale: float = 1.0) -> None:
    """Sum the clipped units, add the noise (a declared release), divide by the constant, step."""
    z = noise_multiplier()
    sums = [u.sum(dim=0) for u in units]
    with privaudit.declare_release(sums, noise_multiplier=z, clip_norm=MAX_GRAD_NORM, sample_rate=SAMPLE_RATE,
                                   normalizer=EXPECTED_BATCH, batch=batch, units=units):
        for s in sums:
            s.add_(torch.normal(0.0, std_scale * z * MAX_GRAD_NORM, s.shape, generator=gen))
    with torch.no_grad():
        for p, s in zip(model.parameters(), sums):
            p -= LR * s / EXPECTED_BATCH


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: int):
    """Train ``model`` in place; return Opacus' RDP accountant (told every step)."""
    from opacus.accountants import RDPAccountant

    gen, accountant = torch.Generator().manual_seed(seed), RDPAccountant()
    for _ in range(STEPS):
        batch = (torch.rand(len(x), generator=gen) < SAMPLE_RATE).nonzero().reshape(-1)
        if len(batch):
            noisy_step(model, clipped_units(model, x[batch], y[batch]), batch, gen)
            accountant.step(noise_multiplier=noise_multiplier(), sample_rate=SAMPLE_RATE)
    model.eval()
    return accountant
