"""RDP -> DP conversions against the libraries and each other; zCDP conversion."""

import math

import numpy as np
import pytest

from privaudit.accountants.rdp.conversions import CONVERSIONS, epsilon_at_order, rdp_to_dp, zcdp_to_dp
from privaudit.core.errors import ConfigError

GRID = [(a, rho, delta) for a in (1.1, 1.5, 2.0, 3.7, 8.0, 32.0, 256.0)
        for rho in (1e-3, 0.05, 0.7, 4.0, 90.0) for delta in (1e-3, 1e-5, 1e-9)]


@pytest.mark.parametrize("alpha,rho,delta", GRID)
def test_balle2020_and_cks2020_are_the_same_formula(alpha, rho, delta):
    balle = epsilon_at_order(alpha, rho, delta, "balle2020")
    cks = epsilon_at_order(alpha, rho, delta, "cks2020")
    assert cks == pytest.approx(balle, rel=1e-12, abs=1e-12)
    # CKS Prop. 12 read as delta(eps): plugging our eps back gives delta.
    log_delta = (alpha - 1) * (rho - cks) - math.log(alpha - 1) + alpha * math.log1p(-1 / alpha)
    assert math.exp(log_delta) == pytest.approx(delta, rel=1e-9)


@pytest.mark.parametrize("alpha,rho,delta", GRID)
def test_mironov_closed_form_and_it_is_looser(alpha, rho, delta):
    mironov = epsilon_at_order(alpha, rho, delta, "mironov")
    assert mironov == pytest.approx(rho + math.log(1 / delta) / (alpha - 1), rel=1e-12)
    gap = math.log(alpha / (alpha - 1)) + math.log(alpha) / (alpha - 1)
    assert mironov - epsilon_at_order(alpha, rho, delta, "balle2020") == pytest.approx(gap, rel=1e-9)


def test_matches_dp_accounting_and_opacus_conversions():
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon
    from opacus.accountants.analysis.rdp import get_privacy_spent

    rng = np.random.default_rng(0)
    orders = [1.25, 1.5, 2, 3, 5, 8, 16, 32, 64, 128]
    for _ in range(30):
        rdp = np.sort(rng.uniform(0.01, 20, len(orders)))
        delta = 10 ** rng.uniform(-10, -3)
        ours, order = rdp_to_dp(orders, rdp, delta, "balle2020")
        theirs, their_order = compute_epsilon(orders, rdp, delta)
        assert ours == pytest.approx(theirs, rel=1e-9) and order == their_order
        opacus, _ = get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
        assert ours == pytest.approx(opacus, rel=1e-9)


def test_edge_cases_and_validation():
    assert math.isinf(rdp_to_dp([2, 4], [math.inf, math.inf], 1e-5)[0])
    assert rdp_to_dp([2, 4], [0.0, 0.0], 0.0)[0] == 0.0
    assert math.isinf(rdp_to_dp([2, 4], [0.1, 0.2], 0.0)[0])
    assert rdp_to_dp([2, 4], [1e-9, 2e-9], 0.5)[0] == 0.0  # clamped at 0
    assert rdp_to_dp([1.0, 2.0], [0.0, 0.5], 1e-5)[1] == 2.0  # order 1 is skipped
    with pytest.raises(ConfigError, match="conversion: unknown value 'renyi'; accepted: mironov, balle2020, cks2020"):
        rdp_to_dp([2], [1], 1e-5, "renyi")
    assert set(CONVERSIONS) == {"mironov", "balle2020", "cks2020"}


def test_zcdp_conversion_is_tighter_than_bun_steinke_and_matches_rdp_grid():
    for rho, delta in [(0.1, 1e-5), (1.28, 1e-7), (5.0, 1e-6)]:
        eps, _ = zcdp_to_dp(rho, delta)
        bun_steinke = rho + 2 * math.sqrt(rho * math.log(1 / delta))  # Bun & Steinke 2016, Prop. 1.3
        assert eps < bun_steinke
        assert zcdp_to_dp(rho, delta, "mironov")[0] == pytest.approx(bun_steinke, rel=1e-4)
        dense = [1 + i / 500 for i in range(1, 25_000)]
        assert eps == pytest.approx(rdp_to_dp(dense, [rho * a for a in dense], delta)[0], rel=1e-4)
