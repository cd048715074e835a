"""An honest Opacus recipe for ``privaudit audit-training``: DP-SGD on digits whose mechanism does not depend on the data.

    privaudit audit-training --factory opacus_recipe:make_net --train-fn opacus_recipe:train \
        --members members.npz --delta 1e-5 --out audit/

``make_private`` derives its sampling rate (1 / len(data_loader)) and its normaliser (``expected_batch_size =
int(len(dataset) * sample_rate)``) from the data it is given, so the released mechanism changes with the dataset's
size. This recipe fixes both before seeing the data, at Opacus' own lower level: a ``DPDataLoader`` at a fixed
Poisson rate ``SAMPLE_RATE`` (``1 / SAMPLE_RATE`` batches an epoch, whatever the size), a ``DPOptimizer`` dividing by
the constant ``EXPECTED_BATCH``, and Opacus' RDP accountant attached to its steps, its noise calibrated by Opacus to
``OPACUS_RECIPE_EPSILON`` (default 8) at delta 1e-5 over ``OPACUS_RECIPE_EPOCHS`` (default 15) epochs; the MLP has
``OPACUS_RECIPE_HIDDEN`` (default 128) hidden units.

``python examples/opacus_recipe.py --out DIR`` writes the members (``members.npz``: digits, each example in by a fair
coin) for the command above.
"""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

TARGET_EPSILON, DELTA = float(os.environ.get("OPACUS_RECIPE_EPSILON", "8")), 1e-5
EPOCHS = int(os.environ.get("OPACUS_RECIPE_EPOCHS", "15"))
HIDDEN = int(os.environ.get("OPACUS_RECIPE_HIDDEN", "128"))
SAMPLE_RATE, EXPECTED_BATCH, LR, MAX_GRAD_NORM = 1 / 14, 64, 0.5, 1.0


def make_net() -> nn.Module:
    """The model: an MLP on the 64 pixel features, ``OPACUS_RECIPE_HIDDEN`` (default 128) hidden units."""
    return nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))


@functools.lru_cache(maxsize=None)
def noise_multiplier() -> float:
    """Opacus' calibration to the target epsilon at the fixed rate and steps (no data read)."""
    from opacus.accountants.utils import get_noise_multiplier

    return get_noise_multiplier(target_epsilon=TARGET_EPSILON, target_delta=DELTA, sample_rate=SAMPLE_RATE,
                                steps=EPOCHS * int(1 / SAMPLE_RATE), accountant="rdp")


def private_parts(model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int) -> tuple[Any, Any, Any, Any]:
    """(the grad-sample module, the DP optimizer, the Poisson loader, the RDP accountant) of the recipe."""
    from opacus import GradSampleModule
    from opacus.accountants import RDPAccountant
    from opacus.data_loader import DPDataLoader
    from opacus.optimizers import DPOptimizer

    torch.manual_seed(seed)
    loader = DPDataLoader(TensorDataset(x, y), sample_rate=SAMPLE_RATE,
                          generator=torch.Generator().manual_seed(seed))
    private = GradSampleModule(model)
    optimizer = DPOptimizer(torch.optim.SGD(private.parameters(), lr=LR), noise_multiplier=noise_multiplier(),
                            max_grad_norm=MAX_GRAD_NORM, expected_batch_size=EXPECTED_BATCH)
    accountant = RDPAccountant()
    optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=SAMPLE_RATE))
    return private, optimizer, loader, accountant


def fit(private: Any, optimizer: Any, batches: Any) -> None:
    """The training loop: cross-entropy, one optimizer step per Poisson batch (an empty batch is skipped)."""
    for _ in range(EPOCHS):
        for xb, yb in batches:
            if len(xb):
                optimizer.zero_grad()
                F.cross_entropy(private(xb), yb).backward()
                optimizer.step()


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: int):
    """Train ``model`` in place (the recipe); return Opacus' accountant."""
    private, optimizer, loader, accountant = private_parts(model, x, y, seed)
    fit(private, optimizer, loader)
    private._close()
    model.eval()
    return accountant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for members.npz")
    args = parser.parse_args()
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    inside = np.random.default_rng(0).random(len(y)) < 0.5
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "members.npz", x=x[inside], y=y[inside])
    print(f"wrote {out / 'members.npz'} ({int(inside.sum())} members)")


if __name__ == "__main__":
    main()
