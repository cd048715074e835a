"""A DP reference target for the attack tests: the supervised MLP classifier trained with Opacus DP-SGD.

Test scaffolding only, not a privaudit defense: the project's own DP-SGD engine and ``dpsgd``
defense are built elsewhere; until they land, this gives the attack tests a model that is genuinely
(eps, delta)-DP (Opacus: Poisson sampling, per-sample clipping, Gaussian noise calibrated by its RDP
accountant) to contrast with the deliberately overfit non-private one. It is loaded by the attacks
as the plugin ``dp_reference:OpacusSupervised`` (tests/ is on pytest's path), which also shows that
shadow models are trained with any defense, registered or not, through the sequential fallback.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from accountants.claim import PrivacyClaim
from accountants.events import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from audit.datasets import MembershipData
from defenses.base import Budget, Defense, Trained
from defenses.nn.model import ModelSpec, build_model
from defenses.seeding import derive_seed
from defenses.supervised import ClassifierNet, build_head


@dataclass(frozen=True)
class OpacusSupervisedConfig:
    width: int = 16
    rep_dim: int = 64
    epochs: int = 30
    batch_size: int = 64
    lr: float = 0.5
    max_grad_norm: float = 1.0


class OpacusSupervised(Defense):
    name = "dp_reference:OpacusSupervised"
    private = True
    Config = OpacusSupervisedConfig

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device="cpu", progress=False) -> Trained:
        from opacus import PrivacyEngine

        cfg = self.config
        n = len(data.train)
        delta = budget.resolve_delta(n)
        spec = ModelSpec(encoder="mlp", in_shape=data.info.shape, width=cfg.width, rep_dim=cfg.rep_dim)
        model = build_model(spec, seed=seed)
        net = ClassifierNet(model.encoder, build_head(cfg.rep_dim, data.info.num_classes, seed))
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data.train.x, data.train.y),
                                             batch_size=cfg.batch_size)
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(derive_seed(seed, "opacus"))
            engine = PrivacyEngine(accountant="rdp")
            optimizer = torch.optim.SGD(net.parameters(), lr=cfg.lr)
            private_net, optimizer, loader = engine.make_private_with_epsilon(
                module=net, optimizer=optimizer, data_loader=loader, target_epsilon=budget.target_epsilon,
                target_delta=delta, epochs=cfg.epochs, max_grad_norm=cfg.max_grad_norm)
            losses = []
            for _ in range(cfg.epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    if len(x):
                        loss = F.cross_entropy(private_net(x), y)
                        loss.backward()
                        losses.append(float(loss))
                    optimizer.step()
        q = cfg.batch_size / n
        steps = cfg.epochs * len(loader)
        event = SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(optimizer.noise_multiplier)), steps)
        claim = PrivacyClaim(event, "add-remove", "example", delta, paper_accountant="rdp", sampler="poisson",
                             source="Opacus DP-SGD (test reference)")
        model.eval()
        return Trained(self.name, model, spec, claim, {"loss": losses}, {"epochs": cfg.epochs}, seed,
                       classifier=net.head, extras={"epsilon_spent": engine.get_epsilon(delta)})
