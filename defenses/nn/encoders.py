"""Encoders that work under ``torch.func`` (``functional_call``, ``vmap``, ``grad``).

No BatchNorm anywhere (it couples examples and breaks per-example gradients); convolutional nets use
GroupNorm and weight standardisation as DP training commonly does (Kolesnikov et al. 2020, De et al.
2022; DPCL Sec. 5.1 cites weight standardisation [47], DP-FedEmb App. uses GroupNorm). No in-place
activations (Opacus issue #828). Sizes are parameters, so the same code scales from 8x8 digits to
CIFAR-10 with ResNet-18.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class InputNorm(nn.Module):
    """Map pixels from [0, 1] to roughly [-1, 1]: ``(x - 0.5) / 0.5`` (a fixed affine map, no state)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - 0.5) * 2.0


class WSConv2d(nn.Conv2d):
    """Conv2d with weight standardisation (Qiao et al. 2019): each filter has zero mean, unit variance."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        w = (w - mean) / torch.sqrt(var + 1e-5)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


def group_norm(channels: int, groups: int) -> nn.GroupNorm:
    """GroupNorm with ``min(groups, channels)`` groups (falls back to a divisor of ``channels``)."""
    g = min(groups, channels)
    while channels % g:
        g -= 1
    return nn.GroupNorm(g, channels)


class MLPEncoder(nn.Module):
    """Flatten -> [Linear -> ReLU] x len(hidden) -> Linear(rep_dim)."""

    def __init__(self, in_shape: tuple[int, int, int], hidden: tuple[int, ...] = (256,), rep_dim: int = 64):
        super().__init__()
        dims = [in_shape[0] * in_shape[1] * in_shape[2], *hidden]
        layers: list[nn.Module] = [InputNorm(), nn.Flatten()]
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(dims[-1], rep_dim))
        self.net = nn.Sequential(*layers)
        self.rep_dim = rep_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """A small WS-conv + GroupNorm CNN for 8x8 to 28x28 grey images.

    ``len(widths)`` stages of [3x3 conv -> GN -> ReLU], stride 2 from the second stage on, then average
    pooling to ``pool`` x ``pool`` (1: global) and a linear map to ``rep_dim``. Global pooling of a 7 x 7 map
    (28 x 28 inputs) throws the layout away: on Fashion-MNIST a random width-8 encoder's linear probe
    scores 0.46 pooled to 1 x 1 and 0.64 pooled to 4 x 4 (raw pixels: 0.78).
    """

    def __init__(self, in_channels: int = 1, widths: tuple[int, ...] = (32, 64, 64), rep_dim: int = 64,
                 groups: int = 8, pool: int = 1):
        super().__init__()
        layers: list[nn.Module] = [InputNorm()]
        prev = in_channels
        for i, w in enumerate(widths):
            layers += [WSConv2d(prev, w, 3, stride=1 if i == 0 else 2, padding=1), group_norm(w, groups), nn.ReLU()]
            prev = w
        layers += [nn.AdaptiveAvgPool2d(pool), nn.Flatten(), nn.Linear(prev * pool * pool, rep_dim)]
        self.net = nn.Sequential(*layers)
        self.rep_dim = rep_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class PixelEncoder(nn.Module):
    """The identity on the pixels, flattened: the raw-pixel floor a trained encoder is set beside (no parameters)."""

    def __init__(self, in_shape: tuple[int, int, int]):
        super().__init__()
        self.flatten = nn.Flatten()
        self.rep_dim = in_shape[0] * in_shape[1] * in_shape[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.flatten(x)


class TanhCNN(nn.Module):
    """Tramer & Boneh's end-to-end CNN for 28 x 28 grey images (2021, Table 9; their ``MNIST_CNN``).

    conv 8x8 stride 2 (``width`` channels) -> tanh -> max-pool 2 stride 1 -> conv 4x4 stride 2 (2 ``width``)
    -> tanh -> max-pool 2 stride 1 -> linear (``rep_dim``, 32 in the paper) -> tanh; a classifier puts its
    linear head on top. Tanh, not ReLU: bounded activations keep DP-SGD's clipped gradients informative (their
    Sec. 3.2 and Papernot et al. 2021). No normalisation layer (per-example gradients stay separable).
    """

    def __init__(self, in_shape: tuple[int, int, int] = (1, 28, 28), width: int = 16, rep_dim: int = 32):
        super().__init__()
        side = ((in_shape[1] + 4 - 8) // 2 + 1 - 1 - 4) // 2 + 1 - 1  # conv 8/2 pad 2, pool, conv 4/2, pool
        if side < 1:
            raise ValueError(f"TanhCNN needs images of at least 16 x 16 pixels, got {in_shape[1]} x {in_shape[2]}")
        self.net = nn.Sequential(
            InputNorm(), nn.Conv2d(in_shape[0], width, 8, stride=2, padding=2), nn.Tanh(), nn.MaxPool2d(2, 1),
            nn.Conv2d(width, 2 * width, 4, stride=2), nn.Tanh(), nn.MaxPool2d(2, 1), nn.Flatten(),
            nn.Linear(2 * width * side * side, rep_dim), nn.Tanh())
        self.rep_dim = rep_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class EmbeddingNet(nn.Module):
    """Logit-DP's generic embedding net (App. B.1): three 3x3 stride-2 convolutions (``width``, 2 and 4 ``width``
    channels: 8, 16, 32 in the paper) with ReLU and Kaiming-normal kernels, then a linear embedding (``rep_dim``, 8
    in the paper) with a Xavier-normal kernel. No projection head: the contrastive loss acts on this embedding."""

    def __init__(self, in_shape: tuple[int, int, int], width: int = 8, rep_dim: int = 8):
        super().__init__()
        layers: list[nn.Module] = [InputNorm()]
        prev, side = in_shape[0], in_shape[1]
        for w in (width, 2 * width, 4 * width):
            conv = nn.Conv2d(prev, w, 3, stride=2, padding=1)
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
            nn.init.zeros_(conv.bias)
            layers += [conv, nn.ReLU()]
            prev, side = w, (side + 1) // 2
        embedding = nn.Linear(prev * side * side, rep_dim)
        nn.init.xavier_normal_(embedding.weight)
        nn.init.zeros_(embedding.bias)
        self.net = nn.Sequential(*layers, nn.Flatten(), embedding)
        self.rep_dim = rep_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BasicBlock(nn.Module):
    """ResNet basic block with WS-conv and GroupNorm (no in-place ops)."""

    def __init__(self, cin: int, cout: int, stride: int, groups: int):
        super().__init__()
        self.conv1 = WSConv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.gn1 = group_norm(cout, groups)
        self.conv2 = WSConv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.gn2 = group_norm(cout, groups)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(WSConv2d(cin, cout, 1, stride=stride, bias=False), group_norm(cout, groups))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18GN(nn.Module):
    """CIFAR ResNet-18 (3x3 stem, no max-pool) with GroupNorm and weight standardisation.

    ``width`` is the first stage's channel count (64 in the standard network); the representation is
    the globally pooled last stage (``8 * width`` features), followed by an optional linear map.
    """

    def __init__(self, in_channels: int = 3, width: int = 64, rep_dim: int | None = None, groups: int = 32,
                 blocks: tuple[int, int, int, int] = (2, 2, 2, 2)):
        super().__init__()
        self.stem = nn.Sequential(InputNorm(), WSConv2d(in_channels, width, 3, padding=1, bias=False),
                                  group_norm(width, groups), nn.ReLU())
        stages = []
        cin = width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            for j in range(n):
                stages.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1, groups))
                cin = cout
        self.stages = nn.Sequential(*stages)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc: nn.Module = nn.Identity() if rep_dim is None else nn.Linear(cin, rep_dim)
        self.rep_dim = cin if rep_dim is None else rep_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.stages(self.stem(x))))


class ProjectionHead(nn.Module):
    """SimCLR's projection head g: Linear -> ReLU -> Linear (Chen et al. 2020; DPCL Sec. 3.2)."""

    def __init__(self, in_dim: int, hidden: int = 128, out_dim: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.net(h)
