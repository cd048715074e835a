"""What the engines do with each layer of a model, and why: for engine reports and benchmarks.

For every module with trainable parameters: its per-layer rule (:mod:`privaudit.defenses.dp.engine.layer_rules`), how
the partition engine gets its unit gradients (the rule's
:attr:`~privaudit.defenses.dp.engine.layer_rules.LayerRule.summary`)
and, for Logit-DP's row Grams at n x m pairs with K directions per row, which form its Gram takes (ghost
products or materialised rows) with the two costs the choice compares
(:func:`privaudit.defenses.dp.engine.row_grams._conv_ghost_cheaper`). A model the layerwise engine does not serve gets
the reason instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn as nn

from privaudit.defenses.dp.engine.embedder import Embedder
from privaudit.defenses.dp.engine.layer_rules import Conv2dRule, LinearRule
from privaudit.defenses.dp.engine.layerwise import engine_model_reason, model_layers
from privaudit.defenses.dp.engine.row_grams import _conv_costs


@dataclass(frozen=True)
class LayerPlan:
    """One layer: its name, type, parameter count, the rule's unit-gradient method and its Gram form."""

    name: str
    kind: str
    params: int
    rule: str
    unit_gradients: str
    gram: str

    def line(self) -> str:
        return f"{self.name} ({self.kind}, {self.params} params): {self.rule}; {self.unit_gradients}; Grams: {self.gram}"


def _positions(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor) -> dict[str, int]:
    """Output positions per layer (spatial size of a convolution's output) from a forward of one row."""
    sizes: dict[str, int] = {}
    hooks = []
    for layer in model_layers(embedder):
        def record(module, inputs, output, name=layer.name):
            sizes[name] = max(1, output[:1].numel() // output.shape[1]) if output.dim() > 2 else 1
        hooks.append(layer.module.register_forward_hook(record))
    try:
        with torch.no_grad():
            embedder.embed(params, x[:1])
    finally:
        for h in hooks:
            h.remove()
    return sizes


def _gram_form(module: nn.Module, rule, positions: int, pairs: tuple[int, int], copies: int) -> str:
    n, m = pairs
    if isinstance(rule, LinearRule):
        return "ghost products <M, M'> (<a, a'> + 1)"
    if isinstance(rule, Conv2dRule) and "weight" in dict(module.named_parameters(recurse=False)):
        ghost, rows = _conv_costs(module, positions, n, m, copies)
        form = "ghost products" if ghost < rows else "materialised rows"
        return f"{form} (L = {positions} positions; cost ghost {ghost:.3g} vs rows {rows:.3g} multiply-adds)"
    return "materialised per-row gradients"


def layer_plan(embedder: Embedder, params: Mapping[str, torch.Tensor], x: torch.Tensor,
               pairs: tuple[int, int] | None = None, copies: int = 1) -> list[LayerPlan] | str:
    """Every layer's plan (see the module docstring), or why the layerwise engine does not serve the model.
    ``pairs`` (n, m) and ``copies`` (K directions per row) size Logit-DP's Gram forms."""
    reason = engine_model_reason(embedder)
    if reason is not None:
        return reason
    sizes = _positions(embedder, params, x)
    plans = []
    for layer in model_layers(embedder):
        count = sum(p.numel() for p in layer.own(params).values())
        gram = _gram_form(layer.module, layer.rule, sizes[layer.name], pairs, copies) if pairs else "-"
        plans.append(LayerPlan(layer.name, type(layer.module).__name__, count, type(layer.rule).__name__,
                               layer.rule.summary, gram))
    return plans
