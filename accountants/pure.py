"""Pure epsilon-DP of additive Laplace and logistic noise and of their composition.

- Laplace noise of scale b on a query of L1 sensitivity Delta: eps = Delta / b = 1 / noise_multiplier
  (Dwork, McSherry, Nissim & Smith 2006).
- Logistic noise of scale s, per coordinate: eps = Delta_1 / s = 1 / noise_multiplier, with Delta_1 the L1
  sensitivity (ALM paper, Thm. 4.1 for scalar queries and Remark 4.1 for vector queries). The bound is
  correct: the log-density of Logistic(0, s) is (1/s)-Lipschitz (its derivative is -tanh(x / 2s) / s),
  so per coordinate the privacy loss is at most |f(x)_i - f(y)_i| / s, and the coordinates add up. Released on a
  grid (ALM's exact discrete logistic): + the event's ``overhead`` d Lambda / s (rounding to the grid).
- Laplace noise released through Mironov's snapping mechanism (floating-point safe): eps = 1 / noise_multiplier
  + the snapping's overhead d 2^-49 B / lambda (Mironov 2012, Thm. 1, per coordinate).
- Composition: epsilons add (basic composition, Dwork et al. 2006), for any delta >= 0.

Gaussian noise and subsampled events have no pure-DP guarantee here: not applicable. The noise
multiplier is relative to the L1 sensitivity under the claim's relation, so relations need no special case.
"""

from __future__ import annotations

import math
from typing import Any

from privaudit.accountants.base import Accountant, NotApplicable
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import (ComposedDpEvent, DpEvent, LaplaceDpEvent, LogisticDpEvent, NoOpDpEvent,
                                SelfComposedDpEvent, SnappingDpEvent, describe)


def pure_epsilon(event: DpEvent) -> float:
    """Basic-composition epsilon of Laplace/logistic events; raises NotApplicable for anything else."""
    if isinstance(event, NoOpDpEvent):
        return 0.0
    if isinstance(event, SnappingDpEvent):
        return math.inf if event.noise_multiplier <= 0 else 1.0 / event.noise_multiplier + float(event.overhead)
    if isinstance(event, LogisticDpEvent):
        return math.inf if event.noise_multiplier <= 0 else 1.0 / event.noise_multiplier + float(event.overhead)
    if isinstance(event, LaplaceDpEvent):
        return math.inf if event.noise_multiplier <= 0 else 1.0 / event.noise_multiplier
    if isinstance(event, SelfComposedDpEvent):
        return event.count * pure_epsilon(event.event)
    if isinstance(event, ComposedDpEvent):
        return sum(pure_epsilon(e) for e in event.events)
    raise NotApplicable(f"pure: only Laplace and logistic noise (and their composition) are pure eps-DP here, "
                        f"not {describe(event)}")


class PureAccountant(Accountant):
    name = "pure"

    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        return pure_epsilon(claim.event), {"pure": True}
