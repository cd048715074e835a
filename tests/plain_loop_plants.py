"""The plain DP loop (``examples/plain_dp_loop.py``) with one planted bug each, and one that declares nothing. Test
fixtures only: privaudit imports them as ``plain_loop_plants:train_<name>``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import privaudit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import plain_dp_loop as loop  # noqa: E402

make_net = loop.make_net


def _train(model, x, y, seed, step):
    from opacus.accountants import RDPAccountant

    gen, accountant = torch.Generator().manual_seed(seed), RDPAccountant()
    for _ in range(loop.STEPS):
        batch = (torch.rand(len(x), generator=gen) < loop.SAMPLE_RATE).nonzero().reshape(-1)
        if len(batch):
            step(model, loop.clipped_units(model, x[batch], y[batch]), batch, gen)
            accountant.step(noise_multiplier=loop.noise_multiplier(), sample_rate=loop.SAMPLE_RATE)
    return accountant


def train_shortfall(model, x, y, *, seed):
    """The noise added at 1/1.1 of the std the release declares (and the accountant is told)."""
    return _train(model, x, y, seed, lambda m, u, b, g: loop.noisy_step(m, u, b, g, std_scale=1 / 1.1))


def train_reused_noise(model, x, y, *, seed):
    """The noise drawn from a generator re-seeded before every step: every step adds the same noise."""
    return _train(model, x, y, seed, lambda m, u, b, g: loop.noisy_step(m, u, b, torch.Generator().manual_seed(seed)))


def train_tiled_noise(model, x, y, *, seed):
    """Each tensor's noise a draw of 16 values tiled over it (every coordinate N(0, (z C)^2), fresh every step)."""
    def step(model, units, batch, gen):
        z = loop.noise_multiplier()
        sums = [u.sum(dim=0) for u in units]
        with privaudit.declare_release(sums, noise_multiplier=z, clip_norm=loop.MAX_GRAD_NORM,
                                       sample_rate=loop.SAMPLE_RATE, normalizer=loop.EXPECTED_BATCH, batch=batch,
                                       units=units):
            for s in sums:
                tile = torch.normal(0.0, z * loop.MAX_GRAD_NORM, (16,), generator=gen)
                s.add_(tile.repeat(-(-s.numel() // 16))[:s.numel()].view_as(s))
        with torch.no_grad():
            for p, s in zip(model.parameters(), sums):
                p -= loop.LR * s / loop.EXPECTED_BATCH
    return _train(model, x, y, seed, step)


def train_undeclared(model, x, y, *, seed):
    """The honest loop's noise added without declaring the release."""
    from opacus.accountants import RDPAccountant

    gen, accountant = torch.Generator().manual_seed(seed), RDPAccountant()
    for _ in range(3):
        batch = (torch.rand(len(x), generator=gen) < loop.SAMPLE_RATE).nonzero().reshape(-1)
        sums = [u.sum(dim=0) for u in loop.clipped_units(model, x[batch], y[batch])]
        with torch.no_grad():
            for p, s in zip(model.parameters(), sums):
                p -= loop.LR * (s + torch.normal(0.0, loop.noise_multiplier(), s.shape, generator=gen)) / 64
        accountant.step(noise_multiplier=loop.noise_multiplier(), sample_rate=loop.SAMPLE_RATE)
    return accountant
