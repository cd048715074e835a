"""An Opacus user's model, trained on their own split, ready for ``privaudit audit-model``.

    python examples/opacus_audit.py --out my-audit        # writes the four files below

What a user of Opacus has after training, on scikit-learn's digits (64 pixel features in [0, 1], 10 classes):

* ``members.npz`` / ``nonmembers.npz`` (arrays ``x``, ``y``): the user's own split, each example in the training
  set by a fair coin (the design the one-run bound needs);
* ``net.pt``: the trained ``make_net()``'s state_dict: DP-SGD through Opacus' ``PrivacyEngine``, its noise
  calibrated by Opacus to epsilon 8 at delta 1e-5 (Poisson sampling, RDP accountant);
* ``accountant.pt``: ``torch.save(engine.accountant.state_dict())``, Opacus' record of the noise it says it
  added: the claim.

``train`` is the training function privaudit calls for its canary runs (the same recipe, on the data privaudit
gives it). ``OPACUS_AUDIT_NOISE_SCALE=0.1`` plants a bug: the optimizer adds a tenth of the noise while Opacus'
accountant records the calibrated noise, so the saved claim says epsilon 8 and the model is far less private.
Set it for both this script and ``privaudit audit-model`` (privaudit imports ``train`` from this module).
``OPACUS_AUDIT_EPOCHS`` changes the recipe's epochs (the tests' reduced flow), ``OPACUS_AUDIT_EPSILON`` the epsilon
its noise is calibrated to (default 8).
"""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

TARGET_EPSILON, DELTA = float(os.environ.get("OPACUS_AUDIT_EPSILON", "8")), 1e-5
EPOCHS = int(os.environ.get("OPACUS_AUDIT_EPOCHS", "15"))
BATCH_SIZE, LR, MAX_GRAD_NORM = 64, 0.5, 1.0
NOISE_SCALE = float(os.environ.get("OPACUS_AUDIT_NOISE_SCALE", "1"))


def make_net() -> nn.Module:
    """The user's model: an MLP on the 64 pixel features."""
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def _scaled_noise(optimizer) -> None:
    """The planted bug (NOISE_SCALE != 1): noise std scaled only while it is drawn, so the accountant's step hook,
    which reads the optimizer's noise multiplier afterwards, records the calibrated value."""
    add_noise = optimizer.add_noise

    def buggy() -> None:
        optimizer.noise_multiplier *= NOISE_SCALE
        try:
            add_noise()
        finally:
            optimizer.noise_multiplier /= NOISE_SCALE
    optimizer.add_noise = buggy


@functools.lru_cache(maxsize=None)
def noise_multiplier(sample_rate: float) -> float:
    """Opacus' calibration to epsilon 8 at this sample rate (what ``make_private_with_epsilon`` does), once."""
    from opacus.accountants.utils import get_noise_multiplier

    return get_noise_multiplier(target_epsilon=TARGET_EPSILON, target_delta=DELTA, sample_rate=sample_rate,
                                epochs=EPOCHS, accountant="rdp")


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: int):
    """Train ``model`` in place with Opacus at epsilon 8 (the recipe); return Opacus' accountant."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    engine = PrivacyEngine(accountant="rdp")
    loader = DataLoader(TensorDataset(x, y), batch_size=min(BATCH_SIZE, len(x)))
    private, optimizer, batches = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR), data_loader=loader,
        noise_multiplier=noise_multiplier(1 / len(loader)), max_grad_norm=MAX_GRAD_NORM, poisson_sampling=True)
    if NOISE_SCALE != 1:
        _scaled_noise(optimizer)
    for _ in range(EPOCHS):
        for xb, yb in batches:
            if len(xb):  # an empty Poisson batch (probability (1 - q)^n, below 1e-20 here) is skipped
                optimizer.zero_grad()
                F.cross_entropy(private(xb), yb).backward()
                optimizer.step()
    private._close()  # remove Opacus' hooks; ``model`` keeps the trained weights
    model.eval()
    return engine.accountant


def user_split(seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The user's 50/50 split of digits: each example a member by an independent fair coin."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    inside = np.random.default_rng(seed).random(len(y)) < 0.5
    return {"x": x[inside], "y": y[inside]}, {"x": x[~inside], "y": y[~inside]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for members.npz, nonmembers.npz, net.pt, "
                                                     "accountant.pt")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    members, nonmembers = user_split()
    np.savez(out / "members.npz", **members)
    np.savez(out / "nonmembers.npz", **nonmembers)
    torch.manual_seed(0)
    net = make_net()
    accountant = train(net, torch.from_numpy(members["x"]), torch.from_numpy(members["y"]), seed=0)
    torch.save(net.state_dict(), out / "net.pt")
    torch.save(accountant.state_dict(), out / "accountant.pt")
    print(f"trained on {len(members['y'])} members; Opacus states epsilon {accountant.get_epsilon(DELTA):.3f} at "
          f"delta {DELTA:g}" + (f" (the optimizer added {NOISE_SCALE:g} x that noise)" if NOISE_SCALE != 1 else ""))


if __name__ == "__main__":
    main()
