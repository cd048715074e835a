"""K copies of a small network evaluated as one wider network ("folding" the model axis into channels).

``torch.func.vmap`` over stacked parameters is general but, on CPU, its batching rules for
``group_norm`` and convolutions with batched weights add copies that make K small CNNs *slower* than
K separate ones. For the layer types privaudit's encoders are built from, the K models are exactly
one network of K times the width with block-diagonal structure:

* convolution: one grouped convolution with ``groups = K`` on activations laid out (B, K*C, H, W);
* GroupNorm with G groups per model: one GroupNorm with K*G groups (per-model statistics, exactly);
* weight-standardised convolution: each model's filters standardised separately, then as above;
* linear layers: one batched matrix product on activations laid out (K, B, D);
* elementwise layers, global average pooling and flattening: layout changes only.

:func:`batched_forward` returns the folded forward pass when every module of the network is one of
these (MLP and small CNN encoders, projection heads, linear classifiers), else the vmapped one; both
take stacked parameters and inputs (K, B, ...) and return (K, B, ...). Tests check the two agree.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, vmap

from privaudit.defenses.nn.classifier import ClassifierNet
from privaudit.defenses.nn.encoders import InputNorm, MLPEncoder, ProjectionHead, SmallCNN, WSConv2d
from privaudit.defenses.nn.model import ContrastiveModel

Params = dict[str, torch.Tensor]
Forward = Callable[[Params, Params, torch.Tensor], torch.Tensor]

_ELEMENTWISE = (nn.ReLU, InputNorm, nn.Identity)


def _wrappers() -> dict[type, tuple[str, ...]]:
    """Modules whose forward is their children applied in this order (attribute names)."""
    return {MLPEncoder: ("net",), SmallCNN: ("net",), ProjectionHead: ("net",), ClassifierNet: ("encoder", "head")}


def can_fold(module: nn.Module) -> bool:
    """True when every submodule is a layer :func:`folded_forward` implements exactly."""
    wrappers = _wrappers()

    def ok(m: nn.Module) -> bool:
        if type(m) is ContrastiveModel:
            return ok(m.encoder) and ok(m.projector)
        if type(m) in wrappers:
            return all(ok(getattr(m, name)) for name in wrappers[type(m)])
        if type(m) is nn.Sequential:
            return all(ok(c) for c in m)
        if type(m) in (nn.Conv2d, WSConv2d):
            return m.groups == 1 and m.padding_mode == "zeros" and isinstance(m.padding, tuple)
        if type(m) is nn.AdaptiveAvgPool2d:
            return m.output_size in (1, (1, 1))
        if type(m) is nn.Flatten:
            return m.start_dim == 1 and m.end_dim == -1
        return type(m) in (nn.GroupNorm, nn.Linear) or isinstance(m, _ELEMENTWISE)

    return ok(module)


class _State:
    """An activation of K models, in one of two layouts: ``stacked`` (K, B, ...) or ``channels`` (B, K*C, H, W)."""

    def __init__(self, x: torch.Tensor, k: int):
        self.x, self.k, self.layout = x, k, "stacked"

    def channels(self) -> torch.Tensor:
        if self.layout == "stacked":
            k, b = self.x.shape[:2]
            self.x = self.x.transpose(0, 1).reshape(b, k * self.x.shape[2], *self.x.shape[3:])
            self.x = self.x.contiguous(memory_format=torch.channels_last)
            self.layout = "channels"
        return self.x

    def stacked(self) -> torch.Tensor:
        if self.layout == "channels":
            b, kc = self.x.shape[:2]
            self.x = self.x.reshape(b, self.k, kc // self.k, *self.x.shape[2:]).transpose(0, 1)
            self.layout = "stacked"
        return self.x


def _apply(m: nn.Module, prefix: str, p: Params, s: _State) -> None:
    k = s.k
    if type(m) is ContrastiveModel:
        _apply(m.encoder, prefix + "encoder.", p, s)
        _apply(m.projector, prefix + "projector.", p, s)
        if m.normalize:
            s.x = F.normalize(s.stacked(), dim=-1)
        return
    wrappers = _wrappers()
    if type(m) in wrappers:
        for name in wrappers[type(m)]:
            _apply(getattr(m, name), f"{prefix}{name}.", p, s)
        return
    if type(m) is nn.Sequential:
        for i, child in enumerate(m):
            _apply(child, f"{prefix}{i}.", p, s)
        return
    if isinstance(m, _ELEMENTWISE):
        s.x = m(s.x)
        return
    if type(m) in (nn.Conv2d, WSConv2d):
        w = p[prefix + "weight"]  # (K, O, C, kh, kw)
        if type(m) is WSConv2d:
            mean = w.mean(dim=(2, 3, 4), keepdim=True)
            var = w.var(dim=(2, 3, 4), keepdim=True, unbiased=False)
            w = (w - mean) / torch.sqrt(var + 1e-5)
        bias = p.get(prefix + "bias")
        w = w.reshape(-1, *w.shape[2:]).contiguous(memory_format=torch.channels_last)
        s.x = F.conv2d(s.channels(), w, None if bias is None else bias.reshape(-1),
                       m.stride, m.padding, m.dilation, groups=k)
        return
    if type(m) is nn.GroupNorm:
        weight, bias = p.get(prefix + "weight"), p.get(prefix + "bias")
        # GroupNorm's CPU kernel is ~10x slower on channels-last activations (forward and backward):
        # normalise in the contiguous layout, hand channels-last back to the grouped convolutions.
        x = s.channels()
        y = F.group_norm(x.contiguous(), k * m.num_groups, None if weight is None else weight.reshape(-1),
                         None if bias is None else bias.reshape(-1), m.eps)
        s.x = y.contiguous(memory_format=torch.channels_last) if x.is_contiguous(
            memory_format=torch.channels_last) else y
        return
    if type(m) is nn.AdaptiveAvgPool2d:
        s.x = s.channels().mean(dim=(2, 3), keepdim=True)
        return
    if type(m) is nn.Flatten:
        x = s.stacked()
        s.x = x.reshape(x.shape[0], x.shape[1], -1)
        return
    if type(m) is nn.Linear:
        x = s.stacked()  # (K, B, D)
        w = p[prefix + "weight"]  # (K, O, D)
        bias = p.get(prefix + "bias")
        s.x = torch.bmm(x, w.transpose(1, 2)) if bias is None else torch.baddbmm(bias.unsqueeze(1), x, w.transpose(1, 2))
        return
    raise TypeError(f"cannot fold module {type(m).__name__}")


def folded_forward(base: nn.Module) -> Forward:
    """The forward pass of K stacked copies of ``base`` as one wide network (see the module docstring)."""
    def forward(params: Params, buffers: Params, x: torch.Tensor) -> torch.Tensor:
        s = _State(x, x.shape[0])
        _apply(base, "", params, s)
        return s.stacked()

    return forward


def vmapped_forward(base: nn.Module) -> Forward:
    """The forward pass of K stacked copies of ``base`` with ``vmap(functional_call)`` (any module)."""
    def one(params: Params, buffers: Params, x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (params, buffers), (x,))

    return vmap(one)


def batched_forward(base: nn.Module, fold: bool = True) -> Forward:
    """Folded when every layer supports it (and ``fold``), else vmapped."""
    return folded_forward(base) if fold and can_fold(base) else vmapped_forward(base)
