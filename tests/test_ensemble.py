"""Stacked training of K models: the functional optimizers and fit_many equal the one-model runs."""

import pytest
import torch

from privaudit.defenses import Budget, make_defense
from privaudit.defenses.training.ensemble import StackedOptimizer, fit_many


@pytest.mark.parametrize("name,kwargs", [("adam", {"weight_decay": 0.01}), ("sgd", {"momentum": 0.9}),
                                         ("sgd", {"momentum": 0.0, "weight_decay": 0.1})])
def test_stacked_optimizer_matches_torch_per_model(name, kwargs):
    gen = torch.Generator().manual_seed(0)
    k, shape = 3, (4, 5)
    init = torch.randn(k, *shape, generator=gen)
    stacked = {"w": init.clone()}
    opt = StackedOptimizer(stacked, name, lr=0.05, **kwargs)
    singles = [torch.nn.Parameter(init[i].clone()) for i in range(k)]
    torch_opts = [(torch.optim.Adam if name == "adam" else torch.optim.SGD)([p], lr=0.05, **kwargs) for p in singles]
    active_pattern = [[1, 1, 1], [1, 0, 1], [0, 1, 1], [1, 1, 0], [1, 1, 1]]
    for step, active in enumerate(active_pattern):
        grads = torch.randn(k, *shape, generator=gen)
        opt.step({"w": grads}, torch.tensor(active, dtype=torch.bool))
        for i in range(k):
            if active[i]:
                singles[i].grad = grads[i].clone()
                torch_opts[i].step()
    for i in range(k):
        torch.testing.assert_close(stacked["w"][i], singles[i].detach(), rtol=1e-5, atol=1e-6)


def _params(trained):
    return torch.cat([p.flatten() for p in trained.model.state_dict().values()])


def _subsets(digits, sizes):
    out = []
    for i, n in enumerate(sizes):
        mask = torch.zeros(len(digits.pool), dtype=torch.bool)
        mask[torch.randperm(len(mask), generator=torch.Generator().manual_seed(i))[:n]] = True
        out.append(digits.with_membership(mask))
    return out


@pytest.mark.parametrize("name,params", [
    ("nonprivate", {"epochs": 2, "batch_size": 64, "encoder": "mlp", "width": 8}),
    ("supervised", {"epochs": 2, "batch_size": 32, "width": 8}),
])
def test_fit_many_equals_separate_fits(digits, name, params):
    # Different training-set sizes give different numbers of steps: exercises the active mask.
    datas = _subsets(digits, [300, 150])
    defense = make_defense(name, params)
    together = fit_many(defense, datas, Budget(), [5, 6])
    apart = [defense.fit(d, Budget(), s, progress=False) for d, s in zip(datas, [5, 6])]
    assert len(together[0].history["loss"]) > len(together[1].history["loss"])
    for a, b in zip(together, apart):
        assert len(a.history["loss"]) == len(b.history["loss"])
        torch.testing.assert_close(torch.tensor(a.history["loss"]), torch.tensor(b.history["loss"]),
                                   rtol=1e-4, atol=1e-4)
        # Equal up to float reassociation (vmapped vs plain kernels); Adam can amplify it on a few
        # near-zero-gradient coordinates, so bound the worst coordinate loosely and the mean tightly.
        diff = (_params(a) - _params(b)).abs()
        assert diff.max() < 5e-3 and diff.mean() < 1e-5
        assert a.seed == b.seed and a.config == b.config


def test_supervised_overfits_and_saves_its_head(digits, tmp_path):
    from privaudit.defenses.base import Trained

    trained = make_defense("supervised", epochs=20, width=8).fit(digits, Budget(), seed=0, progress=False)
    utility = trained.extras["utility"]
    assert utility["train_accuracy"] > 0.98 and utility["test_accuracy"] > 0.7
    assert utility["train_accuracy"] > utility["test_accuracy"]
    loaded = Trained.load(trained.save(tmp_path / "ck"))
    torch.testing.assert_close(loaded.logits(digits.test.x), trained.logits(digits.test.x))
    with pytest.raises(Exception, match="not private"):
        make_defense("supervised").fit(digits, Budget(target_epsilon=1.0), seed=0)


@pytest.mark.parametrize("encoder,classifier", [("mlp", False), ("cnn", False), ("cnn", True)])
def test_folded_forward_equals_vmapped_forward(encoder, classifier):
    import copy

    from torch.func import stack_module_state

    from privaudit.defenses.training.folding import can_fold, folded_forward, vmapped_forward
    from privaudit.defenses.nn.model import ModelSpec, build_model
    from privaudit.defenses.supervised import ClassifierNet, build_head

    spec = ModelSpec(encoder=encoder, in_shape=(1, 8, 8), width=4, rep_dim=16, proj_hidden=16, proj_dim=8)
    models = [build_model(spec, seed=k) for k in range(3)]
    if classifier:
        models = [ClassifierNet(m.encoder, build_head(16, 10, k)) for k, m in enumerate(models)]
    base = copy.deepcopy(models[0]).to("meta")
    assert can_fold(base)
    params, buffers = stack_module_state(models)
    params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    x = torch.rand(3, 5, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    outs, grads = [], []
    for forward in (folded_forward(base), vmapped_forward(base)):
        out = forward(params, buffers, x)
        outs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), list(params.values())))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[0][1], models[1](x[1]), rtol=1e-5, atol=1e-5)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_unsupported_layers_fall_back_to_vmap():
    from privaudit.defenses.training.folding import can_fold
    from privaudit.defenses.nn.model import ModelSpec, build_model

    assert not can_fold(build_model(ModelSpec(encoder="resnet18", in_shape=(3, 8, 8), width=4, groups=2)))
    assert not can_fold(torch.nn.Sequential(torch.nn.Conv2d(2, 2, 3, groups=2)))
