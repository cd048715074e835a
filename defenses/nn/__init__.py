"""Neural network building blocks: encoders, projection head, the contrastive model."""

from privaudit.defenses.nn.encoders import MLPEncoder, ProjectionHead, ResNet18GN, SmallCNN, WSConv2d
from privaudit.defenses.nn.model import ENCODERS, ContrastiveModel, ModelSpec, build_encoder, build_model

__all__ = ["ENCODERS", "ContrastiveModel", "MLPEncoder", "ModelSpec", "ProjectionHead", "ResNet18GN",
           "SmallCNN", "WSConv2d", "build_encoder", "build_model"]
