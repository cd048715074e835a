"""Privacy-loss-distribution accountant: dp-accounting's ``PLDAccountant`` (tight up to discretisation).

Supported (Koskela, Jälkö & Honkela 2020; Doroshenko et al. 2022 "Connect the dots", as implemented by
dp-accounting, pessimistic estimates, so the epsilon is an upper bound):
- add/remove: unsampled Gaussian and Laplace noise; Poisson-subsampled Gaussian or Laplace noise; several
  Gaussians on one Poisson sample (rewritten to the one equivalent Gaussian, which the library does not do
  itself); self- and mixed composition;
- replace-one: unsampled Gaussian and Laplace noise only. With our noise-multiplier convention (std over
  the replace-one sensitivity) their privacy curve equals the add/remove one, so they are computed as such.

Not applicable: sampling without replacement (dp-accounting has no PLD for it — DP-FedEmb App. C says the
same), Poisson sampling under replace-one (dp-accounting models it as a +-sensitivity shift, which is a
different noise convention from ours), the logistic mechanism and tree aggregation.
"""

from __future__ import annotations

from typing import Any

import dp_accounting
from dp_accounting import pld as dp_pld

from accountants.base import Accountant, NotApplicable
from accountants.claim import PrivacyClaim
from accountants.events import (ComposedDpEvent, DpEvent, GaussianDpEvent, LaplaceDpEvent, LogisticDpEvent,
                                NonPrivateDpEvent, NoOpDpEvent, PoissonSampledDpEvent,
                                SampledWithoutReplacementDpEvent, SelfComposedDpEvent,
                                describe, effective_gaussian_noise)
from core.errors import check_positive


def _rewrite(event: DpEvent, relation: str) -> DpEvent:
    """The equivalent event dp-accounting's PLD accountant understands (add/remove), or NotApplicable."""
    if isinstance(event, (NoOpDpEvent, NonPrivateDpEvent, GaussianDpEvent, LaplaceDpEvent)):
        return event
    if isinstance(event, SelfComposedDpEvent):
        return SelfComposedDpEvent(_rewrite(event.event, relation), event.count)
    if isinstance(event, ComposedDpEvent):
        return ComposedDpEvent([_rewrite(e, relation) for e in event.events])
    if isinstance(event, PoissonSampledDpEvent):
        if relation != "add-remove":
            raise NotApplicable("pld: Poisson sampling is supported under add/remove only")
        if isinstance(event.event, LaplaceDpEvent):
            return event
        z = effective_gaussian_noise(event.event)
        if z is None:
            raise NotApplicable(f"pld: Poisson sampling of {describe(event.event)} (only Gaussian or Laplace noise)")
        return PoissonSampledDpEvent(event.sampling_probability, GaussianDpEvent(z))
    if isinstance(event, LogisticDpEvent):
        raise NotApplicable("pld: dp-accounting has no privacy loss distribution for the logistic mechanism; "
                            "use 'pure'")
    if isinstance(event, SampledWithoutReplacementDpEvent):
        raise NotApplicable("pld: dp-accounting has no privacy loss distribution for sampling without "
                            "replacement (replace-one); use 'rdp'")
    raise NotApplicable(f"pld: dp-accounting's PLD accountant does not support {describe(event)}")


class PldAccountant(Accountant):
    name = "pld"

    def __init__(self, value_discretization_interval: float = 1e-4):
        check_positive("value_discretization_interval", value_discretization_interval)
        self.value_discretization_interval = value_discretization_interval

    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        event = _rewrite(claim.event, claim.relation)
        acc = dp_pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                   value_discretization_interval=self.value_discretization_interval)
        if not acc.supports(event):
            raise NotApplicable(f"pld: dp-accounting's PLD accountant does not support {describe(event)}")
        acc.compose(event)
        return float(acc.get_epsilon(claim.delta)), {
            "value_discretization_interval": self.value_discretization_interval}
