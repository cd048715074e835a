"""Privacy-loss-random-variable accountant: Opacus' ``PRVAccountant`` (Gopi, Lee & Wutschitz 2021).

Opacus composes Poisson-subsampled Gaussian PRVs numerically (FFT) and returns an upper bound on epsilon
within ``eps_error``. It knows one mechanism only, so this accountant supports:
- add/remove: Poisson-subsampled Gaussian noise (several Gaussians on one sample collapse to the one
  equivalent Gaussian), and unsampled Gaussian noise (sample rate 1);
- replace-one: unsampled Gaussian noise (same privacy curve as add/remove under our noise convention);
- any self- or mixed composition of these (a heterogeneous history of (noise, rate, steps)).

Everything else is not applicable: Opacus assumes Poisson sampling under add/remove ("Opacus currently
operates under the assumption that only a Poisson-subsampled Gaussian mechanism is ever used"), so no
sampling without replacement, no Laplace or logistic noise, no tree aggregation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privaudit.accountants.base import Accountant, NotApplicable
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import (ComposedDpEvent, DpEvent, NoOpDpEvent, PoissonSampledDpEvent,
                                SelfComposedDpEvent, describe, effective_gaussian_noise)
from privaudit.core.errors import check_positive


def prv_history(event: DpEvent, relation: str, count: int = 1) -> list[tuple[float, float, int]]:
    """Opacus history ``[(noise_multiplier, sample_rate, steps), ...]`` for ``event``, or NotApplicable."""
    if isinstance(event, NoOpDpEvent):
        return []
    if isinstance(event, SelfComposedDpEvent):
        return prv_history(event.event, relation, count * event.count)
    if isinstance(event, ComposedDpEvent):
        out: list[tuple[float, float, int]] = []
        for child in event.events:
            out.extend(prv_history(child, relation, count))
        return out
    z = effective_gaussian_noise(event)
    if z is not None:  # unsampled Gaussian(s): sample rate 1
        return [(z, 1.0, count)] if count > 0 else []
    if isinstance(event, PoissonSampledDpEvent):
        if relation != "add-remove":
            raise NotApplicable("prv: Opacus' PRV accountant assumes Poisson sampling under add/remove")
        z = effective_gaussian_noise(event.event)
        if z is None:
            raise NotApplicable(f"prv: Opacus' PRV accountant only knows the subsampled Gaussian, "
                                f"not {describe(event.event)}")
        return [(z, float(event.sampling_probability), count)] if count > 0 else []
    raise NotApplicable(f"prv: Opacus' PRV accountant only supports Poisson-subsampled Gaussian noise, "
                        f"not {describe(event)}")


class PrvAccountant(Accountant):
    name = "prv"

    def __init__(self, eps_error: float = 0.01):
        check_positive("eps_error", eps_error)
        self.eps_error = eps_error

    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        history = prv_history(claim.event, claim.relation)
        if any(z <= 0 for z, _, _ in history):
            return float("inf"), None
        history = [h for h in history if h[1] > 0]
        if not history:
            return 0.0, {"eps_error": self.eps_error}
        if claim.delta <= 0:
            raise NotApplicable("prv: needs delta > 0")
        from opacus.accountants import PRVAccountant as OpacusPRV  # torch: imported only when PRV applies

        acc = OpacusPRV()
        acc.history = [(float(z), float(q), int(n)) for z, q, n in history]
        with np.errstate(divide="ignore", invalid="ignore"):
            eps = acc.get_epsilon(claim.delta, eps_error=self.eps_error)
        return float(eps), {"eps_error": self.eps_error, "history": acc.history}
