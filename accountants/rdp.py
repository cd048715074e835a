"""Rényi-DP accountant, built on dp-accounting's ``RdpAccountant``.

It covers Gaussian and Laplace noise, Poisson sampling (add/remove), fixed-size sampling without
replacement (replace-one; Wang, Balle & Kasiviswanathan 2019), and self-/mixed composition. The
RDP-to-(epsilon, delta) conversion is dp-accounting's, i.e. Balle et al. 2020 Thm. 21 (identical to
Canonne, Kamath & Steinke 2020 Prop. 12): eps = min_a rho(a) + log((a-1)/a) - (log delta + log a)/(a-1).
"""

from __future__ import annotations

from typing import Any

import dp_accounting
from dp_accounting import rdp as dp_rdp

from accountants.base import Accountant, NotApplicable
from accountants.claim import PrivacyClaim

DEFAULT_ORDERS = tuple(dp_rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)

_RELATIONS = {
    "add-remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace-one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}


class RdpAccountant(Accountant):
    name = "rdp"

    def __init__(self, orders: tuple[float, ...] = DEFAULT_ORDERS):
        self.orders = orders

    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        acc = dp_rdp.RdpAccountant(list(self.orders), _RELATIONS[claim.relation])
        if not acc.supports(claim.event):
            raise NotApplicable(
                f"dp-accounting's RDP accountant does not support this event under {claim.relation}")
        acc.compose(claim.event)
        eps, order = acc.get_epsilon_and_optimal_order(claim.delta)
        return eps, {"order": float(order), "conversion": "balle2020"}
