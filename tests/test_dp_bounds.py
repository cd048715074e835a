"""The papers' sensitivity claims: checked where correct, refuted with a witness where not."""

import math

import pytest
import torch

from privaudit.defenses import make_defense
from privaudit.defenses.dp import bounds
from privaudit.defenses.losses import info_nce_from_logits, spreadout_from_similarity


# --- Logit-DP Lemma 4.5 / 4.6: the constants of Theorem 4.2 computed by autograd -----------------------
def theorem_4_2_constants(logits, loss):
    """G1 + G2 + (n-1) L of Thm. 4.2 at one logit matrix Z (n x n) of the larger batch (last row/column new)."""
    n = logits.shape[0]
    z = logits.clone().requires_grad_(True)
    (d_full,) = torch.autograd.grad(loss(z), z)  # d l^(i,n) / d Z_ij (row i only depends on row i)
    zs = logits[:n - 1, :n - 1].clone().requires_grad_(True)
    (d_small,) = torch.autograd.grad(loss(zs), zs)
    g1 = d_full[n - 1].abs().sum()
    g2 = d_full[:n - 1, n - 1].abs().sum()
    big_l = (d_full[:n - 1, :n - 1] - d_small).abs().sum(dim=1).max()
    return float(g1 + g2 + (n - 1) * big_l)


def infonce_sum(z):
    return info_nce_from_logits(z, reduction="sum")


@pytest.mark.parametrize("n,tau", [(8, 1.0), (64, 1.0), (32, 0.5)])
def test_lemma_4_5_is_too_small_and_the_corrected_bound_holds(n, tau):
    """x'_n aligned with every x_i (i < n) and anti-aligned with x_n: G1 and G2, L are extreme together."""
    z = torch.full((n, n), -1.0 / tau, dtype=torch.float64)
    z[:, n - 1] = 1.0 / tau  # the new column is the most similar for every old row
    z[n - 1] = 1.0 / tau
    z[n - 1, n - 1] = -1.0 / tau  # the new row's own positive is the least similar
    value = theorem_4_2_constants(z, infonce_sum)
    paper = bounds.logitdp_infonce_paper(n, 1.0, tau)
    sound = bounds.logitdp_infonce_sound(n, 1.0, tau)
    assert value > paper * (1 + 1e-9)  # Lemma 4.5 (with e^{2/tau}) is violated
    assert value <= sound * (1 + 1e-9)
    assert sound < bounds.logitdp_infonce_sup(1.0, tau)


def test_corrected_lemma_4_5_and_lemma_4_6_hold_on_random_logits():
    g = torch.Generator().manual_seed(0)
    for n in (3, 6, 12):
        for tau in (0.5, 1.0):
            for _ in range(8):
                z = (2 * torch.rand(n, n, generator=g, dtype=torch.float64) - 1) / tau
                assert theorem_4_2_constants(z, infonce_sum) <= bounds.logitdp_infonce_sound(n, 1.0, tau) + 1e-9
                s = z * tau  # spreadout acts on cosine similarities in [-1, 1]
                assert theorem_4_2_constants(s, lambda q: spreadout_from_similarity(q, "sum")) <= 6 + 1e-9


def test_temperature_matters_for_logit_dp():
    assert bounds.logitdp_infonce_sup(1.0, 1.0) == pytest.approx(2 * (1 + math.e ** 2))
    assert bounds.logitdp_infonce_sup(1.0, 0.5) == pytest.approx(2 * (1 + math.e ** 4))
    # Lemma 4.5 as printed (tau = 1) underestimates the tau = 0.5 sensitivity by a factor of about 5.
    assert bounds.logitdp_infonce_sound(128, 1.0, 0.5) > 4.5 * bounds.logitdp_infonce_paper(128, 1.0, 1.0)


# --- DPCL Thms. 1-3 on random unit vectors ------------------------------------------------------------
def test_dpcl_theorems_1_to_3_hold_for_replace_one():
    from privaudit.defenses.losses import feature_mean, feature_sse

    g = torch.Generator().manual_seed(1)
    for n, d in ((4, 3), (16, 8)):
        for _ in range(50):
            z = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
            z2 = z.clone()
            z2[0] = -z[0] if _ % 2 else torch.nn.functional.normalize(torch.randn(d, generator=g, dtype=torch.float64), dim=0)
            views, views2 = torch.cat([z, z.roll(1, 0)]), torch.cat([z2, z2.roll(1, 0)])  # two rows change
            views2[n + 1] = z2[0]
            assert (views @ views.T - views2 @ views2.T).norm() <= bounds.dpcl_similarity(2 * n) + 1e-9
            assert (feature_mean(z) - feature_mean(z2)).norm() <= bounds.dpcl_mean(n) + 1e-12
            assert (feature_sse(z) - feature_sse(z2)).norm() <= bounds.dpcl_sse() + 1e-9


# --- the privatized quantities on digits --------------------------------------------------------------
def quantities(digits, name, noise_multiplier=1.0, **params):
    qs = make_defense(name, params).privatized_quantities(digits, noise_multiplier=noise_multiplier)
    return {(q.claim_id, q.variant): q for q in qs}


def delta_norm(q, a, b, seed):
    return float((q.fn(a, seed) - q.fn(b, seed)).norm())


def test_dpgcl_random_grouping_stays_within_2c_and_chunking_moves_other_examples(digits):
    qs = quantities(digits, "dp-gcl", batch_size=16, group_size=4, clip=1e-4)
    x = digits.train.x
    base = x[:16]
    for seed, extra in ((0, x[300]), (1, x[301])):
        bigger = torch.cat([base, extra[None]])  # add-remove neighbour, appended last
        assert delta_norm(qs[("dpgcl.group", "random")], base, bigger, seed) <= 2e-4 * (1 + 1e-6)
    fn_groups = {v: make_defense("dp-gcl", {"batch_size": 16, "group_size": 4, "grouping": v})
                 .quantity_function(digits)("groups") for v in ("random", "chunk")}
    moved = {v: 0 for v in fn_groups}
    for seed in range(2):
        bigger = torch.cat([base, x[300 + seed][None]])
        for v, fn in fn_groups.items():
            moved[v] += int((fn(base, seed) != fn(bigger, seed)[:16]).sum())
    assert moved["random"] == 0  # App. A's coupling: every other example keeps its group
    assert moved["chunk"] > 0  # inserting one example shifts others into other groups


def test_dpcl_other_examples_gradients_change_and_barlow_exceeds_4c(digits):
    """DPCL Sec. 3.2.2 / 3.3.2 assume the per-example gradients of unchanged examples stay unchanged."""
    x = digits.train.x
    fn = make_defense("dpcl-simclr", {"batch_size": 8}).quantity_function(digits, noise_multiplier=0.01)("norms")
    base = x[:8]
    other = base.clone()
    other[0] = base[1]  # replace example 0 by a duplicate of example 1 (rows 0 and 8 are its views)
    a, b = fn(base, 0), fn(other, 0)
    unchanged = torch.ones(16, dtype=torch.bool)
    unchanged[[0, 8]] = False
    assert float(((a - b).abs() / a)[unchanged].max()) > 1e-2

    clip = 1e-4
    # The claim is for any fixed draw of the statistics' noise; a small one keeps the loss well conditioned.
    q = quantities(digits, "dpcl-barlow", 0.01, batch_size=16, clip=clip)[("dpcl.barlow-gradient", "")]
    base = x[:16]
    worst = 0.0
    for replacement in (torch.ones(1, 8, 8), (torch.arange(64).view(1, 8, 8) % 2).float()):
        other = base.clone()
        other[0] = replacement
        worst = max(worst, *(delta_norm(q, base, other, seed) for seed in (2, 3)))
    assert worst > q.bound(q.params) == pytest.approx(4 * clip)  # the paper's 4C is exceeded
    assert worst <= q.corrected_bound(q.params)


@pytest.mark.parametrize("name,claim_id,params", [
    ("dp-clip", "dpgcl.batch-level", {}),
    ("dpsgd", "dpgcl.sample-level", {}),
    ("logit-dp", "logitdp.infonce", {}),
    ("logit-dp", "logitdp.spreadout", {}),
])
def test_add_remove_quantities_stay_within_their_bounds(digits, name, claim_id, params):
    q = quantities(digits, name, batch_size=8, clip=1e-3, **params)[(claim_id, "")]
    x = digits.train.x
    base = x[:8]
    p = {**q.params, "B": 8}
    bound = q.corrected_bound(p) if q.corrected_bound is not None else q.bound(p)
    for seed in (0, 1):
        assert delta_norm(q, base, torch.cat([base, x[200 + seed][None]]), seed) <= bound * (1 + 1e-6)
