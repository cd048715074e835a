"""RMIA: the scores equal the paper's definition (Eqs. 3-4) computed naively, the offline slope a is fitted on the
references alone, and bad settings are one clear error."""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.attacks.registry import make_attack
from privaudit.attacks.membership.rmia import fit_a, prob_x, rmia_scores
from privaudit.core.errors import ConfigError


def naive(p_x, ref_x, keep, p_z, ref_z, gamma, a, online):
    """Score(x) = |{z : [p(x|t)/Pr(x)] / [p(z|t)/Pr(z)] >= gamma}| / |Z|, one pair at a time."""
    k, n = ref_x.shape
    out = []
    for i in range(n):
        if online:
            pr_x = sum(ref_x[j, i] for j in range(k)) / k
        else:
            outs = [ref_x[j, i] for j in range(k) if not keep[j, i]]
            pr_x = 0.5 * ((1 + a) * sum(outs) / len(outs) + (1 - a))
        hits = 0
        for m in range(len(p_z)):
            pr_z = 0.5 * ((1 + a) * sum(ref_z[j, m] for j in range(k)) / k + (1 - a))
            hits += (p_x[i] / pr_x) / (p_z[m] / pr_z) >= gamma
        out.append(hits / len(p_z))
    return np.array(out)


@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("gamma,a", [(1.0, 0.3), (2.0, 0.7), (0.5, 1.0)])
def test_scores_equal_the_definition(online, gamma, a):
    rng = np.random.default_rng(3)
    k, n, m = 4, 7, 11
    keep = np.zeros((k, n), dtype=bool)
    for i in range(n):
        keep[rng.permutation(k)[: k // 2], i] = True
    ref_x, ref_z = rng.uniform(0.01, 1, (k, n)), rng.uniform(0.01, 1, (k, m))
    p_x, p_z = rng.uniform(0.01, 1, n), rng.uniform(0.01, 1, m)
    got = rmia_scores(p_x, ref_x, keep, p_z, ref_z, gamma=gamma, a=a, online=online)
    want = naive(p_x, ref_x, keep, p_z, ref_z, gamma, a, online)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert got.shape == (n,) and set(np.round(got * m, 9)) <= set(range(m + 1))
    tied = rmia_scores(p_x, ref_x, keep, p_z, ref_z, gamma=gamma, a=a, online=online, tie_break=True)
    assert np.all(np.floor(tied * m * (1 + 1e-12) + 1e-9) == np.round(got * m))  # the fraction's steps kept
    order = np.argsort(got, kind="stable")
    assert np.all(np.diff(got[order]) >= 0) and np.all(np.diff(tied[np.argsort(tied)]) > 0)


def test_tie_break_orders_ties_by_the_likelihood_ratio():
    ref = np.full((2, 3), 0.5)
    keep = np.array([[True, False, True], [False, True, False]])
    p_x = np.array([0.9, 0.95, 0.99])  # all above every z: the untied fraction is 1 for each
    p_z, ref_z = np.array([0.1, 0.2]), np.full((2, 2), 0.5)
    untied = rmia_scores(p_x, ref, keep, p_z, ref_z, online=True)
    tied = rmia_scores(p_x, ref, keep, p_z, ref_z, online=True, tie_break=True)
    assert np.all(untied == 1.0) and np.all(np.diff(tied) > 0) and np.all(tied < 1 + 1 / (2 * 2))


def test_offline_probability_uses_out_models_only():
    ref = np.array([[0.9, 0.2], [0.1, 0.4]])
    keep = np.array([[True, False], [False, False]])
    np.testing.assert_allclose(prob_x(ref, keep, online=False, a=0.5), [(1.5 * 0.1 + 0.5) / 2, (1.5 * 0.3 + 0.5) / 2])
    np.testing.assert_allclose(prob_x(ref, keep, online=True, a=0.5), [0.5, 0.3])


def test_fit_a_prefers_the_slope_that_separates_members():
    # Members' probability rises by a fixed amount; the best a is fitted from the references, in the grid.
    rng = np.random.default_rng(0)
    k, n = 8, 400
    keep = np.zeros((k, n), dtype=bool)
    for i in range(n):
        keep[rng.permutation(k)[: k // 2], i] = True
    base = rng.uniform(0.05, 0.6, n)
    ref = np.clip(base + 0.3 * keep + rng.normal(0, 0.02, (k, n)), 1e-3, 1)
    a, power = fit_a(ref, keep)
    assert 0 < a <= 1 and len(power) == 20 and power[a] == max(power.values()) and power[a] > 0.9


def test_fit_a_with_two_references_takes_the_default_not_the_grids_first():
    """One IN and one OUT reference per candidate (a complementary pair): no leave-one-out is defined, so the slope is
    the fixed default 0.3, not the grid's first 0.05 (which makes Pr(x) nearly constant: the old behaviour)."""
    from privaudit.attacks.membership.rmia import DEFAULT_A
    from privaudit.attacks.membership.shadow_models import paired_masks

    rng = np.random.default_rng(1)
    keep = paired_masks(2, 300, rng)
    ref = np.clip(rng.uniform(0.05, 0.6, 300) + 0.3 * keep + rng.normal(0, 0.02, (2, 300)), 1e-3, 1)
    a, power = fit_a(ref, keep)
    assert a == DEFAULT_A == 0.3 and all(np.isnan(v) for v in power.values()) and len(power) == 20
    four = paired_masks(4, 300, rng)
    ref4 = np.clip(rng.uniform(0.05, 0.6, 300) + 0.3 * four + rng.normal(0, 0.02, (4, 300)), 1e-3, 1)
    a4, power4 = fit_a(ref4, four)
    assert not np.isnan(power4[a4]) and power4[a4] == max(power4.values())  # 4 references: fitted


@pytest.mark.parametrize("params,field", [
    ({"gamma": 0.0}, "gamma"), ({"gamma": -1.0}, "gamma"), ({"a": 0.0}, "a"), ({"a": 1.5}, "a"),
    ({"a": -0.2}, "a"), ({"reference_models": 3}, "reference_models"), ({"mode": "both"}, "mode"),
    ({"statistic": "entropy"}, "statistic"), ({"n_population": 0}, "n_population"),
    ({"signal_temperature": 0.0}, "signal_temperature"),
])
def test_bad_settings_are_one_clear_error(params, field):
    with pytest.raises(ConfigError, match=field):
        make_attack("rmia", params)


def test_too_few_population_samples_is_a_clear_error(tmp_path):
    from privaudit.attacks.base import Target
    from privaudit.attacks.membership.references import population_rows
    from privaudit.core.datasets import load_dataset

    data = load_dataset("digits", seed=0)
    target = Target(None, data, "nonprivate")
    with pytest.raises(ConfigError, match=r"n_population: 600 population samples .* shadow split\), which has 539"):
        population_rows(target, 128, 600)
    anchors, z = population_rows(target, 128, 256)
    assert len(anchors) == 128 and len(z) == 256 and not set(anchors) & set(z)


def test_score_functions_reject_bad_inputs():
    ref = np.full((2, 3), 0.5)
    keep = np.array([[True, False, True], [False, True, False]])
    with pytest.raises(ConfigError, match="gamma"):
        rmia_scores(np.full(3, 0.5), ref, keep, np.full(2, 0.5), np.full((2, 2), 0.5), gamma=0)
    with pytest.raises(ConfigError, match="a:"):
        rmia_scores(np.full(3, 0.5), ref, keep, np.full(2, 0.5), np.full((2, 2), 0.5), a=2)
    with pytest.raises(ConfigError, match="population sample"):
        rmia_scores(np.full(3, 0.5), ref, keep, np.zeros(0), np.zeros((2, 0)))


def test_select_queries_drops_a_query_without_signal():
    from privaudit.attacks.membership.rmia import select_queries

    rng = np.random.default_rng(1)
    k, n = 6, 300
    keep = np.zeros((k, n), dtype=bool)
    for i in range(n):
        keep[rng.permutation(k)[: k // 2], i] = True
    informative = np.clip(0.4 + 0.4 * keep + rng.normal(0, 0.05, (k, n)), 0.01, 0.99)
    noise = rng.uniform(0.01, 0.99, (k, n, 3))  # shifted queries of a model that never saw shifts
    queries, power = select_queries(np.concatenate([informative[..., None], noise], axis=2), keep)
    assert queries == [0] and power["query 0"] > 0.9 > power["all"] and set(power) == {"all", *(f"query {q}" for q in range(4))}


def test_leave_one_out_mean_is_balanced_and_mode_follows_reference_power():
    """The leave-one-out reference mean is 0.5 (mean IN + mean OUT) of the other models: with the plain mean,
    a reference's members are compared with fewer IN models than its non-members, which inflates the online
    test's power. auto picks the stronger test."""
    from privaudit.attacks.membership.references import others_mean
    from privaudit.attacks.membership.rmia import choose_mode, online_power

    rng = np.random.default_rng(1)
    k, n = 8, 2000
    keep = np.zeros((k, n), dtype=bool)
    for i in range(n):
        keep[rng.permutation(k)[: k // 2], i] = True
    ref = 0.2 + 0.5 * keep + rng.normal(0, 0.01, (k, n))  # members: +0.5, whatever the model
    mean, ok = others_mean(ref, keep, 0)
    assert ok.all()
    np.testing.assert_allclose(mean, 0.45, atol=0.02)  # 0.5 (0.7 + 0.2), not 0.2 + 0.5 * 3/7 or 4/7
    # A weak signal under per-model noise: the plain mean of the others separates members by delta K/(K-1)
    # instead of delta, so its leave-one-out AUC is higher than the target's own test can reach.
    from privaudit.attacks.metrics import auc

    noisy = 0.5 + 0.02 * keep + rng.normal(0, 0.05, (k, n))
    plain = np.mean([auc(noisy[j] / np.delete(noisy, j, 0).mean(0), keep[j]) for j in range(k)])
    fair = online_power(noisy, keep)
    target = 0.5 + 0.02 * keep[0] + rng.normal(0, 0.05, n)  # a fresh model, tested against all references
    assert plain > fair + 0.01 and abs(fair - auc(target / noisy.mean(0), keep[0])) < 0.03
    mode, power, rule = choose_mode(ref, keep, 0.5)
    assert set(power) == {"online", "offline"} and mode == max(power, key=lambda m: (power[m], m == "online"))
    assert choose_mode(ref[:2], keep[:2], 0.5)[0] == "online"  # K = 2: the paper's rule
