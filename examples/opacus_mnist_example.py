"""Opacus' own MNIST example as a recipe for ``privaudit audit-training``, on Fashion-MNIST's 60,000 training images.

    python examples/opacus_mnist_example.py --out DIR          # writes DIR/members.npz (every training image)
    PYTHONPATH=examples privaudit audit-training --factory opacus_mnist_example:make_net \
        --train-fn opacus_mnist_example:train --members DIR/members.npz --delta 1e-5 --out audit/

The model is the example's ``SampleConvNet`` (two convolutions, two linear layers: 26,010 parameters), trained by plain
SGD (momentum 0) on cross-entropy, at the example's settings (``mnist.py``'s defaults with ``-sr=0.004``): Poisson
sample rate 0.004 (250 batches an epoch, 240 examples expected in each), noise multiplier 1.0, clip 1.0, learning rate
0.1, delta 1e-5, Opacus' RDP accountant. ``OPACUS_EXAMPLE_EPOCHS`` (default 15), ``OPACUS_EXAMPLE_SIGMA``,
``OPACUS_EXAMPLE_CLIP`` and ``OPACUS_EXAMPLE_LR`` override them (the README's epsilon-1.19 row is ``-n=15 --lr=.25
--sigma=1.3 -c=1.5``).

What differs from ``mnist.py``: ``make_private`` derives the sampling rate from the loader it is given and the
normaliser from the dataset's size, so the mechanism would follow the data; like ``examples/opacus_recipe.py`` this
recipe fixes both before seeing the data (a ``DPDataLoader`` at rate 0.004, a ``DPOptimizer`` dividing by the constant
240). The pixels are standardised by fixed constants (Fashion-MNIST's published mean and std), never by statistics of
the members.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

EPOCHS = int(os.environ.get("OPACUS_EXAMPLE_EPOCHS", "15"))
SIGMA = float(os.environ.get("OPACUS_EXAMPLE_SIGMA", "1.0"))
MAX_GRAD_NORM = float(os.environ.get("OPACUS_EXAMPLE_CLIP", "1.0"))
LR = float(os.environ.get("OPACUS_EXAMPLE_LR", "0.1"))
SAMPLE_RATE, EXPECTED_BATCH, DELTA = 0.004, 240, 1e-5
#: Fashion-MNIST's training-set pixel mean and std (fixed constants, as the example fixes MNIST's).
MEAN, STD = 0.2860, 0.3530


class SampleConvNet(nn.Module):
    """Opacus' MNIST example network: 28x28 grey images to 10 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 8, 2, padding=3)
        self.conv2 = nn.Conv2d(16, 32, 4, 2)
        self.fc1 = nn.Linear(32 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 1)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 1)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_net() -> nn.Module:
    """The model (no arguments: audit-training's ``--factory`` contract)."""
    return SampleConvNet()


def private_parts(model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[Any, Any, Any, Any]:
    """(the grad-sample module, the DP optimizer, the Poisson loader, the RDP accountant) of the recipe."""
    from opacus import GradSampleModule
    from opacus.accountants import RDPAccountant
    from opacus.data_loader import DPDataLoader
    from opacus.optimizers import DPOptimizer

    torch.manual_seed(seed)
    loader = DPDataLoader(TensorDataset((x - MEAN) / STD, y), sample_rate=SAMPLE_RATE,
                          generator=torch.Generator().manual_seed(seed))
    private = GradSampleModule(model)
    optimizer = DPOptimizer(torch.optim.SGD(private.parameters(), lr=LR, momentum=0), noise_multiplier=SIGMA,
                            max_grad_norm=MAX_GRAD_NORM, expected_batch_size=EXPECTED_BATCH)
    accountant = RDPAccountant()
    optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=SAMPLE_RATE))
    return private, optimizer, loader, accountant


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: int):
    """Train ``model`` in place for ``EPOCHS`` epochs (one optimizer step per Poisson batch, an empty one skipped);
    return Opacus' accountant."""
    private, optimizer, loader, accountant = private_parts(model, x, y, seed)
    for _ in range(EPOCHS):
        for xb, yb in loader:
            if len(xb):
                optimizer.zero_grad()
                F.cross_entropy(private(xb), yb).backward()
                optimizer.step()
    private._close()
    model.eval()
    return accountant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for members.npz")
    parser.add_argument("--data-dir", default=None, help="Fashion-MNIST's folder (default: privaudit's search)")
    args = parser.parse_args()
    from privaudit.core.datasets.registry import load_raw

    raw = load_raw("fashion-mnist", args.data_dir)
    train_rows = ~np.asarray(raw.is_test, dtype=bool)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "members.npz", x=(raw.images[train_rows] / 255.0).astype(np.float32),
             y=raw.labels[train_rows].astype(np.int64))
    print(f"wrote {out / 'members.npz'} ({int(train_rows.sum())} members)")


if __name__ == "__main__":
    main()
