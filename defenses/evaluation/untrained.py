"""The floors a trained encoder is set beside: an encoder that never saw the data, and the raw pixels.

``untrained`` returns the seeded initialisation of an architecture (DP-GCL Table 1's "Base": "a randomly
initialized network" not trained on the private data), or with ``encoder = "pixels"`` the identity map on the
flattened pixels. Neither reads the training set, so the claim is the no-op event: epsilon 0 under every
accountant. Its probe and k-NN accuracy are measured as any encoder's (:mod:`privaudit.defenses.evaluation.utility`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import NoOpDpEvent
from privaudit.core.datasets import DatasetInfo, MembershipData
from privaudit.core.errors import ConfigError
from privaudit.defenses.base import Budget, Defense, Trained
from privaudit.defenses.nn.model import ENCODERS, ModelSpec, build_model
from privaudit.defenses.training.training import EncoderFields, ObjectiveFields, validate_fields


@dataclass(frozen=True)
class UntrainedConfig(ObjectiveFields, EncoderFields):
    """The architecture (encoder and projection head) whose seeded initialisation is released."""

    def validate(self) -> None:
        validate_fields(self, choices=[("encoder", ENCODERS)], positive=("width", "rep_dim", "proj_dim", "pool"),
                        nonnegative=("proj_hidden",))

    def model_spec(self, info: DatasetInfo) -> ModelSpec:
        return self.encoder_spec(info, proj_hidden=self.proj_hidden, proj_dim=self.proj_dim)


class Untrained(Defense):
    """The seeded initialisation of an encoder (or the pixels themselves), released without training."""

    name = "untrained"
    private = False
    Config = UntrainedConfig

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = True) -> Trained:
        if budget.private:
            raise ConfigError(f"--target-epsilon/--noise-multiplier: defense {self.name!r} trains nothing; its "
                              "epsilon is 0")
        spec = self.config.model_spec(data.info)
        model = build_model(spec, seed=seed).to(device).eval()
        claim = PrivacyClaim(event=NoOpDpEvent(), relation="add-remove", unit="example", delta=0.0,
                             paper_accountant="none", source="untrained encoder: the training set is never read")
        return Trained(self.name, model, spec, claim, {"step": []}, self.config_dict(), seed)
