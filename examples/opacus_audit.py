"""Audit a model you trained with Opacus: your claimed epsilon beside privaudit's accountants and a measured
lower bound.

    python examples/opacus_audit.py            # about a minute per reference model on one CPU core
    OPACUS_AUDIT_TINY=1 python examples/opacus_audit.py --json    # the test's tiny size

What it does, as an Opacus user would:

1. trains ``make_net()`` on the members of privaudit's membership split of digits (seed 0) with Opacus'
   ``PrivacyEngine.make_private_with_epsilon`` (Poisson sampling, RDP accountant): the epsilon Opacus
   reports is the user's claim;
2. states the mechanism Opacus ran (noise multiplier, sample rate, steps) as a privaudit claim and reports
   its epsilon under every applicable accountant (RDP, PLD, PRV, ...);
3. audits the trained weights with ``privaudit.audit_model``: the LOSS attack and LiRA, whose reference
   models are built by the same factory and trained by the same Opacus function (``train``), each with a
   sound one-run lower bound on epsilon (the split's members were chosen by fair coins).

A lower bound above the claimed epsilon would mean the training leaks more than it claims; below it, the
claim is not refuted (a DP model at these sizes is expected far below).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import privaudit

TINY = os.environ.get("OPACUS_AUDIT_TINY") == "1"
TARGET_EPSILON = 8.0
DELTA = 1e-5
EPOCHS = 1 if TINY else 15
BATCH_SIZE = 64
MAX_GRAD_NORM = 1.0
LR = 0.5
REFERENCE_MODELS = 4 if TINY else 16
DATASET, SEED = "digits", 0


def make_net() -> nn.Module:
    """The user's model: an MLP for 8x8 digits."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def train_private(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: int) -> dict[str, float]:
    """Train ``model`` in place with Opacus to TARGET_EPSILON; return what Opacus ran and the epsilon it states."""
    from opacus import PrivacyEngine

    torch.manual_seed(seed)
    delta = DELTA
    loader = DataLoader(TensorDataset(x, y), batch_size=min(BATCH_SIZE, len(x)))
    engine = PrivacyEngine(accountant="rdp")
    private, optimizer, dp_loader = engine.make_private_with_epsilon(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR), data_loader=loader,
        target_epsilon=TARGET_EPSILON, target_delta=delta, epochs=EPOCHS, max_grad_norm=MAX_GRAD_NORM)
    steps = 0
    for _ in range(EPOCHS):
        for xb, yb in dp_loader:
            steps += 1
            if len(xb):
                optimizer.zero_grad()
                F.cross_entropy(private(xb), yb).backward()
                optimizer.step()
    epsilon = float(engine.get_epsilon(delta))
    private._close()  # remove Opacus' hooks; ``model`` keeps the trained weights
    model.eval()
    return {"epsilon": epsilon, "delta": delta, "noise_multiplier": float(optimizer.noise_multiplier),
            "sample_rate": float(dp_loader.sample_rate), "steps": steps}


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: int) -> None:
    """The training function privaudit calls for LiRA's reference models (same recipe as the target)."""
    train_private(model, x, y, seed=seed)


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(1)

    data = privaudit.load_dataset(DATASET, seed=SEED)
    net = make_net()
    run = train_private(net, data.train.x, data.train.y, seed=SEED)

    claim = privaudit.sampled_gaussian_claim(run["noise_multiplier"], run["steps"], run["delta"],
                                             sample_rate=run["sample_rate"], source="examples/opacus_audit.py")
    accountants = {name: r.epsilon for name, r in privaudit.all_epsilons(claim).items() if r.applicable}
    audit = privaudit.audit_model("opacus_audit:make_net", net.state_dict(), dataset=DATASET, seed=SEED,
                                  train_fn="opacus_audit:train", reference_models=REFERENCE_MODELS,
                                  delta=run["delta"])
    report = {"claimed_epsilon": run["epsilon"], "delta": run["delta"], "opacus": run,
              "privaudit_epsilon": accountants,
              "measured": {name: {"eps_lower_bound": s["eps_lower_bound"], "auc": s["auc"],
                                  "method": s["eps_lb_method"]} for name, s in audit.attacks.items()}}
    if args.json:
        print(json.dumps(report, indent=2))
        return report
    print(f"Opacus (your claim): epsilon = {run['epsilon']:.3f} at delta = {run['delta']:.3g} "
          f"(z = {run['noise_multiplier']:.3f}, q = {run['sample_rate']:.3f}, {run['steps']} steps)")
    for name, eps in accountants.items():
        print(f"privaudit {name:>8}: epsilon = {eps:.3f}")
    for name, m in report["measured"].items():
        print(f"measured by {name:>4}: epsilon >= {m['eps_lower_bound']:.3f} (AUC {m['auc']:.3f}; {m['method']})")
    return report


if __name__ == "__main__":
    main()
