"""DPCL's release probes: the trials sound over many simulated correct runs through their own counting (and an
under-noised release planted is caught by the same check), withdrawn from the loss (a run with them trains bit for bit
as one without; a probe left in the loss, planted, moves the weights), the whole-step bound on the code path below the
claim and above it for a planted under-noised release (SimCLR's similarity matrix, Barlow's statistics), the gate
comparing it with the whole claim and checking each release's noise.
"""

import math
import sys

import numpy as np
import pytest
import torch

from privaudit.attacks.base import Target
from privaudit.attacks.bounds.release_trajectory import combined_mu_lower
from privaudit.attacks.bounds.trajectory import TrajectoryCounts, mu_lower_form, plan_trajectory
from privaudit.attacks.registry import make_attack
from privaudit.attacks.canaries.release_probes import ReleaseTrials, probe_entries
from privaudit.core.errors import ConfigError
from privaudit.defenses import Budget
from privaudit.defenses.dp.release.release_probes import ReleaseProbes
from privaudit.defenses.dpcl import DPCLBarlow, DPCLSimCLR
from privaudit.defenses.registry import make_defense

BETA = 0.05
SIZE, K, STEPS = 12, 60, 3  # a 12 x 12 matrix (|B| = 6), 60 probed entries, 3 steps: 180 trials a run
MODULE = sys.modules[__name__].__name__


class UnderNoisedSimilarity(DPCLSimCLR):
    """A planted bug: the similarity matrix gets a quarter of its claimed noise (the gradient keeps its own)."""

    def similarity_noise_std(self, ctx, b):
        return 0.25 * super().similarity_noise_std(ctx, b)


class SlightlyUnderNoisedSimilarity(DPCLSimCLR):
    """A planted bug: 0.9 of the claimed similarity noise."""

    def similarity_noise_std(self, ctx, b):
        return 0.9 * super().similarity_noise_std(ctx, b)


class ReusedSimilarityNoise(DPCLSimCLR):
    """A planted bug: the similarity matrix gets the same noise draw at every step (its level right)."""

    def noisy_loss(self, ctx, z, b, rnd):
        class Fixed:
            def normal(self, shape, name, device=None, dtype=None):
                return torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=dtype).to(device)
        return super().noisy_loss(ctx, z, b, Fixed())


class UnderNoisedStatistics(DPCLBarlow):
    """A planted bug: Barlow's means and SSEs get a quarter of their claimed noise (the gradient keeps its own)."""

    def stats_noise_std(self, ctx, name, b):
        return 0.25 * super().stats_noise_std(ctx, name, b)


def similarity_runs(runs: int, *, z: float, scale: float = 1.0, beta: float = BETA) -> list[ReleaseTrials]:
    """``runs`` runs of :class:`ReleaseTrials` on one similarity matrix observing S + N(0, (scale z D)^2) entrywise
    (``scale`` 1: the claim), S a fresh Gram matrix of unit rows each step, through the probes' own
    :meth:`ReleaseProbes.observe`."""
    d = 4 * math.sqrt(SIZE - 1)  # Thm. 1's Delta_S at 2|B| = SIZE rows
    out = []
    for r in range(runs):
        trials = ReleaseTrials({"similarity": (SIZE * SIZE, d)}, K, multiplier=z, steps=STEPS, beta=beta, seed=r)
        gen = torch.Generator().manual_seed(50_000 + r)
        for _ in range(STEPS):
            rows = torch.nn.functional.normalize(torch.randn(SIZE, 5, generator=gen), dim=1)
            clean = rows @ rows.T
            probes = trials.step_probes()["similarity"]
            probes.observe(clean, clean + scale * z * d * torch.randn(SIZE, SIZE, generator=gen), d)
        assert trials.steps == STEPS and trials.counts.n0 + trials.counts.n1 == K * STEPS
        out.append(trials)
    return out


def _mu(trials: list[ReleaseTrials], beta: float) -> np.ndarray:
    return np.array([float(mu_lower_form(t.counts.form, t.counts.fp, t.counts.n0, t.counts.fn, t.counts.n1, beta=beta))
                     for t in trials])


def test_release_trials_are_sound_over_runs_and_an_under_noised_release_is_caught():
    """950 correct runs (tests/soundness.py: the check then rejects a bound over-claiming on twice beta of them with
    probability >= 0.9): the trials' mu_lb at beta exceeds 1 / z on at most the stated share, and the shared x1.2
    plant is rejected; the release noised at 0.7 of its claimed std over-claims and the same check rejects it. The
    whole step's mu_lb (the gradient's trials drawn at z_g beside them, and a second group of two releases pooled,
    each bound at beta / 3) is sound against sqrt(z_g^-2 + z^-2 + 2 z_2^-2) over the same runs. About 3 s."""
    from soundness import TARGET_POWER, assert_planted_rejected, assert_sound, rejects, runs_for_power

    z_s, z_g, z_2, runs = 1.0, 1.5, 2.0, runs_for_power(BETA)
    honest = similarity_runs(runs, z=z_s)
    mu_s = _mu(honest, BETA)
    assert_sound("release trials", mu_s, 1.0 / z_s, BETA, min_power=TARGET_POWER)
    assert_planted_rejected("release trials", mu_s, 1.0 / z_s, BETA)
    assert rejects(_mu(similarity_runs(200, z=z_s, scale=0.7), BETA), 1.0 / z_s, BETA)

    rng = np.random.default_rng(7)
    n = K * STEPS // 2
    combined = []
    for t in honest:  # each run's own gradient trials and a pooled pair of releases beside its matrix's trials
        g = TrajectoryCounts(*plan_trajectory(noise_multiplier=z_g, n0=n, n1=n, beta=BETA))
        g.add(rng.normal(0.0, z_g, n), rng.normal(1.0, z_g, n))
        pair = TrajectoryCounts(*plan_trajectory(noise_multiplier=z_2, n0=2 * n, n1=2 * n, beta=BETA / 3))
        pair.add(rng.normal(0.0, z_2, 2 * n), rng.normal(1.0, z_2, 2 * n))
        groups = [t.to_dict(), {**pair.to_dict(), "multiplicity": 2}]
        combined.append(combined_mu_lower({**g.to_dict(), "releases": groups}, beta=BETA)[0])
    assert_sound("whole step (gradient and two release groups)", combined,
                 math.sqrt(z_g ** -2 + z_s ** -2 + 2 * z_2 ** -2), BETA)


def _dpcl_weights(digits, probes_for, defense="dpcl-simclr") -> tuple[torch.Tensor, list]:
    """DPCL-SimCLR's weights after 2 epochs on digits under a canary hook whose Dirac canaries take part in no step
    and which carries ``probes_for(step)`` (None: no release probes); the observations the probes saw."""
    from privaudit.defenses.dp.release.step import dirac_canaries

    seen, calls = [], []

    def source(t):
        calls.append(t)
        probes = probes_for(t, seen)
        return dirac_canaries(torch.tensor([0]), 0.01, torch.tensor([False]),
                              releases=None if probes is None else {"similarity": probes})

    trained = make_defense(defense, {"epochs": 2}).fit(digits, Budget(target_epsilon=4.0, delta=1e-5), 0,
                                                       progress=False, canaries=source)
    assert probes_for(0, []) is None or len(seen) == len(calls) >= 4  # observed once at every step
    return torch.cat([p.detach().reshape(-1) for p in trained.model.parameters()]), seen


class _LeftIn(ReleaseProbes):
    """A planted hook: its probes reach the loss (added to the noised release the loss reads) besides the observer."""

    def observe(self, clean, noisy, sensitivity):
        super().observe(clean, noisy, sensitivity)
        with torch.no_grad():
            noisy.view(-1)[self.index.long()] += self.values.to(noisy.dtype)


def _probes(kind):
    def make(t, seen):
        if kind is None:
            return None
        index = torch.as_tensor(probe_entries(20 * 20, 300, seed=t, name="similarity"))
        index = (index // 20) * 128 + index % 20  # in the first 20 rows and columns of DPCL's 128 x 128 matrix
        return kind(index, torch.full((300,), 15.0, dtype=torch.float64), seen.append)  # below Delta_S
    return make


def test_a_run_with_release_probes_trains_the_runs_model_and_a_probe_left_in_moves_it(digits):
    """Through DPCL's own step: probes on 300 entries at every step leave the trained weights those of the run
    without them, bit for bit, while the observer saw each step's noised entries; probes left in the loss (planted)
    move the weights (the noise, std ~100 here, saturates the loss: a small move, but the probed run's weights are
    equal bit for bit)."""
    alone, _ = _dpcl_weights(digits, _probes(None))
    probed, seen = _dpcl_weights(digits, _probes(ReleaseProbes))
    kept, _ = _dpcl_weights(digits, _probes(_LeftIn))
    assert all(s.shape == (300,) and s.dtype == torch.float64 for s in seen)
    assert float(torch.stack(seen).std()) > 1.0  # the noise the release added, around the probes
    assert torch.equal(probed, alone)
    assert not torch.equal(kept, alone) and float((kept - alone).abs().max()) > 1e-6


def audit(digits, defense: str, epochs: int = 2, **config):
    target = Target(None, digits, defense, {"epochs": epochs}, Budget(target_epsilon=4.0, delta=1e-5), seed=0)
    return make_attack("gradient-canary", **config).run(target)


@pytest.fixture(scope="module")
def whole_step(digits):
    return audit(digits, "dpcl-simclr")


def test_the_whole_steps_bound_is_below_the_claim_and_above_the_gradients_alone(digits, whole_step):
    """DPCL-SimCLR at epsilon 4 on digits: the combined bound (1024 probed entries a step) is below the claim and
    above the bound on the gradient release alone (release_probes = 0: no release counts)."""
    gradient_only = audit(digits, "dpcl-simclr", release_probes=0).trajectory_bound
    bound = whole_step.trajectory_bound
    combined = bound.counts["combined"]
    (group,) = bound.counts["releases"]
    assert "releases" not in gradient_only.counts and whole_step.counts["release_probes"] == 1024
    assert group["names"] == ["similarity"] and group["n0"] + group["n1"] == 1024 * whole_step.counts["n_steps"]
    assert gradient_only.epsilon < bound.epsilon <= 4.0 and not combined["claim_rejected"]
    assert combined["mu_lower"] == pytest.approx(math.hypot(combined["mu_lower_gradient"],
                                                            combined["mu_lower_releases"][0]), rel=1e-12)
    assert combined["mu_lower"] > 0.8 * combined["mu_claim"]


def test_barlow_s_statistics_are_probed_and_a_planted_shortfall_is_refuted(digits):
    """DPCL-Barlow at epsilon 4 (40 steps): its four statistics (each view's mean and SSE, one multiplier, a sixth of
    the budget each) pooled in one group of 4 x 32 entries a step; the whole step's bound is below the claim, its
    statistics' trials see their release (mu_lb > 0; weakly: each statistic's mu is a sixth of the claim's mu^2), and
    a quarter of the statistics' noise (planted) is refuted by the bound and the released-noise check. About 5 s."""
    from privaudit.audit.gate.judge import release_noise_check

    honest = audit(digits, "dpcl-barlow", epochs=20)
    (group,) = honest.trajectory_bound.counts["releases"]
    assert group["names"] == ["mean[view1]", "mean[view2]", "sse[view1]", "sse[view2]"] and group["multiplicity"] == 4
    assert honest.counts["release_probes"] == 128 and honest.trajectory_bound.counts["combined"]["mu_lower_releases"][0] > 0
    assert honest.trajectory_bound.epsilon <= 4.0 and not honest.trajectory_bound.counts["combined"]["claim_rejected"]
    claim = {"params": {"noise_multipliers": {n: group["multiplier"] for n in group["names"]}}}
    assert not release_noise_check("gradient-canary", group, claim)["rejected"]
    leaky = audit(digits, f"{MODULE}:UnderNoisedStatistics").trajectory_bound
    assert leaky.counts["combined"]["claim_rejected"] and leaky.epsilon > 4.0
    assert release_noise_check("gradient-canary", leaky.counts["releases"][0], claim)["rejected"]


def test_a_planted_under_noised_similarity_release_is_refuted_on_the_code_path(digits):
    """The similarity matrix at a quarter of its claimed noise: the gradient trials see nothing wrong, the similarity
    trials do, and the whole step's bound exceeds the claim (epsilon 4) by far."""
    leaky = audit(digits, f"{MODULE}:UnderNoisedSimilarity").trajectory_bound
    combined = leaky.counts["combined"]
    assert combined["claim_rejected"] and combined["mu_lower_gradient"] < 1.0 / 1.1  # the gradient's own noise holds
    assert leaky.epsilon > 2 * 4.0


def test_the_gate_compares_the_whole_step_with_the_whole_claim_recomputed_from_its_counts(whole_step):
    """The gate's recomputation at a family-wise beta reads the release counts (the bound at beta itself again;
    smaller at beta / 10); the release target is the whole claim; trials planned for another claim are refused."""
    from privaudit.audit.gate.recompute import family_bound, release_mismatch, release_target

    bound = whole_step.trajectory_bound.to_dict()
    assert family_bound(bound, 1) == pytest.approx(whole_step.trajectory_bound.epsilon, rel=1e-9)
    assert family_bound(bound, 10) < whole_step.trajectory_bound.epsilon
    z_s = bound["counts"]["releases"][0]["multiplier"]

    class Cell:
        claim_in_full = {"params": {"noise_multipliers": {"gradient": 1.0, "similarity": z_s}}}
    assert release_target(Cell(), bound) is None and release_mismatch(Cell(), bound) is None
    Cell.claim_in_full = {"params": {"noise_multipliers": {"gradient": 1.0, "similarity": 2 * z_s}}}
    assert "do not test this claim" in release_mismatch(Cell(), bound)
    Cell.claim_in_full = {"params": {"noise_multipliers": {"gradient": 1.0}}}
    assert "do not test this claim" in release_mismatch(Cell(), bound)


def test_bad_probes_are_refused_with_the_field_named():
    with pytest.raises(ConfigError, match="release_probes: must be an integer >= 0"):
        make_attack("gradient-canary", release_probes=-1)
    with pytest.raises(ConfigError, match=r"need 1 <= k <= 12"):
        probe_entries(12, 13, seed=0, name="similarity")
    index = probe_entries(36, 30, seed=1, name="similarity")
    assert len(set(index.tolist())) == 30 and index.max() < 36
    one = torch.tensor([1.0], dtype=torch.float64)
    with pytest.raises(ConfigError, match="distinct"):
        ReleaseProbes(torch.tensor([2, 2]), torch.cat([one, one]), print)
    probes = ReleaseProbes(torch.tensor([1]), 3 * one, print)
    with pytest.raises(ConfigError, match="exceeds the release's sensitivity"):
        probes.observe(torch.zeros(4, 4), torch.zeros(4, 4), 2.0)
    with pytest.raises(ConfigError, match="outside a release of 4 entries"):
        ReleaseProbes(torch.tensor([4]), one, print).observe(torch.zeros(4), torch.zeros(4), 2.0)
    trials = ReleaseTrials({"a": (4, 1.0), "b": (4, 1.0)}, 4, multiplier=1.0, steps=2, beta=BETA, seed=0)
    first = trials.step_probes()
    first["a"].observe(torch.zeros(4), torch.zeros(4), 1.0)
    with pytest.raises(ConfigError, match=r"a step observed only \['a'\]"):
        trials.step_probes()


def _noise_check(result):
    from privaudit.audit.gate.judge import release_noise_check

    group = result.trajectory_bound.to_dict()["counts"]["releases"][0]
    claim = {"params": {"noise_multipliers": {"similarity": group["multiplier"]}}}
    return release_noise_check("gradient-canary", group, claim)


def test_the_similarity_matrix_s_released_noise_is_checked_and_planted_shortfall_and_reuse_are_caught(digits,
                                                                                                      whole_step):
    """The gate's released-noise checks on the release probes' residuals: the honest run passes (its level, its
    freshness across steps, its coordinates); 0.9 of the claimed noise fails the level check (p ~ 1e-18 on 4,096
    residuals, where the whole step's bound at this size exceeds the claim only just), and one noise draw reused at
    every step fails the freshness check."""
    from privaudit.audit.gate.judge import noise_failures

    honest = _noise_check(whole_step)
    assert honest["attack"] == "gradient-canary (similarity)" and not noise_failures([honest])
    assert honest["n"] == 1024 * whole_step.counts["n_steps"] and abs(honest["std_ratio"] - 1) < 0.02
    assert honest["independence"]["n"] > 0 and not honest["independence"]["rejected"]
    low = _noise_check(audit(digits, f"{MODULE}:SlightlyUnderNoisedSimilarity"))
    assert low["rejected"] and low["std_ratio"] == pytest.approx(0.9, abs=0.02)
    assert "released noise" in [name for name, _ in noise_failures([low])]
    reused = _noise_check(audit(digits, f"{MODULE}:ReusedSimilarityNoise"))
    assert reused["independence"]["rejected"] and not reused["rejected"]
    assert "reuses or correlates its noise across steps" in " ".join(t for _, t in noise_failures([reused]))


def test_the_report_shows_each_release_s_noise_beside_the_gradient_s(whole_step):
    """The report's attack table: the gradient's released-noise check, then the similarity matrix's."""
    from privaudit.audit.report.summary import attack_rows

    check = _noise_check(whole_step)
    gradient = {**check, "attack": "gradient-canary"}
    cell = {"id": "digits/dpcl-simclr/eps=4/seed=0", "attacks": {"gradient-canary": {"auc": 0.6}},
            "gate": {"comparisons": [], "released_noise": [gradient, check]}}
    (row,) = attack_rows({"cells": [cell]})
    assert row[-1].count(f"{check['std_ratio']:.4g} (≤ {check['std_ratio_upper']:.4g}): consistent") == 2
    assert "; similarity: " in row[-1]


def test_the_gradient_only_recomputation_refuses_whole_step_counts(whole_step):
    """Counts with release trials recomputed as the gradient's alone would drop evidence: refused."""
    from privaudit.attacks.bounds.trajectory import trajectory_epsilon_from_counts

    with pytest.raises(ConfigError, match="carry the trials of the step's other releases"):
        trajectory_epsilon_from_counts(whole_step.trajectory_bound.counts, beta=BETA, delta=1e-5,
                                       relation="replace-one")
