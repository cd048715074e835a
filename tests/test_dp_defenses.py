"""The DP defenses: calibrated claims, training history, determinism, the canary hook, the quantities."""

import json
import logging
import math
import subprocess
import sys

import pytest
import torch

from privaudit.accountants import epsilon
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget, make_defense
from privaudit.defenses.dp import CanaryGradients, dirac_canaries
from privaudit.defenses.dp.release.randomness import StepRandomness
from privaudit.defenses.training.seeding import derive_seed

logging.getLogger("absl").setLevel(logging.ERROR)

SMALL = {"width": 4, "rep_dim": 8, "proj_hidden": 8, "proj_dim": 4, "epochs": 1, "pretrain_epochs": 2}

EXPECTED = {  # name: (sampler, relation, unit)
    "dpsgd": ("poisson", "add-remove", "term"),
    "dp-clip": ("poisson", "add-remove", "batch"),
    "dpcl-simclr": ("without-replacement", "replace-one", "view"),
    "dpcl-barlow": ("without-replacement", "replace-one", "view"),
    "dp-gcl": ("poisson", "add-remove", "group"),
    "logit-dp": ("poisson", "add-remove", "pair"),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_defense_trains_under_a_calibrated_claim(digits, name):
    sampler, relation, unit = EXPECTED[name]
    trained = make_defense(name, {**SMALL, "batch_size": 24}).fit(digits, Budget(target_epsilon=5), seed=0,
                                                                   progress=False)
    claim = trained.claim
    n = len(digits.train)
    assert claim.is_private and claim.relation == relation and claim.unit == "example"
    assert claim.sampler.startswith(sampler)
    assert claim.delta == pytest.approx(1 / (n * math.log(n)))
    eps = epsilon(claim, "pld").epsilon  # calibrated with the tightest sound accountant (PLD's upper bound)
    assert 4.9 < eps <= 5.0 + 1e-6
    params = claim.params
    assert params["sensitivities"]["gradient"] > 0 and params["noise_multipliers"]["gradient"] > 0
    assert claim.notes and claim.paper_accountant
    steps = params["steps"]
    history = trained.history
    for key in ("loss", "clipped_fraction", "grad_snr", "batch_size", "units"):
        assert len(history[key]) == steps, key
    assert all(0 <= f <= 1 for f in history["clipped_fraction"])
    dp = trained.extras["dp"]
    assert dp["unit"] == unit and dp["grad_snr_first"] > 0
    assert len(dp["param_names"]) == len(list(trained.model.parameters()))
    assert trained.features(digits.test.x[:5]).shape == (5, SMALL["rep_dim"])


def test_dpcl_claim_flags_its_sensitivity_and_the_paper_accounting(digits):
    trained = make_defense("dpcl-simclr", {**SMALL, "batch_size": 48}).fit(digits, Budget(target_epsilon=5), seed=0,
                                                                         progress=False)
    params = trained.claim.params
    assert params["sensitivities"]["gradient"] == pytest.approx(4 * 0.05)  # the paper's 4C
    assert params["sensitivities"]["similarity"] == pytest.approx(4 * math.sqrt(2 * 48 - 1))
    z = params["noise_multipliers"]
    assert z["gradient"] == pytest.approx(z["similarity"])  # equal split (Sec. 5.2.2)
    assert params["effective_noise_multiplier"] == pytest.approx(z["gradient"] / math.sqrt(2))
    assert any("NOT a valid DP guarantee" in note for note in trained.claim.notes)
    # Composing separately subsampled mechanisms (the paper's accounting) undercounts the shared batch.
    assert params["paper_accounting_epsilon"] < epsilon(trained.claim).epsilon
    sound = make_defense("dpcl-simclr", {**SMALL, "batch_size": 48, "sensitivity": "sound"})
    assert sound.mechanisms(sound.plan(372))[0].sensitivity == pytest.approx(4 * 48 * 0.05)


def test_batch_size_dependent_bounds_use_a_cap(digits):
    d = make_defense("dpsgd", {"batch_size": 64})
    plan = d.plan(372)
    assert plan.max_batch > 64 and plan.overflow <= 1e-9
    assert d.mechanisms(plan)[0].sensitivity == pytest.approx(2 * plan.max_batch - 1)
    paper = make_defense("dpsgd", {"batch_size": 64, "sensitivity": "paper"})
    assert paper.mechanisms(paper.plan(372))[0].sensitivity == pytest.approx(2 * 64 + 1)
    lp = make_defense("logit-dp", {"temperature": 0.5})
    assert lp.mechanisms(lp.plan(372))[0].sensitivity == pytest.approx(2 * (1 + math.exp(4)))
    chunk = make_defense("dp-gcl", {"grouping": "chunk", "group_size": 16})
    cplan = chunk.plan(372)
    assert chunk.mechanisms(cplan)[0].sensitivity == pytest.approx(2 * math.ceil(cplan.max_batch / 16) + 1)
    assert make_defense("dp-gcl").mechanisms(plan)[0].sensitivity == pytest.approx(2.0)


def test_training_is_deterministic(digits):
    runs = [make_defense("dp-gcl", {**SMALL, "batch_size": 64}).fit(digits, Budget(noise_multiplier=1.0), seed=3,
                                                                    progress=False) for _ in range(2)]
    for a, b in zip(runs[0].model.parameters(), runs[1].model.parameters()):
        assert torch.equal(a, b)
    assert runs[0].history["loss"] == runs[1].history["loss"]


def test_canary_hook_adds_included_vectors_before_shared_noise(digits):
    defense = make_defense("dp-gcl", {**SMALL, "batch_size": 64})

    def first_step_grad(canaries):
        run = defense.prepare(digits, Budget(noise_multiplier=1.0), seed=0, canaries=canaries)
        metrics = run.step(next(iter(run.batches)))
        grad = torch.cat([p.grad.reshape(-1) for p in run.model.parameters()])
        return grad, metrics, run

    plain, _, run = first_step_grad(None)
    p = run.extras["dp"]["param_count"]
    coords = torch.tensor([0, 5, p - 1])
    seen = []
    with_canaries, metrics, _ = first_step_grad(dirac_canaries(coords, norm=1.0, include=torch.tensor([1, 0, 1]),
                                                               observer=seen.append))
    expected = torch.zeros(p)
    expected[[0, p - 1]] = 1.0 / run.extras["dp"]["normalizer"]
    assert torch.allclose(with_canaries - plain, expected, atol=1e-6)
    assert metrics["canaries"] == 2
    # The observer sees the privatised sum before the normaliser.
    assert len(seen) == 1 and torch.allclose(seen[0] / run.extras["dp"]["normalizer"], with_canaries, atol=1e-6)
    # Canaries may be as large as the gradient mechanism's sensitivity (a worst-case example), no larger.
    bound = run.extras["dp"]["canary_bound"]
    assert bound >= run.extras["dp"]["unit_clip"]
    dense = torch.zeros(1, p)
    dense[0, 3] = bound
    first_step_grad(CanaryGradients(dense, torch.tensor([True])))
    too_big = CanaryGradients(torch.full((1, p), 1.0), torch.tensor([True]))
    with pytest.raises(ConfigError, match="exceeds the mechanism's sensitivity"):
        first_step_grad(too_big)


def test_quantity_is_the_training_computation(digits):
    """fn(batch, randomness) returns exactly the clipped sum the training step releases (noise off)."""
    defense = make_defense("dpcl-simclr", {**SMALL, "batch_size": 16})
    run = defense.prepare(digits, Budget(noise_multiplier=0.0), seed=4)
    idx = next(iter(run.batches))
    fn = defense.quantity_function(digits, model=run.model, noise_multiplier=0.0)("gradient")
    expected = fn(digits.train.x[idx], StepRandomness(derive_seed(4, "dp-step"), 0))
    run.step(idx)
    grad = torch.cat([p.grad.reshape(-1) for p in run.model.parameters()])
    assert torch.allclose(grad * run.extras["dp"]["normalizer"], expected, atol=1e-7)
    assert torch.equal(fn(digits.train.x[:16], 5), fn(digits.train.x[:16], 5))


def test_every_privatized_quantity_is_exposed(digits):
    ids = set()
    for name in EXPECTED:
        for q in make_defense(name, SMALL).privatized_quantities(digits):
            ids.add((q.claim_id, q.variant))
            assert q.relation == EXPECTED[name][1] and q.bound(q.params) > 0
            if q.corrected_bound is not None:
                assert q.corrected_bound(q.params) > q.bound(q.params)
    assert ids == {("dpcl.similarity-matrix", ""), ("dpcl.mean", ""), ("dpcl.sse", ""), ("dpcl.simclr-gradient", ""),
                   ("dpcl.simclr-gradient-plain", ""), ("dpcl.barlow-gradient", ""), ("dpgcl.sample-level", ""),
                   ("dpgcl.batch-level", ""), ("dpgcl.group-clip", ""), ("dpgcl.group", "random"),
                   ("dpgcl.group", "chunk"), ("logitdp.infonce", ""), ("logitdp.spreadout", "")}


def test_bad_parameters_are_rejected():
    with pytest.raises(ConfigError, match="grouping: unknown value 'sorted'; accepted: random, chunk"):
        make_defense("dp-gcl", {"grouping": "sorted"})
    with pytest.raises(ConfigError, match="sensitivity: unknown value 'claimed'"):
        make_defense("dpsgd", {"sensitivity": "claimed"})
    with pytest.raises(ConfigError, match="loss: unknown value 'barlow'"):
        make_defense("logit-dp", {"loss": "barlow"})
    with pytest.raises(ConfigError, match="freeze: no parameter is or lies under 'encoder.nope'"):
        make_defense("dp-clip", {"freeze": ["encoder.nope"]}).build(make_defense("dp-clip").config.model_spec(
            type("I", (), {"shape": (1, 8, 8)})()), 0)


@pytest.mark.slow  # 9 s: the default run trains through the CLI in test_cli_alm_fedemb.py
def test_cli_trains_a_dp_defense(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "privaudit", "train", "--defense", "dp-gcl", "--dataset", "digits", "--target-epsilon", "10",
         "--param", "epochs=1", "--param", "width=4", "--param", "pretrain_epochs=2", "--json",
         "--out", str(tmp_path / "ckpt")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["claim"]["sampler"] == "poisson"
    assert 9.9 < report["epsilon"]["pld"]["epsilon"] <= 10.0 + 1e-6  # calibrated by PLD (RDP says more)
    assert report["epsilon"]["rdp"]["epsilon"] > 10.0 and report["init"]["init"] == "public"
    assert set(report["utility_panel"]) >= {"trained", "init", "random", "nonprivate", "gap_closed"}
    assert 0 <= report["utility"]["knn_accuracy"] <= 1
    assert (tmp_path / "ckpt" / "model.safetensors").exists()


@pytest.mark.parametrize("params", [{"modality": "dual", "augmentations": 2}, {"multiplicity": 2},
                                    {"negatives": "batch", "grouping": "chunk"}])
def test_dpgcl_variants_release_a_bounded_sum(digits, params):
    d = make_defense("dp-gcl", {**SMALL, "batch_size": 12, "group_size": 3, **params})
    fn = d.quantity_function(digits)
    g = fn("gradient")(digits.train.x[:12], 0)
    norms = fn("norms")(digits.train.x[:12], 0)
    groups = fn("groups")(digits.train.x[:12], 0)
    assert torch.isfinite(g).all() and float(g.norm()) <= len(norms) * d.config.clip * (1 + 1e-6)
    assert len(norms) == len(torch.unique(groups))
    towers = 2 if params.get("modality") == "dual" else 1
    assert g.numel() == towers * sum(p.numel() for p in d.released(d.build(d.model_spec(digits.info), 0)).parameters())


def test_noise_only_control_drops_the_signal(digits):
    run = make_defense("dp-clip", {**SMALL, "signal": False}).prepare(digits, Budget(noise_multiplier=0.0), seed=0)
    metrics = run.step(next(iter(run.batches)))
    assert all(float(p.grad.abs().max()) == 0 for p in run.model.parameters())
    assert metrics["signal_norm"] == 0 and math.isfinite(metrics["loss"])
    assert any("noise-only control" in note for note in run.claim.notes)


@pytest.mark.parametrize("params", [{}, {"modality": "dual"}, {"multiplicity": 2}, {"negatives": "batch"}])
def test_dpgcl_objective_is_the_loss_the_groups_split(digits, params):
    """DP-GCL's non-private objective (the throughput benchmark's comparator) differentiates to the sum of
    the group gradients: the clipped sum with a clip no group reaches."""
    from privaudit.defenses.training.augment import augmentation_for

    d = make_defense("dp-gcl", {**SMALL, "batch_size": 12, "group_size": 3, "clip": 1e9, **params})
    x = digits.train.x[:12]
    model = d.build(d.model_spec(digits.info), 0)
    clipped = d.quantity_function(digits, model)("gradient")(x, 0)
    loss = d.objective(model, d.plan(len(digits.train)), augmentation_for(digits.info, d.config.augmentation), x,
                       StepRandomness(0))
    grads = torch.autograd.grad(loss, [p for p in model.parameters()])
    flat = torch.cat([g.reshape(-1) for g in grads])
    assert flat.shape == clipped.shape and float(flat.norm()) > 0
    assert float((flat - clipped).norm() / clipped.norm()) < 1e-4
