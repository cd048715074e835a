"""The per-layer rule registry: a rule registered for a new layer type is what the engines use.

A toy layer (a trainable per-feature gain) has no rule, so the layerwise engine declines a model with it;
once one decorated rule is registered, the layerwise clipped sums, row Jacobians and row Grams serve the
model and agree with the vmap reference. A rule serves subclasses of its type only where it says so.
"""

import pytest
import torch
import torch.nn as nn

import privaudit.defenses.dp.engine.layer_rules as layer_rules
from privaudit.defenses.dp import Embedder, Source, clipped_sum, dense_units, partition_units
from privaudit.defenses.dp.engine.layer_rules import LayerRule, layer_rule, register_layer_rule
from privaudit.defenses.dp.engine.layerwise import row_jacobians, unsupported_reason
from privaudit.defenses.dp.engine.pairs import per_sample_jacobians
from privaudit.defenses.dp.engine.row_grams import jacobian_grams, layer_grams
from privaudit.defenses.nn.model import ContrastiveModel, ModelSpec, build_model

TOL = 1e-9


class Gain(nn.Module):
    """y = x * gain over the last dimension (a layer the built-in rules do not know)."""

    def __init__(self, dim):
        super().__init__()
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        return x * self.gain


class GainRule(LayerRule):
    """d y / d gain: sum over positions of b * a, per row."""

    calls: list[str] = []

    def row_grads(self, mod, params, a, b):
        self.calls.append("row")
        return {"gain": (b * a).reshape(b.shape[0], -1, b.shape[-1]).sum(1)}

    def unit_grads(self, mod, params, a, b):
        self.calls.append("unit")
        return {"gain": (b * a).reshape(*b.shape[:2], -1, b.shape[-1]).sum((1, 2))}

    def basis_row_grads(self, mod, params, a, b):
        self.calls.append("basis")
        return {"gain": (b * a).reshape(*b.shape[:2], -1, b.shape[-1]).sum(2)}


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the registry, so the toy rules do not outlive the test."""
    monkeypatch.setattr(layer_rules, "_RULES", dict(layer_rules._RULES))
    GainRule.calls = []


def gain_model(dim=8):
    spec = ModelSpec(encoder="mlp", in_shape=(1, 8, 8), width=4, rep_dim=dim, proj_hidden=8, proj_dim=4)
    base = build_model(spec, seed=0)
    return ContrastiveModel(nn.Sequential(base.encoder, Gain(dim)), base.projector).double()


def rows(n, seed):
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def close(a, b):
    return float((a - b).abs().max()) <= TOL * float(b.abs().max().clamp_min(1))


def test_a_registered_rule_makes_the_engines_serve_a_new_layer(registry):
    model = gain_model()
    assert "Gain" in unsupported_reason(model)  # no rule: the layerwise engine declines (vmap fallback)
    register_layer_rule(Gain)(GainRule)
    assert isinstance(layer_rule(model.encoder[1]), GainRule)
    assert unsupported_reason(model) is None
    emb = Embedder(model)
    x = rows(6, 1)
    g = torch.Generator().manual_seed(2)
    partition = partition_units("example", (torch.randn(6, 4, generator=g, dtype=torch.float64),),
                                (torch.arange(6) % 3,))
    dense = dense_units("term", (torch.randn(3, 6, 4, generator=g, dtype=torch.float64),))
    for units in (partition, dense):
        fast = clipped_sum(emb, emb.params(), (Source(x),), units, 0.3, engine="layerwise")
        ref = clipped_sum(emb, emb.params(), (Source(x),), units, 0.3, engine="vmap")
        assert fast.engine == "layerwise"
        assert close(fast.norms, ref.norms) and close(fast.total, ref.total)
    assert {"row", "unit"} <= set(GainRule.calls)
    assert close(row_jacobians(emb, emb.params(), Source(x)), per_sample_jacobians(emb, emb.params(), x))
    y = rows(4, 3)
    got = layer_grams(emb, emb.params(), x, y)  # the default Gram: the rule's materialised row gradients
    want = jacobian_grams(per_sample_jacobians(emb, emb.params(), x), per_sample_jacobians(emb, emb.params(), y))
    assert "basis" in GainRule.calls
    assert all(close(getattr(got, f), getattr(want, f)) for f in ("own_x", "own_y", "cross"))


def test_rules_serve_subclasses_only_where_they_say_so(registry):
    class ScaledGain(Gain):
        pass

    class TwiceLinear(nn.Linear):  # another forward: the Linear rule would give wrong gradients
        def forward(self, x):
            return 2 * super().forward(x)

    register_layer_rule(Gain)(GainRule)
    assert layer_rule(ScaledGain(4)) is None and layer_rule(TwiceLinear(2, 2)) is None
    assert isinstance(layer_rule(nn.Linear(2, 2)), layer_rules.LinearRule)  # exact type

    @register_layer_rule(Gain)
    class InheritedGainRule(GainRule):
        serves_subclasses = True

    assert isinstance(layer_rule(ScaledGain(4)), InheritedGainRule)  # the nearest registered base class
