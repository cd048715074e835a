"""Sampled sensitivity: Rubinstein–Aldà's parameters and guarantee, ALM Algorithm 2, on closed forms.

Two training algorithms with sensitivities known in closed form:
* the mean of bounded vectors in [0, 1]^d: global replace-one sensitivity d/n (L1), sqrt(d)/n (L2),
  and, under an oracle P uniform over a finite pool, the exact distribution of ||x - x'|| / n;
* ridge regression (closed-form solution): the exact maximum over all remove-one pairs by
  enumeration, checked against scikit-learn.
"""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.stats import binom

from privaudit.core.errors import ConfigError
from privaudit.defenses.sensitivity_sampling import (exceedance_bound, exhaustive_remove_one, fit_from_trainer, leave_one_out_fits,
                                       oracle_pairs,
                                       order_statistic, remove_one_pairs, rubinstein_alda_parameters,
                                       sample_sensitivity_alm, sample_sensitivity_rubinstein_alda)


# -- Rubinstein & Aldà's parameters -------------------------------------------------------------------
@pytest.mark.parametrize("m", [50, 100, 500, 1000])
def test_ra_gamma_for_given_m_is_the_minimum_over_rho(m):
    params = rubinstein_alda_parameters(m=m)
    assert params.k == m
    # Independent check: minimise rho + sqrt(ln(1/rho) / (2m)) numerically.
    res = minimize_scalar(lambda r: r + math.sqrt(math.log(1 / r) / (2 * m)), bounds=(1e-9, 0.5), method="bounded",
                          options={"xatol": 1e-12})
    assert params.gamma == pytest.approx(res.fun, rel=1e-6)
    assert params.rho == pytest.approx(res.x, rel=1e-3)


def test_ra_known_values():
    assert rubinstein_alda_parameters(m=500).gamma == pytest.approx(0.07744, abs=1e-4)
    assert rubinstein_alda_parameters(m=100).gamma == pytest.approx(0.15972, abs=1e-4)


@pytest.mark.parametrize("gamma", [0.05, 0.1, 0.33])
def test_ra_m_for_given_gamma_is_minimal(gamma):
    params = rubinstein_alda_parameters(gamma=gamma)
    assert params.gamma == gamma and 1 <= params.k <= params.m
    # Theorem 4's condition holds at m (k in [1, m]) but no rho makes it hold at m - 1.
    assert params.rho + math.sqrt(math.log(1 / params.rho) / (2 * params.m)) <= gamma
    res = minimize_scalar(lambda r: r + math.sqrt(math.log(1 / r) / (2 * (params.m - 1))), bounds=(1e-9, gamma),
                          method="bounded", options={"xatol": 1e-12})
    assert res.fun > gamma * (1 - 1e-6)


def test_ra_order_statistic_index_for_given_m_and_gamma():
    p = rubinstein_alda_parameters(m=500, gamma=0.2)
    floor = p.rho + math.sqrt(math.log(1 / p.rho) / 1000)
    assert p.k == math.ceil(500 * (1 - 0.2 + floor))
    assert p.k < 500  # a looser confidence allows a lower order statistic
    with pytest.raises(ConfigError, match="gamma: 0.01 is below"):
        rubinstein_alda_parameters(m=500, gamma=0.01)
    with pytest.raises(ConfigError, match="give m, gamma or both"):
        rubinstein_alda_parameters()


def test_exceedance_bound_of_the_maximum():
    assert exceedance_bound(100, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert exceedance_bound(100, 90, 0.05) > exceedance_bound(100, 100, 0.05)
    assert order_statistic(torch.tensor([3.0, 1.0, 2.0]), 2) == 2.0


def test_pairs_are_neighbours():
    g = torch.Generator().manual_seed(0)
    pairs = remove_one_pairs(10, 1000, g)
    assert (pairs[:, 0] != pairs[:, 1]).all() and pairs.min() >= 0 and pairs.max() < 10
    assert len(torch.unique(pairs[:, 1] - pairs[:, 0])) == 19 - 1  # every offset except 0 occurs
    w1, w2 = oracle_pairs(7, 20, 50, g)
    assert (w1.sum(1) == 20).all() and (w2.sum(1) == 20).all()
    assert ((w1 - w2).abs().sum(1) <= 2).all()  # the databases differ in (at most) one record


# -- the mean of bounded vectors: R–A's guarantee against the exact distribution -----------------------
def _mean_fit(pool: torch.Tensor):
    return lambda w: (w @ pool.double()) / w.sum(dim=1, keepdim=True)


def test_ra_sampler_on_the_mean_holds_its_stated_confidence():
    """Over many sampler runs, P[G > estimate] <= gamma - rho except with probability <= rho (Thm. 4)."""
    d, n, m, runs = 3, 50, 100, 300
    g = torch.Generator().manual_seed(1)
    pool = torch.rand(200, d, generator=g, dtype=torch.float64)
    fit = _mean_fit(pool)
    # G = ||x - x'|| / n for x, x' i.i.d. uniform over the pool: its exact distribution by enumeration.
    exact = {"l1": torch.cdist(pool, pool, p=1).flatten() / n, "l2": torch.cdist(pool, pool, p=2).flatten() / n}
    params = rubinstein_alda_parameters(m=m)
    exceed = {"l1": [], "l2": []}
    for _ in range(runs):
        est = sample_sensitivity_rubinstein_alda(fit, len(pool), n, g, m=m)
        for norm in ("l1", "l2"):
            assert est[norm].value <= (d if norm == "l1" else math.sqrt(d)) / n  # never above the global sensitivity
            exceed[norm].append(float((exact[norm] > est[norm].value).double().mean()))
    for norm in ("l1", "l2"):
        e = np.array(exceed[norm])
        failures = int((e > params.gamma - params.rho).sum())
        assert failures <= binom.ppf(0.999, runs, params.rho)
        assert e.mean() <= params.gamma  # the joint guarantee
        assert e.mean() <= 1.5 / (m + 1) + 3 * e.std() / math.sqrt(runs)  # and the exact order-statistic value


def test_ra_sampler_with_lower_order_statistic():
    g = torch.Generator().manual_seed(2)
    pool = torch.rand(100, 2, generator=g, dtype=torch.float64)
    est = sample_sensitivity_rubinstein_alda(_mean_fit(pool), 100, 20, g, m=400, gamma=0.2)
    exact = torch.cdist(pool, pool, p=1).flatten() / 20
    assert est["l1"].k < 400 and est["l1"].gamma == 0.2
    assert float((exact > est["l1"].value).double().mean()) <= 0.2
    assert "random DP with gamma=0.2" in est["l1"].describe()


def test_alm_sampler_recovers_global_sensitivity_of_the_mean_at_extreme_records():
    """With records at the corners of [0,1]^d, remove-one pairs reach the global sensitivity d/n."""
    d, n = 4, 30
    g = torch.Generator().manual_seed(3)
    corners = torch.randint(0, 2, (n, d), generator=g).double()
    corners[0], corners[1] = 0.0, 1.0  # two opposite corners
    est = sample_sensitivity_alm(_mean_fit(corners), n, 2000, g)
    assert est["l1"].value == pytest.approx(d / (n - 1))  # databases of n - 1 records
    assert est["l2"].value == pytest.approx(math.sqrt(d) / (n - 1))
    assert est["l1"].fits <= n and "SAMPLED" in est["l1"].describe()


# -- ridge regression: closed-form fits, exact local sensitivity by enumeration -----------------------
def _ridge_problem(n=40, d=3, lam=0.1, seed=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)[:d] + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)
    y[0] += 5.0  # an outlier: its removal moves the fit most

    def fit(w: torch.Tensor) -> torch.Tensor:
        """argmin (1/sum w) sum_i w_i (y_i - x_i.b)^2 + lam ||b||^2, in closed form, batched."""
        mass = w.sum(1, keepdim=True)
        a = torch.einsum("bn,nd,ne->bde", w / mass, x, x) + lam * torch.eye(d, dtype=torch.float64)
        rhs = torch.einsum("bn,nd,n->bd", w / mass, x, y)
        return torch.linalg.solve(a, rhs)

    return x, y, lam, fit


def test_ridge_fit_matches_scikit_learn():
    from sklearn.linear_model import Ridge

    x, y, lam, fit = _ridge_problem()
    loo = leave_one_out_fits(fit, len(x), torch.tensor([0, 7]))
    for row, removed in zip(loo, (0, 7)):
        keep = np.delete(np.arange(len(x)), removed)
        ref = Ridge(alpha=lam * len(keep), fit_intercept=False).fit(x[keep].numpy(), y[keep].numpy())
        np.testing.assert_allclose(row.numpy(), ref.coef_, rtol=1e-8, atol=1e-10)


def test_alm_sampler_on_ridge_regression_within_stated_confidence():
    x, y, lam, fit = _ridge_problem()
    n = len(x)
    outputs = leave_one_out_fits(fit, n, torch.arange(n))
    exact = {"l1": torch.cdist(outputs, outputs, p=1), "l2": torch.cdist(outputs, outputs, p=2)}
    offdiag = ~torch.eye(n, dtype=torch.bool)
    assert exhaustive_remove_one(fit, n) == pytest.approx({k: float(v.max()) for k, v in exact.items()})
    m, beta, runs = 25, 0.05, 300
    bound = exceedance_bound(m, m, beta)
    g = torch.Generator().manual_seed(5)
    failures = {"l1": 0, "l2": 0}
    for _ in range(runs):
        est = sample_sensitivity_alm(fit, n, m, g)
        for norm in failures:
            assert est[norm].value <= float(exact[norm].max()) + 1e-12
            share = float((exact[norm][offdiag] > est[norm].value).double().mean())  # pairs i != j exceeding it
            failures[norm] += share > bound
    for norm, count in failures.items():
        assert count <= binom.ppf(0.999, runs, beta)


def test_black_box_trainer_adapter_equals_the_weighted_fit():
    g = torch.Generator().manual_seed(6)
    pool = torch.rand(30, 2, generator=g, dtype=torch.float64)
    black_box = fit_from_trainer(lambda idx: pool[idx].mean(0))
    w1, w2 = oracle_pairs(30, 12, 5, g)
    torch.testing.assert_close(black_box(w1), _mean_fit(pool)(w1))
    a = sample_sensitivity_alm(black_box, 30, 50, torch.Generator().manual_seed(0))
    b = sample_sensitivity_alm(_mean_fit(pool), 30, 50, torch.Generator().manual_seed(0))
    assert a["l2"].value == pytest.approx(b["l2"].value, rel=1e-12)
