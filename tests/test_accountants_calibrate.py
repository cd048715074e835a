"""Calibration: DPCL's published noise multipliers with DPCL's recipe, split budgets, every accountant."""

import pytest

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import LogisticDpEvent
from dp_accounting import GaussianDpEvent, SampledWithoutReplacementDpEvent, SelfComposedDpEvent

from privaudit.accountants import calibrate, calibrate_rdp_shares, epsilon
from privaudit.accountants.sampled_gaussian import sampled_gaussian_template, steps_for_epochs
from privaudit.core.errors import ConfigError

N, B, DELTA = 50_000, 128, 1e-5
DPCL_RECIPE = dict(conversion="balle2020", wor_bound="thm9")  # WBK19 Thm. 9 + Balle et al. 2020 Thm. 21


def dpcl(epochs, mechanisms=1, composition="separate"):
    return sampled_gaussian_template(steps=steps_for_epochs(epochs, N, B), delta=DELTA, dataset_size=N, batch_size=B,
                                     sampling="without-replacement", mechanisms=mechanisms, composition=composition)


def three_digits(x):
    return float(f"{x:.3g}")


def test_dpcl_steps_are_e_over_q():
    assert steps_for_epochs(200, N, B) == 78125 and steps_for_epochs(100, N, B) == 39063


@pytest.mark.parametrize("epochs,mechanisms,published", [(200, 1, 0.3812), (200, 2, 0.4021), (100, 1, 0.3633)])
def test_dpcl_published_noise_multipliers(epochs, mechanisms, published):
    z = calibrate(dpcl(epochs, mechanisms), 1000.0, "rdp", rel_tol=1e-5, **DPCL_RECIPE)
    assert three_digits(z) == three_digits(published)
    assert abs(z - published) < 2e-4  # 4th digit within one unit (0.36322 for the published 0.3633)
    assert epsilon(dpcl(epochs, mechanisms)(z), "rdp", **DPCL_RECIPE).epsilon <= 1000.0


def test_dpcl_barlow_split_budget_reproduces_0_3931_and_0_416():
    steps = steps_for_epochs(100, N, B)

    def mech(z):
        return SelfComposedDpEvent(SampledWithoutReplacementDpEvent(N, B, GaussianDpEvent(z)), steps)

    split = calibrate_rdp_shares([mech] * 5, [1 / 3] + [1 / 6] * 4, 1000.0, DELTA, "replace-one", rel_tol=1e-5,
                                 **DPCL_RECIPE)
    assert [round(z, 4) for z in split.noise_multipliers] == [0.3931, 0.416, 0.416, 0.416, 0.416]
    assert split.order == 2.0 and split.epsilon <= 1000.0
    with pytest.raises(ConfigError, match="shares: must be positive and sum to 1"):
        calibrate_rdp_shares([mech] * 2, [0.5, 0.6], 1000.0, DELTA, "replace-one")


def test_shared_batch_needs_far_more_noise_than_dpcls_recipe():
    joint = dpcl(200, 2, "joint")  # both mechanisms on the step's one batch: one subsampled composition
    assert epsilon(joint(0.4021), "rdp").epsilon > 100_000
    assert epsilon(joint(0.535), "rdp").epsilon > 1000 >= epsilon(joint(0.545), "rdp").epsilon


@pytest.mark.parametrize("accountant", ["rdp", "pld", "prv"])
def test_calibrate_inverts_epsilon_for_each_accountant(accountant):
    template = sampled_gaussian_template(steps=100, delta=1e-5, sample_rate=0.02)
    options = {"value_discretization_interval": 1e-3} if accountant == "pld" else {}
    z = calibrate(template, 3.0, accountant, rel_tol=1e-4, **options)
    assert epsilon(template(z), accountant, **options).epsilon <= 3.0
    assert epsilon(template(z * 0.99), accountant, **options).epsilon > 3.0


def test_calibrate_errors():
    template = sampled_gaussian_template(steps=10, delta=1e-5, dataset_size=100, batch_size=10,
                                         sampling="without-replacement")
    with pytest.raises(ConfigError, match="accountant 'pld' is not applicable: pld: dp-accounting has no privacy loss "
                                          "distribution for the logistic mechanism"):
        calibrate(lambda z: PrivacyClaim(LogisticDpEvent(z), "replace-one", "example", 0.0), 1.0, "pld")
    with pytest.raises(ConfigError, match="target_epsilon: must be > 0"):
        calibrate(template, 0.0)
    with pytest.raises(ConfigError, match="not reachable with noise multiplier <= 2.0"):
        calibrate(template, 1e-3, high=2.0)
    with pytest.raises(ConfigError, match="accountant: unknown value 'moments'"):
        calibrate(template, 1.0, "moments")
