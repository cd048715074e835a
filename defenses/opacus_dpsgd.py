"""``opacus-dpsgd``: a plain DP-SGD classifier trained with Opacus' ``PrivacyEngine`` (Abadi et al. 2016, Alg. 1).

Cross-entropy on encoder + linear head, Poisson sampling (each member joins a step's batch independently
with probability q = batch_size / n: Opacus' ``DPDataLoader``), per-example gradients clipped to
``max_grad_norm`` and Gaussian noise of std ``noise_multiplier x max_grad_norm`` added to their sum
(Opacus' ``DPOptimizer``). The noise comes from ``--noise-multiplier`` or, given a target epsilon, from
Opacus' own calibration with its ``accountant`` (``rdp`` or ``prv``) over ``epochs``.

The claim it emits is the mechanism Opacus runs: T = epochs x ceil(1/q) steps of the Poisson-subsampled
Gaussian at rate q, add/remove, per example (:func:`privaudit.accountants.sampled_gaussian.sampled_gaussian_claim`), so
every privaudit accountant reports its epsilon; Opacus' own epsilon for the same run is kept beside it
(``Trained.extras["opacus_epsilon"]``), the number an Opacus user would state. A step whose Poisson batch is
empty (probability (1 - q)^n per step, below 1e-20 at the quickstart's sizes) is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from privaudit.accountants.sampled_gaussian import sampled_gaussian_claim
from privaudit.core.datasets import MembershipData
from privaudit.core.errors import ConfigError, check_positive, one_of
from privaudit.defenses.base import Budget, Defense, Trained
from privaudit.defenses.nn.classifier import ClassifierNet
from privaudit.defenses.nn.model import ENCODERS, ModelSpec, build_model
from privaudit.defenses.training.seeding import derive_seed, torch_generator
from privaudit.defenses.supervised import _accuracy, build_head

OPACUS_ACCOUNTANTS = ("rdp", "prv")


@dataclass(frozen=True)
class OpacusDPSGDConfig:
    encoder: str = "mlp"
    width: int = 16
    rep_dim: int = 64
    epochs: int = 10
    batch_size: int = 64  # expected Poisson batch size: q = batch_size / n
    lr: float = 0.5
    momentum: float = 0.0
    max_grad_norm: float = 1.0
    accountant: str = "rdp"  # Opacus' accountant for calibration and its own epsilon
    # rows per backward pass (Opacus' BatchMemoryManager: the per-example gradients of at most this many rows are
    # held; the step is still one clipped, noised logical batch; the history's loss is then per physical batch);
    # 0: the whole Poisson batch at once
    max_physical_batch_size: int = 0

    def validate(self) -> None:
        if self.encoder not in ENCODERS:
            raise one_of("encoder", self.encoder, ENCODERS)
        if self.accountant not in OPACUS_ACCOUNTANTS:
            raise one_of("accountant", self.accountant, OPACUS_ACCOUNTANTS)
        for name in ("width", "rep_dim", "epochs", "batch_size", "lr", "max_grad_norm"):
            check_positive(name, getattr(self, name))
        check_positive("momentum", self.momentum, allow_zero=True)
        check_positive("max_physical_batch_size", self.max_physical_batch_size, allow_zero=True)


class OpacusDPSGD(Defense):
    """DP-SGD on a classifier through Opacus' PrivacyEngine (Poisson sampling, flat clipping, its accountant)."""

    name = "opacus-dpsgd"
    private = True
    Config = OpacusDPSGDConfig

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = False) -> Trained:
        from opacus import PrivacyEngine

        cfg = self.config
        if not budget.private:
            raise ConfigError("opacus-dpsgd: give --target-epsilon or --noise-multiplier")
        x, y = data.train.x, data.train.y
        n = len(x)
        if n < 2:
            raise ConfigError("opacus-dpsgd: the training set needs at least 2 examples")
        delta = budget.resolve_delta(n)
        batch = min(cfg.batch_size, n)
        info = data.info
        spec = ModelSpec(encoder=cfg.encoder, in_shape=info.shape, width=cfg.width, rep_dim=cfg.rep_dim)
        model = build_model(spec, seed=seed).to(device)
        head = build_head(spec.rep_dim, info.num_classes, seed).to(device)
        net = ClassifierNet(model.encoder, head)
        loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=False,
                            generator=torch_generator(seed, "batches"))
        optimizer = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        engine = PrivacyEngine(accountant=cfg.accountant)
        history: dict[str, list[float]] = {"loss": []}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "opacus"))
            common = dict(module=net, optimizer=optimizer, data_loader=loader, max_grad_norm=cfg.max_grad_norm,
                          poisson_sampling=True)
            if budget.noise_multiplier is not None:
                private, dp_opt, dp_loader = engine.make_private(noise_multiplier=budget.noise_multiplier, **common)
            else:
                private, dp_opt, dp_loader = engine.make_private_with_epsilon(
                    target_epsilon=budget.target_epsilon, target_delta=delta, epochs=cfg.epochs, **common)
            steps = _train(private, dp_opt, dp_loader, cfg.epochs, device, history, cfg.max_physical_batch_size)
            opacus_eps = float(engine.get_epsilon(delta))
            private._close()  # removes Opacus' hooks; ``net`` keeps the trained parameters
        z = float(dp_opt.noise_multiplier)
        q = float(dp_loader.sample_rate)
        claim = sampled_gaussian_claim(
            z, steps, delta, sample_rate=q, sampling="poisson", relation="add-remove",
            paper_accountant=cfg.accountant,
            source="Opacus PrivacyEngine DP-SGD (Poisson sampling, flat clipping)",
            notes=(f"Opacus' own {cfg.accountant} accountant states epsilon = {opacus_eps:.4g} "
                   f"at delta = {delta:.3g}",))
        model.eval()
        net.eval()
        with torch.no_grad():
            utility = {"train_accuracy": _accuracy(net, x, y, device),
                       "test_accuracy": _accuracy(net, data.test.x, data.test.y, device)}
        return Trained(self.name, model, spec, claim, history, self.config_dict(), seed, classifier=head,
                       extras={"utility": utility, "opacus_epsilon": opacus_eps, "noise_multiplier": z,
                               "sample_rate": q, "steps": steps})


def _train(private: torch.nn.Module, optimizer, loader, epochs: int, device, history: dict[str, list[float]],
           physical: int = 0) -> int:
    """Opacus' private training loop: mean cross-entropy on each Poisson batch; returns the steps taken
    (an empty batch is a step: the accountant counts it). With ``physical`` > 0 the batches are split into
    physical batches of at most that many rows (Opacus' ``BatchMemoryManager``), the optimizer stepping once
    per logical batch."""
    if physical:
        from opacus.utils.batch_memory_manager import BatchMemoryManager

        with BatchMemoryManager(data_loader=loader, max_physical_batch_size=physical, optimizer=optimizer) as split:
            for _ in range(epochs):
                _epoch(private, optimizer, split, device, history)
        return epochs * len(loader)
    return sum(_epoch(private, optimizer, loader, device, history) for _ in range(epochs))


def _epoch(private: torch.nn.Module, optimizer, loader, device, history: dict[str, list[float]]) -> int:
    """One pass over ``loader``; returns its batches. An empty batch takes no optimizer step (under a
    ``BatchMemoryManager`` its end-of-batch signal is consumed instead, so the next batch's split is kept)."""
    batches = 0
    private.train()
    for xb, yb in loader:
        batches += 1
        if len(xb) == 0:
            if getattr(optimizer, "_step_skip_queue", None):
                optimizer._check_skip_next_step()
            continue
        optimizer.zero_grad()
        loss = F.cross_entropy(private(xb.to(device)), yb.to(device))
        loss.backward()
        optimizer.step()
        history["loss"].append(loss.item())
    return batches
