"""DP-FedEmb / DP-FedAvg: users and virtual clients, local training, aggregation, claims."""

import math

import pytest
import torch
import torch.nn.functional as F

from privaudit.accountants import epsilon
from privaudit.accountants.events import GaussianDpEvent, SampledWithoutReplacementDpEvent, SelfComposedDpEvent
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget, make_defense
from privaudit.defenses.fedemb.aggregate import (adaptive_clip_update, clip_deltas, delta_noise_multiplier,
                                       event_noise_multiplier, noised_mean, split_noise)
from privaudit.defenses.fedemb.defense import round_claim
from privaudit.defenses.fedemb.local import local_train, stack_params
from privaudit.defenses.fedemb.users import partition_users, plan_round
from privaudit.defenses.nn.model import ModelSpec, build_model
from privaudit.defenses.training.seeding import torch_generator

TINY = dict(pretrain=False, width=8, rep_dim=16, rounds=3, local_steps=2, local_batch_size=8)


# -- users and virtual clients -----------------------------------------------------------------------
def test_seeded_users_hold_few_classes_and_partition_the_members(digits):
    y = digits.train.y
    users = partition_users(y, None, torch.Generator().manual_seed(0), examples_per_user=6, classes_per_user=2)
    everything = torch.cat(users.examples)
    assert len(everything) == len(y) and len(torch.unique(everything)) == len(y)  # disjoint and complete
    assert max(len(torch.unique(y[e])) for e in users.examples) <= 2
    assert users.source == "seeded shards" and len(y) // 6 - 10 <= len(users) <= len(y) // 6
    assert min(len(e) for e in users.examples) >= 6  # class remainders join a shard, never form a tiny user
    again = partition_users(y, None, torch.Generator().manual_seed(0), examples_per_user=6, classes_per_user=2)
    assert all(torch.equal(a, b) for a, b in zip(users.examples, again.examples))
    ids = torch.tensor([7, 3, 7, 9, 3])
    from_ids = partition_users(torch.zeros(5, dtype=torch.long), ids, torch.Generator())
    assert from_ids.source == "dataset" and [e.tolist() for e in from_ids.examples] == [[1, 4], [0, 2], [3]]


def test_a_users_data_lands_in_at_most_one_virtual_client_per_round(digits):
    defense = make_defense("dp-fedemb", rounds=25, clients_per_round=4, users_per_client=3)
    users = defense.users(digits, seed=0)
    owner = users.owner(len(digits.train))
    seen_in_rounds = torch.zeros(len(users))
    for plan in defense.round_plans(len(users), seed=0):
        assert len(plan.clients) == 4 and all(len(c) == 3 for c in plan.clients)
        assert len(torch.unique(plan.users)) == 12  # sampled without replacement
        examples = plan.client_examples(users)
        flat = torch.cat(examples)
        assert len(torch.unique(flat)) == len(flat)  # no example in two clients
        for client_users, ex in zip(plan.clients, examples):
            assert set(owner[ex].tolist()) == set(client_users.tolist())  # a client holds exactly its users' data
        seen_in_rounds[plan.users] += 1
    assert seen_in_rounds.sum() == 25 * 12 and (seen_in_rounds > 0).float().mean() > 0.9
    with pytest.raises(ConfigError, match="exceeds the 5 users"):
        plan_round(5, 2, 3, torch.Generator())


# -- local training and aggregation ------------------------------------------------------------------
def test_vmapped_local_training_equals_a_loop_over_clients():
    spec = ModelSpec(encoder="cnn", in_shape=(1, 8, 8), width=4, rep_dim=6)
    encoder = build_model(spec, seed=0).encoder
    g = torch.Generator().manual_seed(0)
    c, k, b, classes = 3, 2, 5, 4
    x = torch.rand(c, k, b, 1, 8, 8, generator=g)
    y = torch.randint(0, 3, (c, k, b), generator=g)
    heads = torch.randn(c, classes, 6, generator=g)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    start = {n: p.detach() for n, p in encoder.named_parameters()}
    out = local_train(encoder, stack_params(start, c), heads, x, y, mask, lr_backbone=0.1, lr_head=1.0, momentum=0.5)
    for i in range(c):  # reference: plain autograd, one client and one step at a time
        params = {n: p.clone().requires_grad_(True) for n, p in start.items()}
        head = heads[i].clone().requires_grad_(True)
        vel = {n: torch.zeros_like(p) for n, p in params.items()}
        hv = torch.zeros_like(head)
        for step in range(k):
            emb = torch.func.functional_call(encoder, params, (x[i, step],))
            logits = (emb @ head.T).masked_fill(~mask[i], float("-inf"))
            grads = torch.autograd.grad(F.cross_entropy(logits, y[i, step]), [*params.values(), head])
            with torch.no_grad():
                for (n, p), gp in zip(params.items(), grads[:-1]):
                    vel[n] = 0.5 * vel[n] + gp
                    p -= 0.1 * vel[n]
                hv = 0.5 * hv + grads[-1]
                head -= 1.0 * hv
        for n in params:
            torch.testing.assert_close(out.params[n][i], params[n].detach(), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(out.heads[i], head.detach(), atol=1e-5, rtol=1e-4)
        assert (out.heads[i][~mask[i]] == heads[i][~mask[i]]).all()  # padding rows never move


def test_clipping_and_noised_mean():
    g = torch.Generator().manual_seed(0)
    deltas = {"a": torch.randn(4, 3, generator=g) * 3, "b": torch.randn(4, 2, 2, generator=g) * 0.01}
    deltas["a"][1] = float("nan")  # a diverged client is mapped into the ball (to zero)
    clipped, norms = clip_deltas(deltas, 0.5)
    new_norms = torch.sqrt(sum(d.flatten(1).pow(2).sum(1) for d in clipped.values()))
    assert (new_norms <= 0.5 + 1e-6).all() and new_norms[1] == 0 and torch.isnan(norms[1])
    agg = noised_mean(deltas, 0.5, 0.0, g)
    torch.testing.assert_close(agg.update["a"], clipped["a"].mean(0))
    assert agg.noised_numel == 3 + 4 and agg.nonfinite_fraction == 0.25
    noisy = noised_mean({"a": torch.zeros(2, 10000)}, 1.0, 2.0, torch.Generator().manual_seed(1))
    assert noisy.update["a"].std() * 2 == pytest.approx(2.0, rel=0.05)  # std sigma * gamma on the sum, / |S|


def _spy_round(defense, digits, monkeypatch, sigma=1.0):
    """Run one round, capturing what goes into the noised aggregate."""
    import privaudit.defenses.fedemb.defense as module

    captured = {}
    real = module.noised_mean

    def spy(deltas, clip_norm, noise_multiplier, gen):
        captured["keys"] = set(deltas)
        result = real(deltas, clip_norm, noise_multiplier, gen)
        captured["numel"] = result.noised_numel
        return result

    monkeypatch.setattr(module, "noised_mean", spy)
    model = build_model(defense.config.model_spec(digits.info), seed=0)
    users = defense.users(digits, 0)
    plan = next(defense.round_plans(len(users), 0))
    head = None
    if defense.aggregate_head:
        head = torch.nn.Parameter(torch.zeros(10, model.encoder.rep_dim))
    gens = {k: torch_generator(0, k) for k in ("batches", "heads", "noise")}
    aggregate, loss = defense.run_round(model.encoder, head, plan, users, digits.train.x, digits.train.y, 10, 0.2,
                                        sigma, gens)
    return model, captured, aggregate


@pytest.mark.parametrize("name", ["dp-fedemb", "dp-fedavg"])
def test_clients_in_chunks_give_the_same_round(digits, name):
    """client_chunk bounds memory (one chunk's stacked backbones at a time); the clipped, noised sum is the same."""
    models = {}
    for chunk in (0, 2):
        defense = make_defense(name, {**TINY, "rounds": 2, "clients_per_round": 5, "client_chunk": chunk})
        trained = defense.fit(digits, Budget(noise_multiplier=1.0), seed=0, progress=False)
        models[chunk] = trained
    for key in ("loss", "clipped_fraction", "update_norm"):
        assert models[0].history[key] == pytest.approx(models[2].history[key], rel=1e-5)
    whole, chunked = (torch.cat([p.detach().reshape(-1) for p in models[c].model.parameters()]) for c in (0, 2))
    assert float((whole - chunked).abs().max()) < 1e-5


def test_fedemb_never_puts_head_parameters_into_the_noised_aggregate(digits, monkeypatch):
    fedemb = make_defense("dp-fedemb", **TINY)
    model, captured, aggregate = _spy_round(fedemb, digits, monkeypatch)
    backbone = {n for n, _ in model.encoder.named_parameters()}
    assert captured["keys"] == backbone == set(aggregate.update)
    assert captured["numel"] == sum(p.numel() for p in model.encoder.parameters())
    fedavg = make_defense("dp-fedavg", **TINY)
    model, captured, aggregate = _spy_round(fedavg, digits, monkeypatch)
    assert captured["keys"] == backbone | {"head"}
    assert captured["numel"] == sum(p.numel() for p in model.encoder.parameters()) + 10 * 16


# -- privacy claims ----------------------------------------------------------------------------------
def test_round_noise_multipliers():
    assert event_noise_multiplier(1.0) == 0.5  # sensitivity 2 gamma under replace-one
    z = event_noise_multiplier(1.0, 4.0)
    assert 1 / z ** 2 == pytest.approx(4 + 1 / 16)
    assert delta_noise_multiplier(z, 4.0) == pytest.approx(1.0)
    z, count_std = split_noise(1.0)
    assert event_noise_multiplier(1.0, count_std) == pytest.approx(z) and z < 0.5
    with pytest.raises(ConfigError, match="clip_count_stddev: 0.1 must exceed"):
        delta_noise_multiplier(0.5, 0.1)
    clip, b = adaptive_clip_update(1.0, torch.tensor([0.1, 0.2, 3.0, 0.3]), target_quantile=0.5, learning_rate=0.2,
                                   count_stddev=0.0, gen=torch.Generator())
    assert b == 0.75 and clip == pytest.approx(math.exp(-0.2 * 0.25))  # most unclipped: the clip norm shrinks


def test_paper_digiface_epsilon_needs_sigma_not_sigma_over_two():
    """Sec. 3.4: sigma 1.39, 64 users x 128 clients of 98,960, 800 rounds, delta 1e-5, 'eps = 24.86'."""
    paper = epsilon(round_claim(1.39, 98960, 64 * 128, 800, 1e-5)).epsilon
    ours = epsilon(round_claim(event_noise_multiplier(1.39), 98960, 64 * 128, 800, 1e-5)).epsilon
    assert paper == pytest.approx(24.86, abs=0.01)
    assert ours == pytest.approx(92.6, abs=0.1)


def test_fedemb_trains_with_a_user_level_claim_deterministically(digits):
    runs = [make_defense("dp-fedemb", **TINY).fit(digits, Budget(noise_multiplier=0.5), seed=0, progress=False)
            for _ in range(2)]
    for a, b in zip(runs[0].model.state_dict().values(), runs[1].model.state_dict().values()):
        assert torch.equal(a, b)
    t = runs[0]
    claim = t.claim
    assert (claim.relation, claim.unit, claim.sampler) == ("replace-one", "user", "without-replacement")
    ev = claim.event
    assert isinstance(ev, SelfComposedDpEvent) and ev.count == 3
    assert isinstance(ev.event, SampledWithoutReplacementDpEvent) and ev.event.sample_size == 16
    assert ev.event.source_dataset_size == t.extras["users"]["num_users"]
    assert isinstance(ev.event.event, GaussianDpEvent) and ev.event.event.noise_multiplier == 0.25
    assert claim.params["noise_multiplier"] == 0.5 and t.classifier is None
    assert epsilon(claim).epsilon > t.extras["paper_epsilon"] > 0
    u = t.extras["utility"]
    assert 0 <= u["recall_at_far"] <= 1 and u["far"] == 1e-3
    assert len(t.history["loss"]) == 3 and t.history["clip_norm"] == [0.2] * 3


def test_fedavg_calibrates_to_a_target_with_adaptive_clipping(digits):
    t = make_defense("dp-fedavg", adaptive_clipping=True, **TINY).fit(digits, Budget(target_epsilon=20.0), seed=1,
                                                                      progress=False)
    assert epsilon(t.claim).epsilon == pytest.approx(20.0, rel=1e-3)
    z = t.claim.event.event.event.noise_multiplier
    count_std = t.claim.params["clip_count_stddev"]
    assert count_std == pytest.approx(z / math.sqrt(0.05))  # the count query takes 5% of the round's budget
    assert t.claim.params["noise_multiplier"] == pytest.approx(delta_noise_multiplier(z, count_std))
    assert t.classifier is not None and t.classifier.weight.shape == (10, 16)
    assert t.history["clip_norm"][1] != 0.2  # adaptive clipping moved it


def test_fedemb_privatized_quantity_is_backbone_only(digits):
    (q,) = make_defense("dp-fedemb", **TINY).privatized_quantities(digits)
    assert (q.claim_id, q.relation, q.norm) == ("fedemb.virtual-client", "replace-one", "l2")
    x, y = digits.train.x[:40], digits.train.y[:40]
    client = torch.arange(40) % 4
    out = q.fn((x, y, client), 7)
    n_backbone = sum(p.numel() for p in build_model(make_defense("dp-fedemb", **TINY).config.model_spec(digits.info)).encoder.parameters())
    assert out.shape == (n_backbone,) and torch.equal(out, q.fn((x, y, client), 7))
    y2 = y.clone()
    y2[client == 0] = (y2[client == 0] + 1) % 10  # change one client's data only
    assert (out - q.fn((x, y2, client), 7)).norm() <= 2 * q.params["clip_norm"] + 1e-6
    assert q.bound(q.params) == 0.2 and q.params["implemented_bound"] == 0.4


def test_fedemb_local_heads_have_one_row_per_class_of_the_clients_data(digits):
    defense = make_defense("dp-fedemb", **TINY)
    users = defense.users(digits, 0)
    plan = next(defense.round_plans(len(users), 0))
    examples = plan.client_examples(users)
    client_labels = [digits.train.y[e] for e in examples]
    batch_labels = [lab[:3] for lab in client_labels]  # minibatches may miss some classes
    heads, local, mask = defense.client_heads(client_labels, batch_labels, 10, 16, None, torch.Generator())
    assert mask.sum(1).tolist() == [len(torch.unique(lab)) for lab in client_labels]
    assert heads.shape == (len(examples), int(mask.sum(1).max()), 16)
    for lab, batch, loc in zip(client_labels, batch_labels, local):
        assert torch.equal(torch.unique(lab)[loc], batch)  # local indices map back to the true classes
