"""The contrastive model (encoder f + projection head g) and its JSON-able specification."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from privaudit.core.errors import ConfigError, check_positive, one_of
from privaudit.defenses.nn.encoders import (EmbeddingNet, MLPEncoder, PixelEncoder, ProjectionHead, ResNet18GN,
                                            SmallCNN, TanhCNN)

#: ``pixels``: the identity (the raw-pixel floor, no parameters); ``tanh-cnn``: Tramer & Boneh's end-to-end CNN;
#: ``embed-net``: Logit-DP's generic embedding net (use it with ``proj_hidden = 0``: no projection head).
ENCODERS = ("mlp", "cnn", "resnet18", "pixels", "tanh-cnn", "embed-net")


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to rebuild a model: architecture, sizes and whether z is L2-normalised.

    ``width`` scales the encoder (hidden units of the MLP, first-stage channels of the CNN/ResNet).
    ``proj_hidden = 0``: no projection head (z is the representation, L2-normalised when ``normalize``).
    """

    encoder: str = "cnn"
    in_shape: tuple[int, int, int] = (1, 8, 8)
    width: int = 32
    rep_dim: int = 64
    pool: int = 1  # CNN: side of the final average pooling (1: global); larger images keep their layout
    proj_hidden: int = 128
    proj_dim: int = 32
    normalize: bool = True
    groups: int = 8
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.encoder not in ENCODERS:
            raise one_of("encoder", self.encoder, ENCODERS)
        for name in ("width", "rep_dim", "proj_dim", "groups", "pool"):
            check_positive(name, getattr(self, name))
        check_positive("proj_hidden", self.proj_hidden, allow_zero=True)
        if self.pool != 1 and self.encoder != "cnn":
            raise ConfigError(f"pool: only the cnn encoder pools to a grid; got pool = {self.pool} with encoder "
                              f"{self.encoder!r} (use 1)")
        if len(self.in_shape) != 3:
            raise ConfigError(f"in_shape: expected (C, H, W), got {self.in_shape!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["in_shape"] = list(self.in_shape)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelSpec":
        d = dict(d)
        d["in_shape"] = tuple(d["in_shape"])
        return cls(**d)


class ContrastiveModel(nn.Module):
    """Encoder f (representation h) followed by projection head g (embedding z, L2-normalised).

    ``forward`` returns z, the quantity contrastive losses act on; ``represent`` returns h, the
    features used downstream (k-NN, linear probe, attacks on embeddings).
    """

    def __init__(self, encoder: nn.Module, projector: nn.Module, normalize: bool = True):
        super().__init__()
        self.encoder = encoder
        self.projector = projector
        self.normalize = normalize

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        z = self.projector(h)
        return F.normalize(z, dim=-1) if self.normalize else z

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(self.represent(x))


def build_encoder(spec: ModelSpec) -> nn.Module:
    c, h, w = spec.in_shape
    if spec.encoder == "mlp":
        return MLPEncoder(spec.in_shape, hidden=(spec.width * 8, spec.width * 4), rep_dim=spec.rep_dim)
    if spec.encoder == "cnn":
        return SmallCNN(c, widths=(spec.width, spec.width * 2, spec.width * 2), rep_dim=spec.rep_dim,
                        groups=spec.groups, pool=spec.pool)
    if spec.encoder == "resnet18":
        return ResNet18GN(c, width=spec.width, rep_dim=spec.rep_dim, groups=spec.groups)
    if spec.encoder == "pixels":
        return PixelEncoder(spec.in_shape)
    if spec.encoder == "tanh-cnn":
        return TanhCNN(spec.in_shape, width=spec.width, rep_dim=spec.rep_dim)
    if spec.encoder == "embed-net":
        return EmbeddingNet(spec.in_shape, width=spec.width, rep_dim=spec.rep_dim)
    raise one_of("encoder", spec.encoder, ENCODERS)


def build_model(spec: ModelSpec, seed: int | None = None) -> ContrastiveModel:
    """Build (and, with ``seed``, deterministically initialise) the model described by ``spec``."""
    spec.validate()
    if seed is not None:
        from privaudit.defenses.training.seeding import derive_seed

        state = torch.random.get_rng_state()
        # The CPU generator the layers initialise from (the same state torch.manual_seed sets for it;
        # torch.manual_seed itself also reseeds accelerators and costs ~2 ms per call on CPU).
        torch.default_generator.manual_seed(derive_seed(seed, "init"))
    try:
        encoder = build_encoder(spec)
        projector = (nn.Identity() if spec.proj_hidden == 0
                     else ProjectionHead(encoder.rep_dim, spec.proj_hidden, spec.proj_dim))
        model = ContrastiveModel(encoder, projector, normalize=spec.normalize)
    finally:
        if seed is not None:
            torch.random.set_rng_state(state)
    return model
