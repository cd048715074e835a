"""Per-layer gradient rules: what the layerwise engine and the row Grams need from each layer type.

A layer's parameter gradient for one row r is a closed form of what one forward and backward pass
already hold: the layer's input a_r and the gradient b_r of the loss with respect to its output
(Goodfellow 2015; Opacus' grad samplers; Li et al. 2022 ghost clipping; Bu et al. 2023
"book-keeping", Algorithm 1):

* ``nn.Linear``: g = sum_r b_r a_r^T, bias sum_r b_r (over every position of a row's sequence);
* ``nn.Conv2d``: the same with the unfolded input patches, g = sum_r sum_l b_{r,l} unfold(a_r)_l^T;
  :class:`~privaudit.defenses.nn.encoders.WSConv2d` standardises each filter, w_hat = (w - mu) / sigma,
  a fixed map of the parameter, so its gradient is that map's VJP applied to the convolution's
  (:func:`ws_backward`);
* ``nn.GroupNorm``: weight gradient sum_l b_{r,c,l} x_hat_{r,c,l} with x_hat the normalised input,
  bias gradient sum_l b_{r,c,l}.

A :class:`LayerRule` holds one layer type's contractions in the shapes the engines ask for (per row,
per unit, per basis direction, per segment of rows, and the Gram pieces), and
:func:`register_layer_rule` records it for its module type, as Opacus' ``register_grad_sampler``
does. :func:`layer_rule` looks a module up by its exact type; a rule serves subclasses of its type
only where it says so (:attr:`LayerRule.serves_subclasses`), because a subclass may change
``forward`` (WSConv2d does) and a rule that does not know it would give wrong gradients. A layer with
trainable parameters and no rule makes the layerwise engine decline the model (the caller then uses
the ``vmap`` engine). Adding a layer type is adding one decorated rule.

Rules see a layer's own trainable parameters by their local names (``weight``, ``bias``) and return
gradients under the same names.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Mapping, Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from privaudit.defenses.nn.encoders import WSConv2d

Params = Mapping[str, torch.Tensor]  # a layer's own trainable parameters, by local name
Grads = dict[str, torch.Tensor]
Pull = Callable[[torch.Tensor], Grads]  # per-row cotangents (R, K) -> the layer's parameter gradients


class GramAccumulator(Protocol):
    """What a rule adds its row Grams to (:class:`privaudit.defenses.dp.engine.row_grams.Grams`); each method adds
    one kind of contribution for rows with inputs a and output gradients b (R, K, ...) and returns its
    pull-back of per-row cotangents."""

    def linear(self, params: Params, a: torch.Tensor, b: torch.Tensor) -> Pull: ...

    def conv_weight(self, mod: nn.Conv2d, w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, ws: bool) -> Pull: ...

    def materialised(self, rows: dict[str, torch.Tensor], params: Params) -> Pull: ...


class LayerRule(ABC):
    """One layer type's per-row gradient contractions; ``a`` is the layer input (R, ...), ``b`` the
    gradient with respect to its output, with the leading dimensions each method names."""

    #: parameters whose partition-unit gradients come from :meth:`segment_grads` (sums over segments of
    #: rows, no per-row gradient materialised); the others come from :meth:`row_grads`
    segmented: ClassVar[tuple[str, ...]] = ()
    #: whether :func:`layer_rule` may use this rule for subclasses of the registered type
    serves_subclasses: ClassVar[bool] = False
    #: how the partition engine gets this layer's unit gradients (for engine reports)
    summary: ClassVar[str] = "per-row gradients summed into units"

    def unsupported(self, mod: nn.Module, where: str) -> str | None:
        """Why this instance (at module path ``where``) has no per-row rule after all, or None."""
        return None

    @abstractmethod
    def row_grads(self, mod: nn.Module, params: Params, a: torch.Tensor, b: torch.Tensor) -> Grads:
        """Per-row gradients (R, *shape) of the parameters in ``params`` (none of them segmented); b (R, ...)."""

    def segment_grads(self, mod: nn.Module, params: Params, name: str, a: torch.Tensor, b: torch.Tensor,
                      index: torch.Tensor) -> torch.Tensor:
        """Gradients (S, *shape) of the segmented parameter ``name`` summed over the rows of each segment
        ``index`` (S, w); a or b carries an extra zero last row (the padding)."""
        raise TypeError(f"{type(mod).__name__}: no segment rule for {name!r}")

    @abstractmethod
    def unit_grads(self, mod: nn.Module, params: Params, a: torch.Tensor, b: torch.Tensor) -> Grads:
        """Per-unit gradients (U, *shape) for output gradients b (U, R, ...): sum over the rows."""

    @abstractmethod
    def basis_row_grads(self, mod: nn.Module, params: Params, a: torch.Tensor, b: torch.Tensor) -> Grads:
        """Per-row gradients (D, R, *shape) for output gradients b (D, R, ...) of D cotangent directions."""

    def parametrisation_vjp(self, mod: nn.Module, params: Params, name: str, g: torch.Tensor) -> torch.Tensor:
        """The gradient with respect to the parameter from gradients g (..., *shape) with respect to what the
        layer computes with (the identity unless the layer reparametrises, as weight standardisation does).
        Linear, so the engines apply it to sums of row gradients."""
        return g

    def cost(self, mod: nn.Module, out: torch.Tensor, rows: int) -> tuple[int, int]:
        """(output positions L, parameter columns k) of a call with output ``out`` for ``rows`` rows."""
        return max(1, out[:rows].numel() // (rows * out.shape[1])), 1

    def grams(self, acc: GramAccumulator, mod: nn.Module, params: Params, a: torch.Tensor, b: torch.Tensor) -> list[Pull]:
        """Add the layer's contribution to the row Grams (b (R, K, ...): K directions per row); return the
        pull-backs of per-row cotangents. Default: the Gram of the materialised per-row gradients."""
        rows = self.basis_row_grads(mod, params, a, b.transpose(0, 1))
        rows = {k: self.parametrisation_vjp(mod, params, k, v) for k, v in rows.items()}
        return [acc.materialised(rows, params)]


_RULES: dict[type[nn.Module], LayerRule] = {}


def register_layer_rule(*types: type[nn.Module]) -> Callable[[type[LayerRule]], type[LayerRule]]:
    """Class decorator: record an instance of the decorated :class:`LayerRule` for each module type."""

    def register(cls: type[LayerRule]) -> type[LayerRule]:
        for t in types:
            _RULES[t] = cls()
        return cls
    return register


def layer_rule(mod: nn.Module) -> LayerRule | None:
    """The rule for ``mod``: its exact type's, else the nearest registered base class's where that rule
    serves subclasses; None where there is none."""
    rule = _RULES.get(type(mod))
    if rule is not None:
        return rule
    for base in type(mod).__mro__[1:]:
        rule = _RULES.get(base)
        if rule is not None:
            return rule if rule.serves_subclasses else None
    return None


# -- shared pieces ---------------------------------------------------------------------------------

def conv_patches(mod: nn.Conv2d, a: torch.Tensor) -> torch.Tensor:
    """The unfolded input patches (R, in*k*k, L) of a convolution."""
    return F.unfold(a, mod.kernel_size, mod.dilation, mod.padding, mod.stride)


def ws_backward(w: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """VJP of weight standardisation w -> (w - mean) / sqrt(var + 1e-5) per filter, for gradients g (..., *w.shape).

    With w_hat = (w - mu) / sigma over a filter's f entries: (1 / sigma) (g - mean(g) - w_hat mean(g w_hat)).
    """
    wf = w.reshape(w.shape[0], -1)
    mean = wf.mean(1, keepdim=True)
    var = wf.var(1, keepdim=True, unbiased=False)
    inv = torch.rsqrt(var + 1e-5)
    w_hat = (wf - mean) * inv
    gf = g.reshape(*g.shape[:-w.dim()], w.shape[0], -1)
    along = (gf * w_hat).mean(-1, keepdim=True)
    out = gf - gf.mean(-1, keepdim=True)  # in place from here: g may be (units, *w.shape), the size of a model
    out.sub_(w_hat * along)
    out.mul_(inv)
    return out.reshape(g.shape)


def _gather_segments(a: torch.Tensor, b: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a and b gathered slot-major (element i * S + s is slot i of segment s). The unpadded tensor reads
    any row at the padding slots: the other one's zero row cancels them."""
    flat = index.T.reshape(-1)
    return (a.index_select(0, flat.clamp(max=a.shape[0] - 1)), b.index_select(0, flat.clamp(max=b.shape[0] - 1)))


# -- the rules -------------------------------------------------------------------------------------

@register_layer_rule(nn.Linear)
class LinearRule(LayerRule):
    """g = sum_r b_r a_r^T over every position of row r's input (R, ..., in); bias sum_r b_r."""

    segmented = ("weight",)
    summary = "weight: segment sums as one batched product; bias: per-row sums into units"

    def row_grads(self, mod, params, a, b):
        return {"bias": b.reshape(b.shape[0], -1, b.shape[-1]).sum(1)} if "bias" in params else {}

    def segment_grads(self, mod, params, name, a, b, index):
        s, w = index.shape
        ag, bg = _gather_segments(a, b, index)
        k, o = a.shape[-1], b.shape[-1]
        return torch.einsum("wspo,wspk->sok", bg.reshape(w, s, -1, o), ag.reshape(w, s, -1, k))

    def unit_grads(self, mod, params, a, b):
        a3 = a.reshape(a.shape[0], -1, a.shape[-1])
        b3 = b.reshape(*b.shape[:2], -1, b.shape[-1])
        out = {}
        if "weight" in params:
            out["weight"] = torch.einsum("urpo,rpi->uoi", b3, a3)
        if "bias" in params:
            out["bias"] = b3.sum((1, 2))
        return out

    def basis_row_grads(self, mod, params, a, b):
        d, r = b.shape[:2]
        a3 = a.reshape(r, -1, a.shape[-1])
        b3 = b.reshape(d, r, -1, b.shape[-1])
        out = {}
        if "weight" in params:
            out["weight"] = torch.matmul(b3.transpose(-1, -2), a3)
        if "bias" in params:
            out["bias"] = b3.sum(-2)
        return out

    def cost(self, mod, out, rows):
        return max(1, out[:rows].numel() // (rows * out.shape[-1])), mod.in_features

    def grams(self, acc, mod, params, a, b):
        if a.dim() != 2:  # a sequence of positions per row: the materialised Gram
            return super().grams(acc, mod, params, a, b)
        return [acc.linear(params, a, b)]


class ChannelRule(LayerRule):
    """A layer with output (N, C, ...) and a per-channel bias, bias gradient sum_l b_{r,c,l} over the output
    positions; subclasses give the weight's rules on b3, the output gradient with the positions flattened."""

    def row_grads(self, mod, params, a, b):
        b3 = b.reshape(b.shape[0], b.shape[1], -1)  # (R, C, positions)
        out = {}
        if "bias" in params:
            out["bias"] = b3.sum(-1)
        if "weight" in params:
            out["weight"] = self.row_weight(mod, a, b3)
        return out

    def unit_grads(self, mod, params, a, b):
        b3 = b.reshape(*b.shape[:3], -1)  # (U, R, C, positions)
        out = {}
        if "weight" in params:
            out["weight"] = self.unit_weight(mod, a, b3)
        if "bias" in params:
            out["bias"] = b3.sum((-1, -3))
        return out

    def basis_row_grads(self, mod, params, a, b):
        d, r = b.shape[:2]
        b3 = b.reshape(d, r, b.shape[2], -1)  # (D, R, C, positions)
        out = {}
        if "weight" in params:
            out["weight"] = self.basis_weight(mod, a, b3)
        if "bias" in params:
            out["bias"] = b3.sum(-1)
        return out

    def row_weight(self, mod: nn.Module, a: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
        """Per-row weight gradients (R, *shape) (only for a weight that is not segmented)."""
        raise TypeError(f"{type(mod).__name__}: no per-row weight rule")

    @abstractmethod
    def unit_weight(self, mod: nn.Module, a: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
        """Per-unit weight gradients (U, *shape) for b3 (U, R, C, positions)."""

    @abstractmethod
    def basis_weight(self, mod: nn.Module, a: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
        """Per-row weight gradients (D, R, *shape) for b3 (D, R, C, positions)."""


@register_layer_rule(nn.Conv2d)
class Conv2dRule(ChannelRule):
    """g = sum_r sum_l b_{r,l} unfold(a_r)_l^T (groups = 1, zero numeric padding); bias sum_{r,l} b_{r,l}."""

    segmented = ("weight",)
    standardised: ClassVar[bool] = False  # weight standardisation (WSConv2d)
    summary = "weight: segment sums as one grouped-convolution backward (a group per segment); bias: per-row sums"

    def unsupported(self, mod, where):
        if mod.groups != 1 or mod.padding_mode != "zeros" or isinstance(mod.padding, str):
            return f"{where} (Conv2d): only groups=1, zero, numeric padding is supported"
        return None

    def segment_grads(self, mod, params, name, a, b, index):
        """The weight gradient of a convolution with S groups over a batch of w: slot i of every segment
        forms batch element i, segment s's rows its channel group s (the grouped-convolution trick of
        Opacus' grad samplers, with the batch summed within a segment)."""
        s, w = index.shape
        ag, bg = _gather_segments(a, b, index)
        o, weight = b.shape[1], params["weight"]
        grads = torch.ops.aten.convolution_backward(
            bg.reshape(w, s * o, *bg.shape[2:]), ag.reshape(w, s * ag.shape[1], *ag.shape[2:]),
            weight.new_empty(s * o, *weight.shape[1:]), None, list(mod.stride), list(mod.padding),
            list(mod.dilation), False, [0, 0], s, [False, True, False])
        return grads[1].reshape(s, *weight.shape)

    def unit_weight(self, mod, a, b3):
        g = torch.einsum("urol,rkl->uok", b3, conv_patches(mod, a))
        return g.reshape(*g.shape[:-2], *mod.weight.shape)

    def basis_weight(self, mod, a, b3):
        d, r = b3.shape[:2]
        g = torch.matmul(b3, conv_patches(mod, a).transpose(1, 2))  # (D, R, out, in*k*k)
        return g.reshape(d, r, *mod.weight.shape)

    def cost(self, mod, out, rows):
        return max(1, out[:rows].numel() // (rows * out.shape[1])), mod.in_channels * math.prod(mod.kernel_size)

    def grams(self, acc, mod, params, a, b):
        """The weight by ghost products or materialised gradients (:meth:`Grams.conv_weight`), the bias
        by its materialised per-row gradients."""
        pulls = []
        if "weight" in params:
            pulls.append(acc.conv_weight(mod, params["weight"], a, b, self.standardised))
        rest = {k: v for k, v in params.items() if k != "weight"}
        if rest:
            pulls.extend(super().grams(acc, mod, rest, a, b))
        return pulls


@register_layer_rule(WSConv2d)
class WSConv2dRule(Conv2dRule):
    """A weight-standardised convolution: the convolution's rule, then the standardisation's VJP."""

    standardised = True
    summary = Conv2dRule.summary + "; then weight standardisation's VJP on the unit sums"

    def parametrisation_vjp(self, mod, params, name, g):
        return ws_backward(params["weight"], g) if name == "weight" else g


@register_layer_rule(nn.GroupNorm)
class GroupNormRule(ChannelRule):
    """Weight sum_l b_{r,c,l} x_hat_{r,c,l} (x_hat the normalised input), bias sum_l b_{r,c,l}."""

    summary = "per-row products with the normalised input, summed into units"

    def row_weight(self, mod, a, b3):
        x_hat = F.group_norm(a, mod.num_groups, None, None, mod.eps).reshape(b3.shape)
        return (b3 * x_hat).sum(-1)

    def unit_weight(self, mod, a, b3):
        x_hat = F.group_norm(a, mod.num_groups, None, None, mod.eps).reshape(a.shape[0], a.shape[1], -1)
        return torch.einsum("urcl,rcl->uc", b3, x_hat)

    def basis_weight(self, mod, a, b3):
        x_hat = F.group_norm(a, mod.num_groups, None, None, mod.eps).reshape(b3.shape[1], a.shape[1], -1)
        return (b3 * x_hat).sum(-1)
