"""The released-noise check: did each step's release add the noise its claim states? Measured end to end.

Why. The training trace (:mod:`privaudit.accountants.trace.trace`) checks the noise a run *records*: its stds and the
norms of the noise vectors it drew. A release can still add less than it drew (noise scaled after its norm was
taken, added to a copy, cancelled by a later step, in a lower precision): no record shows it. The white-box
canaries see what the release actually added. At every step the auditor observes the privatised sum less the
data's clipped sum on each canary's Dirac coordinate (:mod:`privaudit.attacks.canaries.gradient_canary`); less the
canaries' own designed contribution (0, D or D/2 in the units below, known to the auditor, who drew the coins and the
sampling), what is left is the noise the release added on that coordinate.

Statistic. In units of D, the difference between the hypotheses' means (the claimed sensitivity: D = Delta for
add/remove canaries, 2 C for paired ones), the claim's Gaussian mechanism adds N(0, z_c^2) independently on every
coordinate and step, z_c the claimed multiplier of the gradient release. Over N residuals r_k,
S = sum r_k^2 / z_c^2 ~ chi^2_N exactly under the claim. If the release adds more noise (std z >= z_c), or the
canaries' contribution differs from the designed one (a residual then has a non-zero mean m and
E[(m + e)^2] = m^2 + z^2), S is only stochastically larger. So the test that rejects when
P[chi^2_N <= S] < alpha fails a run whose release adds at least the claimed Gaussian noise with probability at
most alpha (exact; it assumes, like the claim's mechanism and the trajectory bound, that the noise is drawn
afresh for every coordinate and step).

Power. The relative standard error of the measured std is about 1 / sqrt(2 N): with the quickstart's 20,000
canaries over 6-10 steps (N = 120,000-200,000) a release adding 1/1.02 of the claimed noise is caught at
alpha = 1e-6. It refutes the release's noise, not the sensitivity (the canaries are inserted at the claimed
sensitivity; the step audit's witness pairs test that).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from scipy import stats

from privaudit.accountants.trace.trace import TRACE_ALPHA
from privaudit.core.errors import ConfigError

#: The check's level per checked cell (the chance that a correct release fails it): the trace's measured checks'.
NOISE_ALPHA = TRACE_ALPHA


def check_noise_args(claimed_multiplier: float, alpha: float) -> None:
    """Refuse a level outside (0, 1) or a claimed multiplier that is not positive (every noise check's inputs)."""
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha: must be in (0, 1), got {alpha!r}")
    if not claimed_multiplier > 0:
        raise ConfigError(f"claimed_multiplier: must be > 0, got {claimed_multiplier!r}")


def chi_square_lower_tail(n: int, statistic: float, alpha: float) -> dict[str, Any]:
    """The chi-square lower tail of ``statistic`` (a sum of n squared residuals over their claimed variance) on n
    degrees of freedom, with the measured std over the claimed; ``rejected`` when p < alpha."""
    p = float(stats.chi2.cdf(statistic, n))
    return {"n": n, "std_ratio": math.sqrt(statistic / n), "p": p, "alpha": alpha, "rejected": p < alpha}


def released_noise_check(counts: Mapping[str, Any], claimed_multiplier: float, *,
                         alpha: float = NOISE_ALPHA) -> dict[str, Any] | None:
    """The check of the module docstring from saved counts (``noise_n`` residuals, ``noise_ss`` their sum of
    squares, in units of D) against the claimed multiplier z_c; None when the counts hold no residuals.

    Returns n, the measured std over the claimed (``std_ratio``), its upper confidence bound at 1 - alpha
    (``std_ratio_upper``: sqrt(sum r^2 / chi^2_N(alpha)) / z_c), the lower-tail p-value and ``rejected`` (p < alpha)."""
    check_noise_args(claimed_multiplier, alpha)
    n, ss = int(counts.get("noise_n") or 0), float(counts.get("noise_ss") or 0.0)
    if n < 1:
        return None
    z2 = float(claimed_multiplier) ** 2
    p = float(stats.chi2.cdf(ss / z2, n))
    return {"n": n, "claimed_multiplier": float(claimed_multiplier), "std_ratio": math.sqrt(ss / n / z2),
            "std_ratio_upper": math.sqrt(ss / float(stats.chi2.ppf(alpha, n)) / z2), "p": p, "alpha": alpha,
            "rejected": p < alpha}


def describe_check(check: Mapping[str, Any]) -> str:
    """One line: the measured noise against the claim's, with the test."""
    return (f"the noise its release added, measured on {check['n']} canary coordinates over its steps, has "
            f"{check['std_ratio']:.4g} of the claimed std (at most {check['std_ratio_upper']:.4g} at "
            f"{100 * (1 - check['alpha']):.6g}% confidence; z_c = {check['claimed_multiplier']:.4g}; chi-square "
            f"p = {check['p']:.3g}, level {check['alpha']:g})")
