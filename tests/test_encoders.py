"""Encoders work under torch.func: per-example gradients by vmap(grad) equal a loop of backward passes."""

import pytest
import torch
from torch.func import functional_call, grad, vmap

from privaudit.defenses.nn.model import ModelSpec, build_model


SPECS = [
    ModelSpec(encoder="mlp", in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=16, proj_dim=4),
    ModelSpec(encoder="cnn", in_shape=(1, 8, 8), width=4, rep_dim=8, proj_hidden=16, proj_dim=4, groups=2),
    ModelSpec(encoder="resnet18", in_shape=(3, 16, 16), width=4, rep_dim=8, proj_hidden=16, proj_dim=4, groups=2),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.encoder)
def test_vmap_per_example_gradients_match_loop(spec):
    model = build_model(spec, seed=0).double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.rand(3, *spec.in_shape, dtype=torch.float64)
    target = torch.randn(3, spec.proj_dim, dtype=torch.float64)

    def loss(p, xi, ti):
        z = functional_call(model, p, (xi.unsqueeze(0),))
        return ((z.squeeze(0) - ti) ** 2).sum()

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, target)
    for i in range(3):
        model.zero_grad()
        ((model(x[i:i + 1]).squeeze(0) - target[i]) ** 2).sum().backward()
        for name, p in model.named_parameters():
            assert torch.allclose(per_example[name][i], p.grad, rtol=1e-8, atol=1e-10), name


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.encoder)
def test_shapes_and_normalisation(spec):
    model = build_model(spec, seed=1)
    x = torch.rand(5, *spec.in_shape)
    assert model.represent(x).shape == (5, spec.rep_dim)
    z = model(x)
    assert z.shape == (5, spec.proj_dim)
    assert torch.allclose(z.norm(dim=1), torch.ones(5), atol=1e-5)


def test_no_batchnorm_and_no_cross_example_coupling():
    """Each example's output must not depend on the rest of the batch (no BatchNorm)."""
    for spec in SPECS:
        model = build_model(spec, seed=0).eval()
        assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
        x = torch.rand(4, *spec.in_shape)
        alone = model(x[:1])
        together = model(x)[:1]
        assert torch.allclose(alone, together, atol=1e-5)


def test_seeded_initialisation_is_deterministic():
    a = build_model(SPECS[1], seed=3)
    b = build_model(SPECS[1], seed=3)
    c = build_model(SPECS[1], seed=4)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_resnet18_full_width_parameter_count():
    """The standard CIFAR ResNet-18 has about 11.2M parameters in its trunk."""
    from privaudit.defenses.nn.encoders import ResNet18GN

    n = sum(p.numel() for p in ResNet18GN(3, width=64).parameters())
    assert 11.0e6 < n < 11.3e6


def test_cnn_pools_to_a_grid_and_only_the_cnn_does():
    """pool = k keeps a k x k layout of the last feature map (the linear map sees C k^2 features)."""
    from privaudit.core.errors import ConfigError

    spec = ModelSpec(encoder="cnn", in_shape=(1, 28, 28), width=4, rep_dim=8, proj_hidden=16, proj_dim=4, groups=2,
                     pool=4)
    model = build_model(spec, seed=0)
    linear = model.encoder.net[-1]
    assert linear.in_features == 8 * 16  # 2 * width channels, 4 x 4 positions
    assert model.represent(torch.rand(3, 1, 28, 28)).shape == (3, 8)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match="pool"):
        build_model(ModelSpec(encoder="mlp", in_shape=(1, 8, 8), pool=2))
    with pytest.raises(ConfigError, match="pool"):
        build_model(ModelSpec(encoder="cnn", in_shape=(1, 8, 8), pool=0))


def test_pretraining_keeps_the_pool():
    """The public pretraining builds the defense's own architecture, so the cached encoder loads into it."""
    from privaudit.defenses.training.pretrain import pretrain_config
    from privaudit.defenses.training.training import ContrastiveConfig

    assert pretrain_config(ContrastiveConfig(pool=4), epochs=1).pool == 4


BENCHMARK_SPECS = [
    ModelSpec(encoder="tanh-cnn", in_shape=(1, 28, 28), width=16, rep_dim=32, proj_hidden=16, proj_dim=4),
    ModelSpec(encoder="embed-net", in_shape=(1, 28, 28), width=8, rep_dim=8, proj_hidden=0),
    ModelSpec(encoder="pixels", in_shape=(1, 28, 28), proj_hidden=16, proj_dim=4),
]


def test_the_benchmarks_encoders_have_their_papers_sizes():
    """Tramer & Boneh's CNN: 26,010 parameters with its 10-way head (their Table 9's MNIST CNN); Logit-DP's embedding
    net: 8, 16, 32 channels and an 8-dimensional embedding, no projection head; the pixels: no parameter at all."""
    tanh, net, pixels = (build_model(s, seed=0) for s in BENCHMARK_SPECS)
    assert sum(p.numel() for p in tanh.encoder.parameters()) + 32 * 10 + 10 == 26_010
    assert [m.out_channels for m in net.encoder.modules() if isinstance(m, torch.nn.Conv2d)] == [8, 16, 32]
    assert isinstance(net.projector, torch.nn.Identity) and sum(p.numel() for p in net.parameters()) == 9_992
    assert sum(p.numel() for p in pixels.encoder.parameters()) == 0
    x = torch.rand(4, 1, 28, 28)
    assert torch.equal(pixels.represent(x), x.flatten(1)) and pixels.encoder.rep_dim == 784
    assert tanh.represent(x).abs().max() <= 1 and net.represent(x).shape == (4, 8)
    assert torch.allclose(net(x).norm(dim=1), torch.ones(4), atol=1e-5)  # no head: z is the normalised embedding
    with pytest.raises(ValueError, match="at least 16 x 16"):
        build_model(ModelSpec(encoder="tanh-cnn", in_shape=(1, 8, 8)))


@pytest.mark.parametrize("spec", BENCHMARK_SPECS[:2], ids=lambda s: s.encoder)
def test_the_benchmarks_encoders_have_vmap_per_example_gradients(spec):
    test_vmap_per_example_gradients_match_loop(spec if spec.proj_hidden else
                                               ModelSpec(**{**spec.to_dict(), "in_shape": (1, 28, 28),
                                                            "proj_dim": spec.rep_dim}))
