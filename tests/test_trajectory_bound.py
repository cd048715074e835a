"""The white-box trajectory bound (``eps_lb_trajectory``): soundness over many seeds on the idealised mechanism
(with an inflated variant that the same test rejects), power at epsilon 1 and 8 at the quickstart's sizes, the
canaries' trial counting, and the gate's recomputation from saved counts."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from privaudit.accountants.events import (ComposedDpEvent, GaussianDpEvent, LaplaceDpEvent, PoissonSampledDpEvent,
                                          SampledWithoutReplacementDpEvent, SelfComposedDpEvent, event_to_dict)
from privaudit.attacks.canaries.gradient_canary import GradientCanaries
from privaudit.attacks.bounds.mechanism import optimistic_epsilon
from privaudit.attacks.bounds.trajectory import (METHOD, TrajectoryCounts, gradient_event, mu_lower, mu_lower_form,
                                                 plan_threshold, plan_trajectory, step_multiplier, trajectory_bound,
                                                 trajectory_epsilon, trajectory_epsilon_from_counts, unsupported_reason)
from privaudit.core.errors import ConfigError

BETA, DELTA = 0.05, 1e-5
# The quickstart's DP-GCL and Logit-DP cells: (sampling rate, steps, calibrated multiplier), m = 20000 canaries.
QUICKSTART = {"dp-gcl eps 1": (0.344, 6, 3.603), "dp-gcl eps 8": (0.344, 6, 0.8527),
              "logit-dp eps 1": (0.172, 10, 2.518), "logit-dp eps 8": (0.172, 10, 0.7285)}
M = 20000


def event(q: float, steps: int, z: float):
    return SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)


def idealised_counts(rng, seeds: int, q: float, steps: int, z: float, tau: float, m: int = M):
    """Counts of the idealised audit (m canaries, each inserted by a fair coin and sampled with rate q at each of
    ``steps`` steps; x = label + N(0, z^2)) for ``seeds`` independent runs at once: the counts are sufficient, and
    given the labels FP and FN are binomial."""
    n1 = rng.binomial(steps * (m // 2), q, size=seeds)  # present trials: inserted and sampled
    n0 = m * steps - n1
    fp = rng.binomial(n0, stats.norm.sf(tau / z))
    fn = rng.binomial(n1, stats.norm.cdf((tau - 1.0) / z))
    return fp, n0, fn, n1


def over_claims_acceptably(over: int, seeds: int, beta: float = BETA) -> bool:
    """One-sided binomial test at 1%: are ``over`` over-claims in ``seeds`` runs consistent with a rate <= beta?"""
    return stats.binom.sf(over - 1, seeds, beta) > 0.01


@pytest.mark.parametrize("cell", sorted(QUICKSTART))
def test_sound_with_power_and_an_inflated_variant_fails(cell):
    """P[mu_lb > mu] <= beta on the idealised mechanism (the epsilon is monotone in mu_lb, so the same runs
    over-claim epsilon exactly when they over-claim mu); 1.2 mu_lb, an unsound variant, fails the same test. 950
    runs of simulated counts: the shared check rejects a bound over-claiming on 2 beta of them with probability
    >= 0.9 (tests/soundness.py)."""
    from soundness import TARGET_POWER, assert_sound, runs_for_power

    q, steps, z = QUICKSTART[cell]
    seeds = runs_for_power(BETA)
    rng = np.random.default_rng(7)
    tau = plan_threshold(noise_multiplier=z, n0=M * steps * (1 - q / 2), n1=M * steps * q / 2, beta=BETA)
    fp, n0, fn, n1 = idealised_counts(rng, seeds, q, steps, z, tau)
    mu = mu_lower(fp, n0, fn, n1, beta=BETA)
    assert mu.shape == (seeds,)
    assert over_claims_acceptably(int(np.sum(mu > 1.0 / z)), seeds)
    assert not over_claims_acceptably(int(np.sum(1.2 * mu > 1.0 / z)), seeds)
    assert_sound(f"trajectory bound, {cell}", mu, 1.0 / z, BETA, min_power=TARGET_POWER)


def test_sound_when_steps_add_more_noise_than_claimed():
    """Independent but not identical trials (some steps noisier than the claim): still sound (Hoeffding)."""
    rng = np.random.default_rng(3)
    z_claim, tau, per_step = 1.0, 0.5, 4000
    zs = np.array([1.0, 1.0, 1.5, 3.0, 1.0, 10.0])
    fp = sum(rng.binomial(per_step, stats.norm.sf(tau / zt), size=500) for zt in zs)
    fn = sum(rng.binomial(per_step // 4, stats.norm.cdf((tau - 1) / zt), size=500) for zt in zs)
    mu = mu_lower(fp, per_step * len(zs), fn, per_step // 4 * len(zs), beta=BETA)
    assert over_claims_acceptably(int(np.sum(mu > 1.0 / z_claim)), 500)


@pytest.mark.parametrize("cell", sorted(QUICKSTART))
def test_power_at_epsilon_1_and_8(cell):
    """At the quickstart's sizes the bound reaches at least 0.8 of the claim's epsilon at 95% (median of 5 runs),
    and catches a 1.25x noise shortfall (the per-step mu bound exceeds the claim's)."""
    q, steps, z = QUICKSTART[cell]
    ev, rng = event(q, steps, z), np.random.default_rng(11)
    tau = plan_threshold(noise_multiplier=z, n0=M * steps * (1 - q / 2), n1=M * steps * q / 2, beta=BETA)
    mu = np.median(mu_lower(*idealised_counts(rng, 5, q, steps, z, tau), beta=BETA))
    tight = optimistic_epsilon(ev, "add-remove", DELTA)
    assert trajectory_epsilon(float(mu), ev, "add-remove", DELTA) >= 0.8 * tight
    short = mu_lower(*idealised_counts(rng, 10, q, steps, z / 1.25, tau), beta=BETA / 20)
    assert np.all(short > 1.0 / z)


def test_epsilon_is_the_claims_steps_at_the_measured_noise():
    ev = event(0.2, 10, 1.5)
    assert trajectory_epsilon(1 / 1.5, ev, "add-remove", DELTA) == pytest.approx(optimistic_epsilon(ev, "add-remove",
                                                                                                    DELTA))
    eps = [trajectory_epsilon(mu, ev, "add-remove", DELTA) for mu in (0.0, 0.3, 0.6, 1.2)]
    assert eps[0] == 0.0 and eps == sorted(eps) and eps[-1] > eps[-2]
    assert trajectory_epsilon(math.inf, ev, "add-remove", DELTA) == math.inf


def test_a_coarser_grid_reads_lower_and_close():
    """A capped ceiling's coarse grid (audit-training) states "at least": it never reads above the bound's grid."""
    ev = event(1 / 14, 210, 0.75)
    fine, coarse = (trajectory_epsilon(3 / 0.75, ev, "add-remove", DELTA, coarsening=c) for c in (1.0, 10.0))
    assert 0.99 * fine < coarse <= fine
    with pytest.raises(ConfigError, match="coarsening: must be >= 1"):
        trajectory_epsilon(1.0, ev, "add-remove", DELTA, coarsening=0.5)


def test_gradient_event_and_step_multiplier():
    wor = SelfComposedDpEvent(SampledWithoutReplacementDpEvent(100, 10, GaussianDpEvent(0.7)), 5)
    assert gradient_event(wor, 2.0).event.event.noise_multiplier == 2.0
    assert step_multiplier(wor) == 0.7
    assert step_multiplier(wor, {"noise_multipliers": {"gradient": 1.3, "similarity": 0.9}}) == 1.3
    assert unsupported_reason(wor, "replace-one") is None
    assert "LaplaceDpEvent" in unsupported_reason(LaplaceDpEvent(1.0), "add-remove")
    two = ComposedDpEvent([GaussianDpEvent(1.0), GaussianDpEvent(2.0)])
    with pytest.raises(ConfigError, match="2 distinct Gaussian multipliers"):
        step_multiplier(two)
    with pytest.raises(ConfigError, match="no single-Gaussian step"):
        gradient_event(two, 1.0)


def test_plan_threshold_reads_the_claim_only():
    balanced = plan_threshold(noise_multiplier=1.0, n0=1e5, n1=1e5, beta=BETA)
    assert balanced == pytest.approx(0.5)
    assert plan_threshold(noise_multiplier=1.0, n0=1e5, n1=2e4, beta=BETA) > 0.5  # few present trials: tau toward 1


@pytest.mark.parametrize("paired", [False, True])
def test_canaries_count_their_trials(paired):
    """Through :class:`GradientCanaries`: the counts of a simulated run match the labels, and the bound is close to
    the true per-step mu and below it (add/remove, and paired replace-one slots)."""
    m, steps, rate, std, norm = 4000, 8, 0.3, 1.0, 0.8  # mu = D / sigma = 0.8 (both designs: D = norm, 2 * norm/2)
    can = GradientCanaries(m, m, clip_norm=norm if not paired else norm / 2, paired=paired, score="sum")
    can.track_trajectory(0.5)
    gen = torch.Generator().manual_seed(0)
    total = 0
    for t in range(steps):
        sampled = torch.rand(m, generator=gen) < rate
        sign = torch.as_tensor(can.inserted).double() * 2 - 1
        value = (sign * norm / 2 * sampled) if paired else (torch.as_tensor(can.inserted) & sampled).double() * norm
        noisy = torch.zeros(m, dtype=torch.float64)
        noisy[torch.as_tensor(can.directions)] = value
        can.observe(t, noisy + std * torch.randn(m, generator=gen, dtype=torch.float64), sampled.numpy())
        total += int(sampled.sum()) if paired else m
    tr = can.trajectory
    assert tr.n0 + tr.n1 == total
    mu = float(mu_lower(tr.fp, tr.n0, tr.fn, tr.n1, beta=BETA))
    assert 0.7 < mu < 0.8 and tr.moment_mu() == pytest.approx(0.8, rel=0.1)
    with pytest.raises(ConfigError, match="sampled"):
        can.observe(steps, torch.zeros(m))


def test_bound_record_and_recomputation():
    """The bound's counts recompute it at another beta (the gate's family-wise level): lower at a smaller beta,
    equal at its own; the estimates are labelled as such."""
    q, steps, z = QUICKSTART["dp-gcl eps 8"]
    ev = event(q, steps, z)
    counts = TrajectoryCounts(0.65, n0=99349, fp=22128, n1=20651, fn=7081)
    b = trajectory_bound(counts, event=ev, claimed_multiplier=z, relation="add-remove", beta=BETA, delta=DELTA,
                         steps=steps, canaries=M)
    assert b.method == METHOD and b.counts["event"] == event_to_dict(ev) and not b.counts["claim_rejected"]
    assert 0.9 * 8 < b.epsilon < 8.0
    again = trajectory_epsilon_from_counts(b.counts, beta=BETA, delta=DELTA, relation="add-remove")
    assert again == pytest.approx(b.epsilon)
    assert trajectory_epsilon_from_counts(b.counts, beta=BETA / 20, delta=DELTA, relation="add-remove") < b.epsilon
    assert set(b.counts["estimates"]) == {"per_step_point", "gaussian_moments"}
    assert "not bounds" in " ".join(b.notes)


# The quickstart's paired designs (DPCL-SimCLR, DP-FedEmb's canary users): per-step multiplier, expected trials per
# side (sampled slots / 2), both sides equal.
PAIRED = {"dpcl eps 1": (5.095, 20640), "dpcl eps 8": (1.206, 20640), "fedemb eps 1": (6.536, 22500),
          "fedemb eps 8": (1.246, 22500)}


def paired_counts(rng, seeds: int, z: float, per_side: int, tau: float = 0.5):
    """Idealised paired trials: the coins split the sampled slots between the sides (binomial), x = label + N(0,
    z^2)."""
    n1 = rng.binomial(2 * per_side, 0.5, size=seeds)
    n0 = 2 * per_side - n1
    return rng.binomial(n0, stats.norm.sf(tau / z)), n0, rng.binomial(n1, stats.norm.cdf((tau - 1.0) / z)), n1


@pytest.mark.parametrize("cell", sorted(PAIRED))
def test_pooled_form_sound_with_power_and_an_inflated_variant_fails(cell):
    """The pooled form (one interval on FP + FN): P[mu_lb > mu] <= beta on the idealised paired mechanism, at the
    gate's usual family level too; 1.1 mu_lb, an unsound variant, fails the same test. The runs are simulated
    counts, so there are enough of them (950, tests/soundness.py: runs_for_power) for the shared check to reject a
    bound over-claiming on 2 beta of them with probability >= 0.9."""
    from privaudit.attacks.bounds.pooled_gdp import mu_lower_pooled

    from soundness import TARGET_POWER, assert_planted_rejected, assert_sound, runs_for_power

    z, per_side = PAIRED[cell]
    seeds = runs_for_power(BETA)
    rng = np.random.default_rng(5)
    counts = paired_counts(rng, seeds, z, per_side)
    mu = {beta: mu_lower_pooled(*counts, beta=beta) for beta in (BETA, BETA / 25)}
    for beta, values in mu.items():
        assert values.shape == (seeds,) and over_claims_acceptably(int(np.sum(values > 1.0 / z)), seeds, beta)
    mu = mu[BETA]
    assert not over_claims_acceptably(int(np.sum(1.1 * mu > 1.0 / z)), seeds)
    # the shared check of every gated bound (tests/soundness.py)
    assert_sound(f"pooled trajectory form, {cell}", mu, 1.0 / z, BETA, min_power=TARGET_POWER)
    assert_planted_rejected(f"pooled trajectory form, {cell}", mu, 1.0 / z, BETA)


@pytest.mark.parametrize("cell", sorted(PAIRED))
def test_planned_form_is_pooled_for_paired_trials_and_has_more_power(cell):
    """The planner picks the pooled form at tau = 0.5 for balanced trials (from the claim alone), and it is tighter
    than the two-sided form on the same counts: at the gate's family level over the quickstart's 25 comparisons it
    catches a 1.25x noise shortfall in at least as many of 20 runs, and in at least 16 for DPCL's trial counts
    (DP-FedEmb's canary users at epsilon 1 have the smallest per-step mu, 0.153: about half)."""
    z, per_side = PAIRED[cell]
    assert plan_trajectory(noise_multiplier=z, n0=per_side, n1=per_side, beta=BETA) == (0.5, "pooled")
    rng = np.random.default_rng(13)
    short = paired_counts(rng, 20, z / 1.25, per_side)
    pooled, two = mu_lower_form("pooled", *short, beta=BETA / 25), mu_lower(*short, beta=BETA / 25)
    assert np.all(pooled > two)
    caught = int(np.sum(pooled > 1.0 / z))
    assert caught >= int(np.sum(two > 1.0 / z)) and caught >= (6 if cell == "fedemb eps 1" else 16)


def test_planned_form_stays_two_sided_for_add_remove_designs():
    for q, steps, z in QUICKSTART.values():
        n0, n1 = M * steps * (1 - q / 2), M * steps * q / 2
        tau = plan_threshold(noise_multiplier=z, n0=n0, n1=n1, beta=BETA)
        assert plan_trajectory(noise_multiplier=z, n0=n0, n1=n1, beta=BETA) == (tau, "two-sided")
    with pytest.raises(ConfigError, match="trajectory form"):
        mu_lower_form("three-sided", 1, 10, 1, 10, beta=BETA)


def test_pooled_error_floor_closed_form():
    """g_w: w = 1/2 gives Phi(-mu/2); it decreases in mu; its inverse recovers mu; at mu = 0 it is min(w, 1 - w)."""
    from privaudit.attacks.bounds.pooled_gdp import error_floor, mu_from_error

    assert error_floor(0.8, 0.5) == pytest.approx(stats.norm.cdf(-0.4))
    values = [error_floor(mu, 0.3) for mu in (0.0, 0.5, 1.0, 2.0, 4.0)]
    assert values[0] == pytest.approx(0.3) and values == sorted(values, reverse=True)
    assert mu_from_error(error_floor(1.7, 0.3), 0.3) == pytest.approx(1.7, rel=1e-9)
    assert mu_from_error(0.5, 0.5) == 0.0 and mu_from_error(0.0, 0.5) == math.inf


def test_pooled_form_recomputed_from_saved_counts():
    """The gate recomputes a pooled bound with its form from the saved counts (old counts without one: two-sided)."""
    ev = SelfComposedDpEvent(SampledWithoutReplacementDpEvent(1000, 200, GaussianDpEvent(1.2)), 6)
    base = {"threshold": 0.5, "n0": 20000, "fp": 6800, "n1": 20000, "fn": 6700, "event": event_to_dict(ev)}
    pooled = trajectory_epsilon_from_counts({**base, "form": "pooled"}, beta=BETA, delta=DELTA, relation="replace-one")
    two = trajectory_epsilon_from_counts(base, beta=BETA, delta=DELTA, relation="replace-one")
    mu = float(mu_lower_form("pooled", 6800, 20000, 6700, 20000, beta=BETA))
    assert pooled == pytest.approx(trajectory_epsilon(mu, ev, "replace-one", DELTA)) and pooled > two


@pytest.mark.parametrize("steps, rate", [(10, 0.17), pytest.param(2000, 0.01, marks=pytest.mark.slow)])  # 2000: 9 s
def test_the_conversion_reads_the_claims_epsilon_within_two_percent_from_below_at_any_step_count(steps, rate):
    """At mu = 1 / z the bound's conversion (the optimistic PLD on a grid that shrinks with T) is at most the claim's
    pessimistic PLD epsilon and within 2% of it; the fixed 1e-3 grid it replaced read 1.58 for 2.58 at T = 2000."""
    from privaudit.accountants.events import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
    from privaudit.accountants.pld.pld import build_pld
    from privaudit.attacks.bounds.mechanism import optimistic_epsilon
    from privaudit.attacks.bounds.trajectory import trajectory_epsilon

    event = SelfComposedDpEvent(PoissonSampledDpEvent(rate, GaussianDpEvent(1.0)), steps)
    exact_above = build_pld(event, "add-remove", pessimistic=True, interval=1e-5).get_epsilon_for_delta(1e-5)
    read = trajectory_epsilon(1.0, event, "add-remove", 1e-5)
    assert 0.98 * exact_above <= read <= exact_above
    if steps == 2000:
        assert optimistic_epsilon(event, "add-remove", 1e-5) < 0.7 * exact_above  # the coarse grid's loss


def test_the_training_audits_ceiling_is_capped_on_the_coarse_grid():
    """audit-training's ceiling: no error on any trial; above three times the claim's mu it is the cap's epsilon on the
    coarse grid (stated as "at least"), below it the design's own most on the bound's grid."""
    from privaudit.audit.user.training.training_canaries import (CEILING_COARSENING, CEILING_MU_FACTOR,
                                                                 trajectory_ceiling)

    ev = event(1 / 14, 210, 0.75)
    many = {"form": "two-sided", "n0": 500_000, "n1": 40_000}
    ceiling, capped = trajectory_ceiling(many, ev, beta=BETA, delta=DELTA, multiplier=0.75)
    assert capped and ceiling == trajectory_epsilon(CEILING_MU_FACTOR / 0.75, ev, "add-remove", DELTA,
                                                    coarsening=CEILING_COARSENING)
    few = {"form": "two-sided", "n0": 40, "n1": 4}
    ceiling, capped = trajectory_ceiling(few, ev, beta=BETA, delta=DELTA, multiplier=0.75)
    most = float(mu_lower(0, 40, 0, 4, beta=BETA))
    assert not capped and most < CEILING_MU_FACTOR / 0.75
    assert ceiling == trajectory_epsilon(most, ev, "add-remove", DELTA)
