"""The accountants privaudit knows, by name (``module:Class`` so they load lazily).

Each declares what it supports and answers "not applicable: <reason>" for the rest:

| name       | what                                                                              |
|------------|-----------------------------------------------------------------------------------|
| `rdp`      | Rényi DP via dp-accounting (Poisson/add-remove, without replacement/replace-one,  |
|            | Gaussian, Laplace, tree), conversion mironov / balle2020 / cks2020                |
| `pld`      | dp-accounting's privacy loss distributions (Poisson/add-remove, without           |
|            | replacement/replace-one, Gaussian, Laplace, tree), reported as a bracket          |
| `prv`      | Opacus' PRV accountant (Poisson-subsampled Gaussian, add/remove)                  |
| `pure`     | pure eps-DP of Laplace / logistic noise and their composition                     |
| `gaussian` | one-shot Gaussian: exact (Balle & Wang 2018), classical bound flagged             |
| `tree`     | DP-FTRL tree aggregation, zCDP and the (eps, delta) it implies                    |
"""

from __future__ import annotations

from typing import Any, Mapping

from privaudit.accountants.base import Accountant, EpsilonResult
from privaudit.accountants.claim import PrivacyClaim
from privaudit.core.errors import ConfigError
from privaudit.core.registry import Registry

ACCOUNTANTS: Registry[type[Accountant]] = Registry("accountant", {
    "rdp": "privaudit.accountants.rdp.rdp:RdpAccountant",
    "pld": "privaudit.accountants.pld.pld:PldAccountant",
    "prv": "privaudit.accountants.prv:PrvAccountant",
    "pure": "privaudit.accountants.pure:PureAccountant",
    "gaussian": "privaudit.accountants.gaussian:GaussianAccountant",
    "tree": "privaudit.accountants.tree:TreeAccountant",
})


def get_accountant(name: str, **options) -> Accountant:
    """Instantiate accountant ``name`` with its options (unknown options are a ConfigError)."""
    cls = ACCOUNTANTS.load(name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise ConfigError(f"accountant {name!r}: bad options {sorted(options)}: {exc}") from None


def epsilon(claim: PrivacyClaim, accountant: str = "rdp", **options) -> EpsilonResult:
    """Epsilon of ``claim`` under one accountant."""
    return get_accountant(accountant, **options).epsilon(claim)


def all_epsilons(claim: PrivacyClaim,
                 options: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, EpsilonResult]:
    """Epsilon of ``claim`` under every accountant (not-applicable results included, with reasons).

    ``options`` optionally maps an accountant name to its options, e.g. ``{"rdp": {"conversion": "mironov"}}``.
    """
    options = options or {}
    return {name: epsilon(claim, name, **dict(options.get(name, {}))) for name in ACCOUNTANTS}
