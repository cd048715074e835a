"""The Additive Logistic Mechanism: noise and calibration, deterministic head fine-tuning, the defense."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from privaudit.accountants.events import DiscreteGaussianDpEvent, LogisticDpEvent, SnappingDpEvent
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget, Trained, make_defense
from privaudit.defenses.alm.curve import head_accuracy, privacy_utility_curve, utility_loss
from privaudit.defenses.alm.head import HeadProblem, fit_heads, gradient, head_as_linear, hessian, newton_solve, objective
from privaudit.accountants.gaussian import (analytic_gaussian_delta, analytic_gaussian_epsilon,
                                  analytic_gaussian_noise_multiplier, classical_gaussian_noise_multiplier)
from privaudit.defenses.alm.mechanisms import (calibrate_noise, discrete_gaussian_epsilon, epsilon_of_noise,
                                               noise_std, standard_noise)


# -- mechanisms ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism,dist", [("logistic", stats.logistic), ("laplace", stats.laplace),
                                            ("gaussian", stats.norm)])
def test_standard_noise_has_the_right_distribution(mechanism, dist):
    x = standard_noise(mechanism, (20000,), torch.Generator().manual_seed(0)).numpy()
    assert stats.kstest(x, dist.cdf).pvalue > 0.01
    assert x.std() == pytest.approx(noise_std(mechanism, 1.0), rel=0.03)


def test_logistic_privacy_loss_is_bounded_by_delta_over_s_and_tight():
    """Thm. 4.1: |log p(z - f(x)) - log p(z - f(y))| <= |f(x) - f(y)| / s, approached as |z| grows."""
    s, fx, fy = 0.7, 0.3, 1.1
    z = np.linspace(-30, 30, 20001)
    loss = stats.logistic.logpdf(z, loc=fx, scale=s) - stats.logistic.logpdf(z, loc=fy, scale=s)
    bound = abs(fx - fy) / s
    assert np.abs(loss).max() <= bound + 1e-9
    assert np.abs(loss).max() == pytest.approx(bound, rel=1e-6)


def test_analytic_gaussian_matches_dp_accounting_pld():
    from dp_accounting import GaussianDpEvent as G
    from dp_accounting.pld import PLDAccountant

    for z, delta in [(1.0, 1e-5), (0.5, 1e-3), (3.0, 1e-6)]:
        acc = PLDAccountant()
        acc.compose(G(z))
        assert analytic_gaussian_epsilon(z, delta) == pytest.approx(acc.get_epsilon(delta), rel=0.01)
    z = analytic_gaussian_noise_multiplier(2.0, 1e-5)
    assert analytic_gaussian_delta(z, 2.0) == pytest.approx(1e-5, rel=1e-6)
    assert analytic_gaussian_epsilon(z, 1e-5) == pytest.approx(2.0, rel=1e-6)


def test_analytic_gaussian_without_the_library_function_solves_the_same_theorem(monkeypatch):
    """dp-accounting < 0.6 has no get_epsilon_gaussian: the root of Balle & Wang's delta(eps) replaces it."""
    import dp_accounting

    library = getattr(dp_accounting, "get_epsilon_gaussian", None)
    monkeypatch.delattr(dp_accounting, "get_epsilon_gaussian", raising=False)
    for z, delta in [(0.3, 1e-3), (1.0, 1e-5), (5.0, 1e-9), (50.0, 1e-5)]:
        eps = analytic_gaussian_epsilon(z, delta)
        assert analytic_gaussian_delta(z, eps) == pytest.approx(delta, rel=1e-6)
        if library is not None:
            assert eps == pytest.approx(library(z, delta), rel=1e-8, abs=1e-10)
    assert analytic_gaussian_epsilon(1e9, 1e-5) == 0.0 and analytic_gaussian_epsilon(0.0, 1e-5) == math.inf


def test_classical_gaussian_claims_what_its_noise_gives():
    assert classical_gaussian_noise_multiplier(0.5, 1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    for eps in (0.5, 5.0):
        cal = calibrate_noise("gaussian", eps, l1=1, l2=1, delta=1e-5, gaussian="classical", clamp_bound=1024.0,
                              coordinates=10)
        assert cal.valid and cal.epsilon == pytest.approx(discrete_gaussian_epsilon(cal.noise_multiplier, 1e-5))
    # At large epsilon the classical sigma is *smaller* than the exact one: it under-noises.
    assert classical_gaussian_noise_multiplier(10, 1e-5) < analytic_gaussian_noise_multiplier(10, 1e-5)


def test_calibration_uses_the_right_norm_and_inverts():
    cal = calibrate_noise("logistic", 2.0, l1=3.0, l2=0.5, clamp_bound=1024.0, coordinates=10)
    assert cal.norm == "l1" and cal.delta == 0.0 and cal.calibration == "grid"
    # s = (Delta_1 + d Lambda) / eps, rounded up to the sampler's integers: the claimed eps is the target to 1e-11
    assert cal.scale == pytest.approx(1.5, rel=1e-10) and cal.epsilon <= 2.0 and cal.epsilon == pytest.approx(2.0)
    assert cal.overhead == pytest.approx(10 * cal.grid / cal.scale) and cal.grid <= 1.5 * 2.0 ** -40
    assert cal.std == pytest.approx(cal.scale * math.pi / math.sqrt(3))
    lap = calibrate_noise("laplace", 2.0, l1=3.0, l2=0.5, clamp_bound=1024.0, coordinates=10)
    assert lap.std < cal.std  # logistic adds more noise at equal eps (snapped Laplace: lambda ~ Delta_1 / eps)
    g = calibrate_noise("gaussian", 2.0, l1=3.0, l2=0.5, delta=1e-5, clamp_bound=1024.0, coordinates=10)
    assert g.norm == "l2" and g.epsilon <= 2.0 and g.epsilon == pytest.approx(2.0, rel=1e-6)
    # the zCDP calibration adds more noise than the continuous Gaussian's analytic curve would need
    assert g.scale > 0.5 * analytic_gaussian_noise_multiplier(2.0, 1e-5)
    assert g.noise_multiplier == pytest.approx(g.scale / (0.5 + math.sqrt(10) * g.grid))
    assert epsilon_of_noise("gaussian", g.noise_multiplier, delta=1e-5) == pytest.approx(2.0, rel=1e-6)
    assert epsilon_of_noise("logistic", cal.noise_multiplier) + cal.overhead == pytest.approx(cal.epsilon)
    with pytest.raises(ConfigError, match="mechanism: unknown value 'cauchy'"):
        calibrate_noise("cauchy", 1.0, l1=1, l2=1, clamp_bound=1024.0, coordinates=10)
    with pytest.raises(ConfigError, match="clamp_bound: the logistic release needs"):
        calibrate_noise("logistic", 1.0, l1=1, l2=1)


# -- head fine-tuning ---------------------------------------------------------------------------------
def _problem(n=80, d=5, k=4, lam=0.05, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = 2 * torch.randn(k, d, generator=g)
    y = torch.randint(0, k, (n,), generator=g)
    x = centers[y] + torch.randn(n, d, generator=g)
    return HeadProblem.from_features(x, y, k, lam)


def test_gradient_and_hessian_match_autograd():
    p = _problem()
    w = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    weights = torch.rand(p.size, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 2
    f = lambda v: objective(p, v.view(1, 4, 6), weights.view(1, -1))[0]  # noqa: E731
    grad = torch.autograd.functional.jacobian(f, w.reshape(-1))
    hess = torch.autograd.functional.hessian(f, w.reshape(-1))
    torch.testing.assert_close(gradient(p, w.unsqueeze(0), weights.view(1, -1)).reshape(-1), grad)
    torch.testing.assert_close(hessian(p, w, weights), hess)


def test_batched_fine_tuning_equals_separate_solves_and_is_deterministic():
    p = _problem()
    ref = newton_solve(p, torch.ones(p.size, dtype=torch.float64))
    weights = torch.ones(6, p.size, dtype=torch.float64)
    weights[torch.arange(5), torch.arange(5)] = 0  # five remove-one datasets
    weights[5] = torch.randint(0, 3, (p.size,), generator=torch.Generator().manual_seed(3)).double()  # a bootstrap-like one
    batched = fit_heads(p, weights, reference=ref[:2], tol=1e-11)
    assert batched.max_grad_norm <= 1e-11
    for b in range(6):
        alone = newton_solve(p, weights[b], tol=1e-11)[0]
        torch.testing.assert_close(batched.weights[b], alone, atol=1e-9, rtol=0)
    again = fit_heads(p, weights, reference=ref[:2], tol=1e-11)
    assert torch.equal(again.weights, batched.weights)


def test_released_linear_equals_the_standardised_head():
    p = _problem()
    w = newton_solve(p, torch.ones(p.size, dtype=torch.float64))[0]
    g = torch.Generator().manual_seed(4)
    raw = torch.randn(10, 5, dtype=torch.float64, generator=g)
    mean, std = torch.randn(5, dtype=torch.float64, generator=g), torch.rand(5, dtype=torch.float64, generator=g) + 0.5
    linear = head_as_linear(w, mean, std)
    expected = torch.cat([(raw - mean) / std, torch.ones(10, 1, dtype=torch.float64)], 1) @ w.T
    torch.testing.assert_close(linear(raw.float()).double(), expected, atol=1e-5, rtol=1e-5)


def test_utility_loss_and_curve():
    assert utility_loss(0.45, 0.9) == pytest.approx(0.5)  # Def. 6.1
    p = _problem(n=200)
    w = newton_solve(p, torch.ones(p.size, dtype=torch.float64))[0]
    rows = privacy_utility_curve(w, p.x, p.y, l1=0.5, l2=0.1, epsilons=[0.1, 100.0], delta=1e-5,
                                 gen=torch.Generator().manual_seed(0), draws=10)
    assert [r["mechanism"] for r in rows[::2]] == ["logistic", "laplace", "gaussian-zcdp", "gaussian-classical"]
    clean = float(head_accuracy(w, p.x, p.y))
    for low, high in zip(rows[::2], rows[1::2]):
        assert high["utility_loss_mean"] < low["utility_loss_mean"]
        assert high["accuracy_clean"] == clean and abs(high["utility_loss_mean"]) < 0.05
    assert all(r["valid"] for r in rows)  # the classical rows claim what their noise gives
    assert rows[7]["epsilon_claimed"] > 100.0 > rows[5]["epsilon_claimed"]  # the paper's formula under-noises
    tiny = privacy_utility_curve(w, p.x, p.y, l1=0.5, l2=0.1, epsilons=[1e-4], delta=1e-5, mechanisms=["laplace"],
                                 gen=torch.Generator().manual_seed(0), draws=2, clamp_bound=1024.0)
    assert not tiny[0]["valid"] and "clamp_bound: must lie in" in tiny[0]["reason"]  # lambda 5000 > B


# -- the defense ---------------------------------------------------------------------------------------
TINY = dict(epochs=1, width=8, rep_dim=16, sensitivity_m=40, curve_draws=3, curve_epsilons=[1.0, 10.0])


@pytest.fixture(scope="module")
def alm_logistic(digits):
    return make_defense("alm", exhaustive_pairs=True, **TINY).fit(digits, Budget(target_epsilon=2.0), seed=0,
                                                                  progress=False)


def test_alm_claim_states_sampled_sensitivity(alm_logistic, digits):
    t = alm_logistic
    claim = t.claim
    l1 = t.extras["sensitivity"]["l1"]["value"]
    assert isinstance(claim.event, LogisticDpEvent) and claim.event.noise_multiplier == pytest.approx(0.5)
    assert (claim.relation, claim.unit, claim.delta, claim.paper_accountant) == ("replace-one", "example", 0.0, "pure")
    assert t.extras["release"]["scale"] == pytest.approx(l1 / 2.0)  # s = Delta_1 / eps
    assert "SAMPLED" in claim.notes[0] and "m=40" in claim.notes[0] and "ALM Algorithm 2" in claim.notes[0]
    assert claim.params["m"] == 40 and claim.params["sensitivity_l1"] == l1
    exhaustive = t.extras["sensitivity"]["exhaustive"]
    assert exhaustive["l1"] >= l1 and "exact maximum over all" in claim.notes[2]
    assert len(t.extras["curve"]["rows"]) == 8


def test_alm_releases_a_linear_classifier_that_round_trips(alm_logistic, digits, tmp_path):
    t = alm_logistic
    acc = float((t.logits(digits.test.x).argmax(1) == digits.test.y).float().mean())
    assert acc == pytest.approx(t.extras["utility"]["head_accuracy_released"], abs=1e-6)
    assert t.extras["utility"]["head_accuracy_clean"] > 0.3  # chance is 0.1; the tiny encoder is weak
    loaded = Trained.load(t.save(tmp_path / "alm"))
    torch.testing.assert_close(loaded.logits(digits.test.x), t.logits(digits.test.x))
    assert loaded.claim == t.claim


def test_alm_fit_is_deterministic_and_reuses_features(digits, monkeypatch):
    import privaudit.defenses.alm.defense as alm_module

    calls = []
    real_embed = alm_module.embed
    monkeypatch.setattr(alm_module, "embed", lambda *a, **k: calls.append(1) or real_embed(*a, **k))
    budget = Budget(target_epsilon=1.0, delta=1e-5)
    runs = [make_defense("alm", mechanism="gaussian", exhaustive_pairs=False, **TINY).fit(digits, budget, seed=3,
                                                                                           progress=False)
            for _ in range(2)]
    assert len(calls) == 6  # public, members and test encoded once per fit, however many pairs are sampled
    assert torch.equal(runs[0].classifier.weight, runs[1].classifier.weight)
    for norm in ("l1", "l2"):
        assert runs[0].extras["sensitivity"][norm]["value"] == runs[1].extras["sensitivity"][norm]["value"]
    claim = runs[0].claim
    assert isinstance(claim.event, DiscreteGaussianDpEvent) and claim.delta == 1e-5
    assert claim.paper_accountant == "rdp"
    assert discrete_gaussian_epsilon(claim.event.noise_multiplier, 1e-5) == pytest.approx(1.0, rel=1e-6)


def test_alm_budgets(digits):
    fixed = make_defense("alm", mechanism="laplace", exhaustive_pairs=False, **TINY).fit(
        digits, Budget(noise_multiplier=0.25), seed=0, progress=False)
    p = fixed.claim.params
    assert isinstance(fixed.claim.event, SnappingDpEvent) and p["clamp_bound"] == 1024.0 and p["coordinates"] == 170
    overhead = 170 * 2.0 ** -49 * 1024.0 / (0.25 * p["sensitivity_l1"])  # Mironov 2012 Thm. 1, per coordinate
    assert p["snapping_overhead"] == pytest.approx(overhead, rel=1e-12) and p["epsilon"] == 4.0 + p["snapping_overhead"]
    assert fixed.extras["release"]["grid"] == 2.0 ** math.ceil(math.log2(0.25 * p["sensitivity_l1"]))
    none = make_defense("alm", exhaustive_pairs=False, **TINY).fit(digits, Budget(), seed=0, progress=False)
    assert not none.claim.is_private and none.extras["utility"]["utility_loss"] == 0.0


def test_alm_rubinstein_alda_claim(digits):
    t = make_defense("alm", sensitivity_sampler="rubinstein-alda", exhaustive_pairs=False, **TINY).fit(
        digits, Budget(target_epsilon=1.0), seed=0, progress=False)
    s = t.extras["sensitivity"]["l1"]
    assert s["method"] == "rubinstein-alda" and s["k"] == 40
    assert s["gamma"] == pytest.approx(s["rho"] + math.sqrt(math.log(1 / s["rho"]) / 80))
    assert "random DP with gamma=" in t.claim.notes[0] and t.claim.params["gamma"] == s["gamma"]


def test_alm_on_the_frozen_untrained_encoder_needs_no_public_data(digits):
    """``init = random``: the encoder is the seeded initialisation (never trained), so the public split may be empty;
    with it empty the features are left unstandardised (the members' statistics would be a release), and the head
    still classifies the test images well above chance (0.1; a lighter L2 weight than the default suits unscaled
    features)."""
    from privaudit.core.datasets import SplitConfig, load_dataset
    from privaudit.defenses.nn.model import build_model

    whole = load_dataset("digits", seed=0, splits=SplitConfig(public=0.0, shadow=0.0, inclusion_probability=1.0))
    alm = make_defense("alm", init="random", exhaustive_pairs=False, head_l2=1e-3, **TINY)
    t = alm.fit(whole, Budget(target_epsilon=10.0), seed=0, progress=False)
    untrained = build_model(t.spec, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(t.model.state_dict().values(), untrained.state_dict().values()))
    assert t.history == {"step": []} and t.extras["utility"]["head_accuracy_clean"] > 0.3
    mean, std = alm._feature_scale(t.model, whole, "cpu")
    assert torch.equal(mean, torch.zeros(16, dtype=torch.float64)) and torch.equal(std, torch.ones(16, dtype=torch.float64))
    with pytest.raises(ConfigError, match="public split, which is empty here"):
        make_defense("alm", exhaustive_pairs=False, **TINY).fit(whole, Budget(target_epsilon=1.0), seed=0,
                                                               progress=False)


def test_alm_config_is_validated():
    with pytest.raises(ConfigError, match="init: unknown value 'imagenet'; accepted: public, random"):
        make_defense("alm", init="imagenet")
    with pytest.raises(ConfigError, match="mechanism: unknown value 'cauchy'; accepted: logistic, laplace, gaussian"):
        make_defense("alm", mechanism="cauchy")
    with pytest.raises(ConfigError, match="sensitivity_sampler: unknown value"):
        make_defense("alm", sensitivity_sampler="magic")
    with pytest.raises(ConfigError, match="curve_epsilons: every epsilon must be a number > 0"):
        make_defense("alm", curve_epsilons=[1.0, -2.0])


def test_alm_privatized_quantity(digits):
    (q,) = make_defense("alm", **TINY).privatized_quantities(digits)
    assert (q.claim_id, q.relation, q.norm) == ("alm.head-weights", "replace-one", "l1")
    x, y = digits.train.x[:60], digits.train.y[:60]
    a = q.fn((x, y), None)
    b = q.fn((torch.cat([x[:-1], digits.holdout.x[:1]]), torch.cat([y[:-1], digits.holdout.y[:1]])), None)
    assert a.shape == (10 * 17,) and torch.equal(a, q.fn((x, y), None))
    assert (a - b).abs().sum() > 0 and q.bound(q.params) == q.params["sensitivity_l1"] > 0
