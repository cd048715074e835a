"""The noise checks across steps and per tensor (:mod:`privaudit.attacks.noise.noise_structure`): exact levels on the
idealised mechanism over many seeds with the shared soundness check (and unsound variants it rejects: overlapping
step pairs taken as independent, tensors tested without Bonferroni), the canaries' counts and stratified placement,
and the gate on old and new evidence."""

import numpy as np
import pytest
import torch
from scipy import stats

from privaudit.attacks.canaries.canary_strata import PER_TENSOR, stratified_coordinates, tensor_index
from privaudit.attacks.canaries.gradient_canary import GradientCanaries
from privaudit.attacks.noise.noise_structure import (coordinate_check, independence_check, structure_checks,
                                                     tensor_checks)
from privaudit.attacks.noise.released_noise import released_noise_check
from privaudit.attacks.bounds.trajectory import TrajectoryCounts
from privaudit.audit.gate.judge import gate_cells, suite_gate
from privaudit.audit.report.records import CellRecord
from privaudit.audit.suite.model import GateConfig
from privaudit.core.errors import ConfigError
from soundness import critical
from test_released_noise import canary_cell

Z = 1.3


def counts_of(residuals: np.ndarray, tensors: np.ndarray | None = None, names: tuple = ()) -> dict:
    """The saved counts of one run's residuals (T, m) through :class:`TrajectoryCounts`, step by step."""
    tc = TrajectoryCounts(0.5, tensor_names=names)
    for r in residuals:
        tc.add_noise(r, tensors)
    return tc.to_dict()


def test_pairs_are_disjoint_consecutive_steps_and_an_odd_last_step_is_left_out():
    r = np.array([[1.0, 2.0], [0.5, 2.0], [3.0, -1.0], [1.0, 1.0], [7.0, 7.0]])
    c = counts_of(r, np.array([0, 1]), ("w", "b"))
    assert c["pair_n"] == 4 and c["pair_ss"] == pytest.approx(0.25 + 0 + 4 + 4)
    assert c["noise_n"] == 10 and c["tensor_noise"] == {
        "w": {"n": 5, "ss": pytest.approx(1 + .25 + 9 + 1 + 49), "pair_n": 2, "pair_ss": pytest.approx(.25 + 4)},
        "b": {"n": 5, "ss": pytest.approx(4 + 4 + 1 + 1 + 49), "pair_n": 2, "pair_ss": pytest.approx(0 + 4)}}
    assert "tensor_noise" not in counts_of(r)  # no tensors named: no per-tensor counts


def test_independence_level_over_4000_seeds_and_overlapping_pairs_fail_the_same_check():
    """Fresh N(0, z^2) residuals: the disjoint-pair test rejects at most alpha of 4,000 runs (exact chi-square); the
    unsound variant that takes the overlapping pairs (0,1), (1,2), ... as independent (their differences are
    correlated -1/2, so the sum's variance is 1.5 times the chi-square's) rejects far more, caught by the same check.
    At 4,000 runs the check rejects a test failing on 2 alpha of them with probability above 0.999."""
    rng, seeds, steps, m, alpha = np.random.default_rng(5), 4000, 7, 30, 0.05
    fails, overlapping = 0, 0
    for _ in range(seeds):
        r = Z * rng.standard_normal((steps, m))
        fails += independence_check(counts_of(r), Z, alpha=alpha)["rejected"]
        d = np.diff(r, axis=0)
        overlapping += stats.chi2.cdf((d ** 2).sum() / (2 * Z * Z), d.size) < alpha
    assert fails < critical(seeds, alpha) and fails > 100  # not vacuous: about 200 expected
    assert overlapping >= critical(seeds, alpha)


def test_tensor_family_level_over_2000_seeds_and_no_bonferroni_fails_the_same_check():
    """Five tensors of fresh noise over four steps: the family (a variance and a step-pair test per tensor, each at
    alpha / 10) fails at most alpha of 2,000 runs; the same tests each at alpha (no Bonferroni) fail about
    1 - (1 - alpha)^10 = 40% of them, which the check rejects. At 2,000 runs the check rejects a family failing on
    2 alpha of them with probability above 0.999."""
    rng, seeds, steps, alpha = np.random.default_rng(6), 2000, 4, 0.05
    sizes = np.array([3, 5, 40, 7, 25])
    tensors = np.repeat(np.arange(5), sizes)
    names = tuple(f"t{g}" for g in range(5))
    fails, naive = 0, 0
    for _ in range(seeds):
        c = counts_of(Z * rng.standard_normal((steps, tensors.size)), tensors, names)
        family = tensor_checks(c, Z, alpha=alpha)
        fails += bool(family["rejected"])
        naive += any(stats.chi2.cdf(t["ss"] / Z ** 2, t["n"]) < alpha or
                     stats.chi2.cdf(t["pair_ss"] / (2 * Z ** 2), t["pair_n"]) < alpha for t in c["tensor_noise"].values())
    assert family["tests"] == 10 and family["alpha_each"] == pytest.approx(alpha / 10)
    assert fails < critical(seeds, alpha) and fails > 50
    assert naive >= critical(seeds, alpha)


def simulate(plant: str, *, steps: int = 6, paired: bool = False, seed: int = 0) -> dict:
    """Counts of :class:`GradientCanaries` observing a release with fresh N(0, sigma^2) noise on every coordinate and
    step (``plant="none"``), the same noise at every step (``"reused"``: a generator re-created with one seed), or no
    noise on the tensor ``b`` (``"missing"``: 16 of 4,016 parameters), or noise with a component shared by every
    coordinate (``"common"``: correlation 0.05 between coordinates, each coordinate's variance still sigma^2)."""
    tensors = [("w", 4000), ("b", 16)]
    dim, m, c, sigma = 4016, 400, 0.5, 0.65
    can = GradientCanaries(dim, m, clip_norm=c, seed=seed, paired=paired, tensors=tensors)
    can.track_trajectory(0.5)
    rng = np.random.default_rng(seed)
    coords, signs = torch.as_tensor(can.directions), torch.as_tensor(can.inserted).double() * 2 - 1
    for t in range(steps):
        sampled = torch.as_tensor(rng.random(m) < 0.3)
        total = torch.zeros(dim, dtype=torch.float64)
        if paired:
            total[coords[sampled]] = c * signs[sampled]
        else:
            total[coords[sampled & torch.as_tensor(can.inserted)]] = c
        gen = torch.Generator().manual_seed(1234 if plant == "reused" else 1234 + t)
        noise = sigma * torch.randn(dim, generator=gen, dtype=torch.float64)
        if plant == "missing":
            noise[4000:] = 0
        if plant == "common":
            shared = float(torch.randn(1, generator=gen, dtype=torch.float64))
            noise = noise * (1 - 0.05) ** 0.5 + sigma * 0.05 ** 0.5 * shared
        if plant == "reused-b":  # only the small tensor's noise comes from one seed
            noise[4000:] = sigma * torch.randn(16, generator=torch.Generator().manual_seed(99), dtype=torch.float64)
        can.observe(t, total + 3.0 + noise - 3.0, sampled.numpy())  # through a data sum, as centred steps are
    return can.trajectory.to_dict()


@pytest.mark.parametrize("paired", [False, True])
def test_reused_noise_is_caught_across_steps_while_its_variance_passes(paired):
    z = 0.65 / (1.0 if paired else 0.5)
    good, reused = structure_checks(simulate("none", paired=paired), z), simulate("reused", paired=paired)
    assert not good["independence"]["rejected"] and not good["tensors"]["rejected"]
    assert not released_noise_check(reused, z)["rejected"]  # the pooled variance is the claimed one
    check = structure_checks(reused, z)["independence"]
    assert check["rejected"] and check["std_ratio"] < 1e-6 and check["n"] == 3 * 400


def test_a_small_unnoised_tensor_is_caught_and_named_while_the_pooled_check_passes():
    counts = simulate("missing")
    assert counts["tensor_noise"]["b"]["n"] == 6 * PER_TENSOR  # stratified: the 16-entry tensor holds 10 canaries
    assert not released_noise_check(counts, 1.3)["rejected"]
    family = tensor_checks(counts, 1.3)
    assert family["rejected"] == ["b"] and family["tensors"]["b"]["variance"]["p"] < 1e-100


def test_noise_reused_on_one_small_tensor_is_caught_there_only():
    counts = simulate("reused-b")
    checks = structure_checks(counts, 1.3)
    assert not checks["independence"]["rejected"]  # 10 of 400 canaries: diluted in the pooled pairs
    assert checks["tensors"]["rejected"] == ["b"] and checks["tensors"]["tensors"]["b"]["pairs"]["std_ratio"] < 1e-6
    assert not checks["tensors"]["tensors"]["b"]["variance"]["rejected"]


def test_stratified_placement_tops_up_every_tensor_and_keeps_a_covering_draw():
    rng = np.random.default_rng(0)
    numels = [1000, 3, 64, 5000, 1]
    uniform = rng.choice(6068, size=50, replace=False)
    placed = stratified_coordinates(uniform, numels, np.random.default_rng(1))
    held = np.bincount(tensor_index(placed, numels), minlength=5)
    assert placed.size == 50 and np.unique(placed).size == 50
    assert list(held[[1, 2, 4]]) == [3, 10, 1] and held.sum() == 50
    covering = np.concatenate([np.arange(10), 1000 + np.arange(3), 1003 + np.arange(10), 1067 + np.arange(10), [6067]])
    assert np.array_equal(stratified_coordinates(covering, numels, rng), covering)
    few = stratified_coordinates(np.arange(6), numels, rng)  # 6 canaries over 5 tensors: one each
    assert (np.bincount(tensor_index(few, numels), minlength=5) >= 1).all()
    with pytest.raises(ConfigError, match="dimension"):
        GradientCanaries(100, 10, clip_norm=1.0, tensors=[("w", 90)])


def cell(counts: dict, z: float = Z) -> CellRecord:
    """A DP cell whose gradient canaries' trajectory bound is consistent with its claim (multiplier z), with the
    residual ``counts`` (a run's ``to_dict()``)."""
    return canary_cell(counts, z, defense="dpsgd")


def test_gate_names_the_failing_check_and_tensor_and_counts_both_in_its_error_rate():
    z = 1.3
    cells = [cell(simulate("none"), z), cell(simulate("reused"), z), cell(simulate("missing"), z)]
    good, reused, missing = gate_cells(cells, GateConfig())
    assert good.status == "pass"
    assert reused.status == "fail" and any("noise independence across steps" in r and "reuses" in r
                                              for r in reused.reasons)
    assert missing.status == "fail" and any("noise per tensor: 1 of" in r and "tensor 'b' (" in r
                                            for r in missing.reasons)
    suite = suite_gate([c.with_gate(g) for c, g in zip(cells, (good, reused, missing))], [], None, GateConfig())
    assert "12 released-noise checks" in " ".join(suite.notes)  # 3 cells x (pooled, steps, tensors, coordinates)
    control = gate_cells([cell(simulate("missing"), z)], GateConfig(), {"dpsgd": ("canary", True)})[0]
    assert control.caught and control.caught_by == ("noise per tensor",)


def test_old_evidence_without_the_new_counts_is_not_judged():
    z = 1.3
    old = {k: v for k, v in simulate("none").items() if k in ("noise_n", "noise_ss")}
    gate = gate_cells([cell(old, z)], GateConfig())[0]
    noise = gate.released_noise[0]
    assert gate.status == "pass" and not noise["rejected"]
    assert "unjudged" in noise["independence"] and "unjudged" in noise["tensors"]
    notes = " ".join(suite_gate([cell(old, z).with_gate(gate)], [], None, GateConfig()).notes)
    assert "3 released-noise checks not judged" in notes and "1 released-noise checks (pooled" in notes


def test_the_report_names_a_failing_check_and_tensor():
    from privaudit.audit.report.summary import released_noise_text

    z = 1.3
    reused, missing, old = gate_cells([cell(simulate("reused"), z), cell(simulate("missing"), z),
                                       cell({k: v for k, v in simulate("none").items() if k.startswith("noise_")}, z)],
                                      GateConfig())
    assert "(reused or correlated: FAIL)" in released_noise_text(reused.released_noise[0])
    text = released_noise_text(missing.released_noise[0])
    assert "per tensor: FAIL on 'b'" in text and "across steps" in text and "consistent" in text
    assert "across steps: not judged; per tensor: not judged" in released_noise_text(old.released_noise[0])
    assert "across coordinates: not judged" in released_noise_text(old.released_noise[0])
    common = gate_cells([cell(simulate("common"), z)], GateConfig())[0]
    assert "across coordinates: " in released_noise_text(common.released_noise[0])
    assert "(correlated: FAIL)" in released_noise_text(common.released_noise[0])


@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_coordinate_level_over_4000_seeds_and_two_unsound_variants_fail_the_same_check(scale):
    """Fresh N(0, (scale z)^2) residuals -- the claimed noise, and half as much again (more private: a correct
    release): the coordinate test (the upper tail of F(T, N - T)) rejects at most alpha of 4,000 runs either way.
    Two unsound variants are caught by the same check: forgetting the 1/m scaling (each step's sum taken as one
    residual) rejects nearly every run; scaling by the claimed z instead of the measured spread (chi^2_T of
    sum_t s_t^2 / (m z^2)) holds at the claimed noise but rejects far more than alpha at 1.5 times it, refuting
    correct releases. At 4,000 runs the check rejects a test failing on 2 alpha of them with probability above 0.999."""
    rng, seeds, steps, m, alpha = np.random.default_rng(8), 4000, 6, 40, 0.05
    fails, unscaled, claimed = 0, 0, 0
    for _ in range(seeds):
        c = counts_of(scale * Z * rng.standard_normal((steps, m)))
        fails += coordinate_check(c, Z, alpha=alpha)["rejected"]
        unscaled += stats.chi2.sf(c["mode_ss"] * m / Z ** 2, c["mode_n"]) < alpha
        claimed += stats.chi2.sf(c["mode_ss"] / Z ** 2, c["mode_n"]) < alpha
    assert fails < critical(seeds, alpha) and fails > 100  # not vacuous: about 200 expected
    assert unscaled >= critical(seeds, alpha)
    assert (claimed >= critical(seeds, alpha)) == (scale > 1), claimed


def test_noise_shared_by_the_coordinates_is_caught_while_every_other_check_passes():
    """Correlation 0.05 between coordinates (each coordinate's variance as claimed, fresh at every step): the pooled,
    step-pair and per-tensor checks all pass; the coordinate test rejects far below any level the gate uses."""
    counts = simulate("common")
    checks = structure_checks(counts, 1.3)
    assert not released_noise_check(counts, 1.3)["rejected"]
    assert not checks["independence"]["rejected"] and not checks["tensors"]["rejected"]
    assert checks["coordinates"]["rejected"] and checks["coordinates"]["p"] < 1e-6
    assert checks["coordinates"]["n"] == 6 and checks["coordinates"]["std_ratio"] > 1.5
    assert not structure_checks(simulate("none"), 1.3)["coordinates"]["rejected"]
