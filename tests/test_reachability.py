"""The reachability test (attacks/step/reachability.py) and ALM's floating-point-safe releases (defenses/alm/grid.py).

Mironov 2012 measured: the textbook float64 logistic release (what ALM released before) puts most of its outputs
where the neighbour cannot reach; the grid releases put none there. The slow variants run 10^6 draws.
"""

import math

import numpy as np
import pytest
import torch

from privaudit.accountants import PrivacyClaim, epsilon
from privaudit.accountants.events import DiscreteGaussianDpEvent, LogisticDpEvent, event_from_dict, event_to_dict
from privaudit.attacks.step.reachability import (Reachability, describe, reachability_test, reachable, recorded_error,
                                            recorded_refutes)
from privaudit.core.errors import ConfigError
from privaudit.defenses.alm.grid import discrete_gaussian, discrete_laplace, discrete_logistic, grid_noise, on_grid
from privaudit.defenses.alm.head import head_as_linear
from privaudit.defenses.alm.mechanisms import (FloatLogisticRelease, SnappedLaplaceRelease, add_noise,
                                               gaussian_calibration, logistic_calibration, release_of)

SENSITIVITY = 1.70  # the digits checkpoint's sampled L1 sensitivity (the setting)
INPUTS = [(0.0, SENSITIVITY), (0.3, SENSITIVITY), (-2.1, 0.01), (0.05, 1e-9)]


def _release(eps: float, mechanism: str = "logistic"):
    if mechanism == "logistic":
        cal = logistic_calibration(eps, l1=SENSITIVITY, clamp_bound=1024.0, coordinates=650)
    else:
        cal = gaussian_calibration(eps, l2=SENSITIVITY, delta=1e-5, clamp_bound=1024.0, coordinates=650)
    return cal, release_of(mechanism, cal.scale, cal.clamp_bound, cal.grid)


# -- the exact samplers --------------------------------------------------------------------------------------
def test_exact_samplers_have_their_mass_functions():
    g = torch.Generator().manual_seed(0)
    k = discrete_laplace(40_000, 3, 1, g).numpy()  # P(k) ~ e^{-|k| / 3}
    p0 = (1 - math.exp(-1 / 3)) / (1 + math.exp(-1 / 3))
    assert np.mean(k == 0) == pytest.approx(p0, abs=0.005) and abs(k.mean()) < 0.05
    k = discrete_logistic(40_000, 7, 2, g).numpy()  # the Logistic(0, 1) density at k 2/7
    z = np.arange(-200, 201) * 2 / 7
    mass = np.exp(-np.abs(z)) / (1 + np.exp(-np.abs(z))) ** 2
    mass /= mass.sum()
    for v in (-3, 0, 2, 8):
        assert np.mean(k == v) == pytest.approx(mass[200 + v], abs=0.006)
    assert np.std(k) * 2 / 7 == pytest.approx(math.pi / math.sqrt(3), rel=0.02)
    k = discrete_gaussian(40_000, 50, g).numpy()
    assert np.var(k) == pytest.approx(50.0, rel=0.03) and abs(k.mean()) < 0.1


def test_grid_release_is_exact_and_reproducible():
    cal, release = _release(1.0)
    x = torch.tensor([0.3, -5.0, 2000.0])  # the last one is clamped to B
    a = release.draw(x.expand(1000, -1), torch.Generator().manual_seed(1))
    b = add_noise(x.expand(1000, -1), "logistic", cal.scale, torch.Generator().manual_seed(1), clamp_bound=1024.0,
                  grid=cal.grid)
    assert torch.equal(a, b) and bool(on_grid(a, release.noise).all()) and a.abs().max() <= 1024.0
    assert abs(float(a[:, 0].mean()) - 0.3) < 0.5 and float(a[:, 2].max()) <= 1024.0
    assert cal.grid <= cal.scale * 2.0 ** -40 and cal.overhead == pytest.approx(650 * cal.grid / cal.scale)


def test_grid_claims_include_the_grid_cost_and_account():
    cal, _ = _release(8.0)
    assert cal.epsilon <= 8.0 and cal.epsilon == pytest.approx(8.0, rel=1e-10)
    claim = PrivacyClaim(LogisticDpEvent(cal.noise_multiplier, cal.overhead), relation="replace-one", unit="example",
                         delta=0.0, paper_accountant="pure")
    assert epsilon(claim, "pure").epsilon == pytest.approx(cal.epsilon, rel=1e-12)
    assert event_from_dict(event_to_dict(claim.event)) == claim.event
    g, _ = _release(2.0, "gaussian")
    gclaim = PrivacyClaim(DiscreteGaussianDpEvent(g.noise_multiplier), relation="replace-one", unit="example",
                          delta=1e-5, paper_accountant="rdp")
    assert epsilon(gclaim, "rdp").epsilon == pytest.approx(g.epsilon, rel=1e-9) and g.epsilon <= 2.0
    assert epsilon(gclaim, "pld").epsilon is None and epsilon(gclaim, "gaussian").epsilon is None
    assert g.grid_cost == pytest.approx(math.sqrt(650) * g.grid / SENSITIVITY)


# -- the reachability test -----------------------------------------------------------------------------------
def _fractions(release, draws: int, seed: int = 0) -> list[Reachability]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for x, d in INPUTS:
        a, b = torch.tensor([x]), torch.tensor([x + d])
        out += [reachability_test(release, a, b, draws, g), reachability_test(release, b, a, draws, g)]
    return out


@pytest.mark.parametrize("eps", [1.0, pytest.param(8.0, marks=pytest.mark.slow)])  # 4 s each: one in the default run
def test_grid_release_has_no_impossible_output(eps):
    for mechanism in ("logistic", "gaussian"):
        _, release = _release(eps, mechanism)
        for r in _fractions(release, 20_000):
            assert (r.impossible, r.self_unreachable, r.method) == (0, 0, "grid") and not r.refutes(0.0)


@pytest.mark.parametrize("eps,least", [(1.0, 0.5), (8.0, 0.95)])
def test_old_float_sampler_is_caught(eps, least):
    """The textbook float64 logistic release at the digits checkpoint's sensitivity: most outputs are impossible
    under the neighbour (issue #47: 0.77 at eps 1, 0.988 at eps 8 over 10^7 draws), in both directions; the
    inversion reproduces every output from its own input."""
    release = FloatLogisticRelease(SENSITIVITY / eps)
    for r in _fractions(release, 5_000)[:4]:  # the pairs at the full sensitivity
        assert r.self_unreachable == 0 and r.method == "inversion"
        assert r.fraction > least and r.refutes(0.5 * least)
        assert "impossible under the neighbour" in describe(r)


def test_snapped_laplace_has_no_impossible_output():
    release = SnappedLaplaceRelease(SENSITIVITY, 1024.0)
    for r in _fractions(release, 5_000):
        assert r.impossible == r.self_unreachable == 0


def test_inversion_finds_exactly_the_reachable_doubles():
    release = FloatLogisticRelease(0.5)
    x = torch.tensor([0.25], dtype=torch.float64)
    k = torch.tensor([1, 2 ** 20, 2 ** 52, 2 ** 53 - 1, 12345678901234])
    y = release.at(x, k)
    assert bool(reachable(release, y, x).all())
    # near u = 1 the images of consecutive k are far apart: the double just above one of them is unreachable
    top = release.at(x, torch.tensor([2 ** 53 - 3]))
    assert not bool(reachable(release, torch.nextafter(top, torch.tensor([math.inf], dtype=torch.float64)), x).any())


def test_a_release_outside_its_stated_support_is_flagged():
    _, release = _release(1.0)
    x = torch.tensor([0.3])
    outputs = FloatLogisticRelease(release.noise.scale).draw(x.expand(1000, -1), torch.Generator().manual_seed(0))
    r = reachability_test(release, x, x + SENSITIVITY, 1000, torch.Generator(), outputs=outputs)
    assert r.self_unreachable > 900 and recorded_refutes(r.to_dict(), 0.0)  # a grid claim with off-grid outputs
    bad = {**r.to_dict(), "method": "inversion"}
    assert recorded_error(bad) and not recorded_refutes(bad, 0.0)
    with pytest.raises(ConfigError, match="reachability: cannot invert"):
        reachable(object(), torch.zeros(1), torch.zeros(1))


def test_float32_classifier_of_the_grid_release_has_the_neighbours_support():
    """The saved classifier (float32 nn.Linear with the standardisation folded in) is a function of the released
    weights; every grid release drawn at x is reachable from x', so every classifier saved from it is one the
    neighbour's release can also yield (the same released weights map to the same classifier bit for bit)."""
    cal, release = _release(8.0)
    g = torch.Generator().manual_seed(3)
    w = torch.randn(3, 5, dtype=torch.float64, generator=g) * 0.01  # near-zero weights, where float32 hid least
    w_neighbour = w.clone()
    w_neighbour[0, 0] += SENSITIVITY
    mean, std = torch.randn(4, dtype=torch.float64, generator=g), torch.rand(4, dtype=torch.float64, generator=g) + 0.5
    for _ in range(200):
        out = add_noise(w, "logistic", cal.scale, g, clamp_bound=1024.0, grid=cal.grid)
        assert bool(reachable(release, out, w_neighbour).all())
        a, b = head_as_linear(out, mean, std), head_as_linear(out.clone(), mean, std)
        assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)


@pytest.mark.slow
@pytest.mark.parametrize("eps", [1.0, 8.0])
def test_grid_release_has_no_impossible_output_in_a_million_draws(eps):
    """The acceptance run: 10^6 draws per direction for several inputs and sensitivities (the logistic default and
    the Gaussian option), 0 impossible outputs."""
    for mechanism in ("logistic", "gaussian"):
        _, release = _release(eps, mechanism)
        for r in _fractions(release, 1_000_000, seed=int(eps)):
            assert r.impossible == r.self_unreachable == 0
