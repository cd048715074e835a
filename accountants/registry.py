"""The accountants privaudit knows, by name (``module:Class`` so they load lazily)."""

from __future__ import annotations

import importlib

from accountants.base import Accountant, EpsilonResult
from accountants.claim import PrivacyClaim
from audit.errors import one_of

ACCOUNTANTS: dict[str, str] = {
    "rdp": "accountants.rdp:RdpAccountant",
}


def get_accountant(name: str, **options) -> Accountant:
    """Instantiate accountant ``name`` with its options."""
    if name not in ACCOUNTANTS:
        raise one_of("accountant", name, ACCOUNTANTS)
    module, cls = ACCOUNTANTS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**options)


def epsilon(claim: PrivacyClaim, accountant: str = "rdp", **options) -> EpsilonResult:
    """Epsilon of ``claim`` under one accountant."""
    return get_accountant(accountant, **options).epsilon(claim)


def all_epsilons(claim: PrivacyClaim) -> dict[str, EpsilonResult]:
    """Epsilon of ``claim`` under every accountant (not-applicable results included, with reasons)."""
    return {name: epsilon(claim, name) for name in ACCOUNTANTS}
