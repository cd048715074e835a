"""LiRA's score functions against an independent computation on synthetic Gaussian statistics.

Each candidate's statistic is drawn from N(mu_in, s_in^2) when it is a member and N(mu_out, s_out^2)
otherwise, with per-candidate parameters, so the true likelihood ratio is known in closed form.
"""

import numpy as np
import pytest
from scipy import stats

from privaudit.attacks import metrics
from privaudit.attacks.membership.lira import (GaussianFit, fit_gaussians, lira_scores, offline_reference_scores,
    offline_scores, online_scores)
from privaudit.attacks.membership.shadow_models import balanced_masks, paired_masks
from privaudit.core.errors import ConfigError


def synthetic(n=300, k=2000, q=2, seed=0, homoscedastic=False):
    rng = np.random.default_rng(seed)
    mu_out = rng.normal(0, 1, (n, 1)).repeat(q, 1) + rng.normal(0, 0.1, (n, q))
    mu_in = mu_out + rng.uniform(0.3, 2.0, (n, 1))
    sd_in = np.full((n, q), 0.8) if homoscedastic else rng.uniform(0.5, 1.5, (n, q))
    sd_out = np.full((n, q), 0.8) if homoscedastic else rng.uniform(0.5, 1.5, (n, q))
    keep = balanced_masks(k, n, rng)
    shadow = np.where(keep[..., None], rng.normal(mu_in, sd_in, (k, n, q)), rng.normal(mu_out, sd_out, (k, n, q)))
    membership = rng.random(n) < 0.5
    target = np.where(membership[:, None], rng.normal(mu_in, sd_in), rng.normal(mu_out, sd_out))
    return GaussianFit(mu_in, sd_in, mu_out, sd_out), shadow, keep, target, membership


def test_scores_equal_the_closed_form_given_the_true_gaussians():
    truth, _, _, x, _ = synthetic(k=4)
    true_llr = (stats.norm.logpdf(x, truth.mu_in, truth.sd_in) - stats.norm.logpdf(x, truth.mu_out, truth.sd_out))
    np.testing.assert_allclose(online_scores(x, truth), true_llr.mean(axis=1), rtol=1e-12)
    z = (x - truth.mu_out) / truth.sd_out
    np.testing.assert_allclose(offline_scores(x, truth), np.log(stats.norm.cdf(z)).mean(axis=1), rtol=1e-9)
    np.testing.assert_allclose(offline_reference_scores(x, truth),
                               (0.5 * z ** 2 + np.log(truth.sd_out * np.sqrt(2 * np.pi))).mean(axis=1), rtol=1e-12)


def test_fitted_gaussians_match_a_direct_computation():
    _, shadow, keep, _, _ = synthetic(n=20, k=16, q=3)
    fit = fit_gaussians(shadow, keep)
    for i in range(20):
        ins, outs = shadow[keep[:, i], i], shadow[~keep[:, i], i]
        np.testing.assert_allclose(fit.mu_in[i], ins.mean(0))
        np.testing.assert_allclose(fit.sd_out[i], outs.std(0, ddof=1))
    fixed = fit_gaussians(shadow, keep, fixed_variance=True)
    resid = sum(((shadow[keep[:, i], i] - shadow[keep[:, i], i].mean(0)) ** 2).sum(0) for i in range(20))
    np.testing.assert_allclose(fixed.sd_in[0], np.sqrt(resid / (20 * 7)))
    med = fit_gaussians(shadow, keep, location="median")
    np.testing.assert_allclose(med.mu_out[3], np.median(shadow[~keep[:, 3], 3], axis=0))


def test_estimated_scores_converge_to_the_true_likelihood_ratio():
    truth, shadow, keep, x, membership = synthetic()
    fit = fit_gaussians(shadow, keep)
    half = keep.shape[0] // 2  # models per side
    for side in ("in", "out"):  # within 5 standard errors of the true mean and standard deviation
        sd = getattr(truth, f"sd_{side}")
        assert np.all(np.abs(getattr(fit, f"mu_{side}") - getattr(truth, f"mu_{side}")) < 5 * sd / np.sqrt(half))
        assert np.all(np.abs(getattr(fit, f"sd_{side}") - sd) < 5 * sd / np.sqrt(2 * half))
    estimated, exact = online_scores(x, fit), online_scores(x, truth)
    assert np.corrcoef(estimated, exact)[0, 1] > 0.999
    assert np.all(np.abs(estimated - exact) < 0.2 * (1 + np.abs(exact)))
    assert np.median(np.abs(estimated - exact)) < 0.06
    # Neyman-Pearson: the true likelihood ratio is the most powerful test; LiRA gets within 0.01 AUC.
    assert metrics.auc(estimated, membership) == pytest.approx(metrics.auc(exact, membership), abs=0.01)


def test_fixed_variance_recovers_a_shared_scale_and_all_variants_are_scored():
    truth, shadow, keep, x, membership = synthetic(homoscedastic=True, k=64)
    fixed = fit_gaussians(shadow, keep, fixed_variance=True)
    np.testing.assert_allclose(fixed.sd_in, 0.8, rtol=0.02)
    np.testing.assert_allclose(fixed.sd_out, 0.8, rtol=0.02)
    variants = lira_scores(x, shadow, keep)
    assert set(variants) == {"online", "online-fixed", "offline", "offline-fixed", "offline-reference",
                             "offline-reference-fixed"}
    aucs = {k: metrics.auc(v, membership) for k, v in variants.items()}
    assert aucs["online-fixed"] > 0.75 and aucs["online-fixed"] >= aucs["offline-fixed"] - 0.02
    # The one-sided offline test is monotone in phi for a fixed OUT fit; the two-sided one is not.
    order = np.argsort(x[:, 0])
    one_q = fit_gaussians(shadow[..., :1], keep, fixed_variance=True)
    z_sorted = ((x[:, :1] - one_q.mu_out) / one_q.sd_out)[order, 0]
    assert np.all(np.diff(offline_scores(x[:, :1], one_q)[order][np.argsort(z_sorted)]) >= 0)


def test_paired_masks_balance_every_even_prefix():
    """Paired masks: each even prefix of the models holds every example in exactly half of them, each model about
    n / 2 examples; balanced masks (one random subset per example) have unbalanced prefixes, which this check sees."""
    keep = paired_masks(16, 5000, np.random.default_rng(0))
    for r in (1, 2, 4, 8):
        assert np.all(keep[:2 * r].sum(axis=0) == r)
    assert np.all(np.abs(keep.mean(axis=1) - 0.5) < 0.03)
    assert np.abs(keep[0].astype(float) @ keep[2] / 5000 - 0.25) < 0.03  # different pairs independent
    other = balanced_masks(16, 5000, np.random.default_rng(0))
    assert np.all(other.sum(axis=0) == 8) and not np.all(other[:2].sum(axis=0) == 1)
    with pytest.raises(ConfigError, match="even number >= 2, got 3"):
        paired_masks(3, 10, np.random.default_rng(0))
