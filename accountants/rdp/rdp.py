"""Rényi-DP accountant, built on dp-accounting's ``RdpAccountant``, with a selectable RDP -> DP conversion.

RDP curves (alpha -> rho(alpha)) come from dp-accounting for everything it supports:
- Gaussian noise (alpha / (2 z^2), Mironov 2017 Cor. 3) and Laplace noise (Mironov 2017, Prop. 6);
- Poisson-subsampled Gaussian under add/remove (Mironov, Talwar & Zhang 2019), including several
  Gaussians released on the same sample (collapsed to one effective Gaussian, McMahan et al. 2018); its
  curve is evaluated by Opacus' implementation of the same series, which (unlike dp-accounting 0.6 at
  fractional orders) matches numerical integration, see :meth:`RdpAccountant._poisson_exact`;
- fixed-size sampling without replacement under replace-one (Wang, Balle & Kasiviswanathan 2019, their
  strengthened Thm. 27; ``wor_bound="thm9"`` uses WBK19 Thm. 9 instead, the bound DPCL states as its
  Eq. (10)-(11), see :mod:`privaudit.accountants.rdp.wor_rdp`);
- self- and mixed composition (RDP adds up, Mironov 2017 Prop. 1);
and from :mod:`privaudit.accountants.tree` for DP-FTRL tree aggregation (alpha * rho).

Anything else (Poisson sampling under replace-one, without-replacement sampling under add/remove, the
logistic mechanism, ...) is not applicable, with dp-accounting's reason.

The conversion is one of :data:`~privaudit.accountants.rdp.conversions.CONVERSIONS` (``balle2020`` by default, which
is also ``cks2020``: the two papers' formulas coincide; ``mironov`` is looser).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import dp_accounting
import numpy as np
from dp_accounting import rdp as dp_rdp

from privaudit.accountants.base import Accountant, NotApplicable, refuse
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.rdp.conversions import check_conversion, rdp_to_dp
from privaudit.accountants.events import (ComposedDpEvent, DiscreteGaussianDpEvent, DpEvent, LogisticDpEvent, NonPrivateDpEvent, NoOpDpEvent,
                                PoissonSampledDpEvent, SampledWithoutReplacementDpEvent, SelfComposedDpEvent,
                                SingleEpochTreeAggregationDpEvent, SnappingDpEvent, TreeAggregationDpEvent, describe,
                                effective_gaussian_noise)
from privaudit.accountants.tree import tree_rdp
from privaudit.accountants.rdp.wor_rdp import wor_gaussian_rdp_thm9
from privaudit.core.errors import ConfigError, one_of

DEFAULT_ORDERS = tuple(dp_rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
WOR_BOUNDS = ("thm27", "thm9")

_RELATIONS = {
    "add-remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace-one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}


@functools.lru_cache(maxsize=1)
def _opacus_rdp_analysis() -> ModuleType:
    """Opacus' RDP analysis (``opacus/accountants/analysis/rdp.py``, NumPy and SciPy only), loaded from its file so
    that the accountant commands do not import the ``opacus`` package, which imports torch."""
    loaded = sys.modules.get("opacus.accountants.analysis.rdp")
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("opacus")  # locates the package without executing it
    if package is None or not package.submodule_search_locations:
        raise ImportError("opacus is not installed")
    path = Path(next(iter(package.submodule_search_locations))) / "accountants" / "analysis" / "rdp.py"
    spec = importlib.util.spec_from_file_location("_privaudit_opacus_rdp_analysis", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def quiet_absl() -> Iterator[None]:
    """dp-accounting logs (via absl) every order it drops for numerical reasons; keep the CLI readable."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


# RDP curves of leaf events (a sampled step, a Gaussian) repeat across compositions and calibration steps,
# and the without-replacement bound is slow to evaluate, so keep the recent ones.
_LEAF_CACHE: dict[tuple, np.ndarray] = {}
_LEAF_CACHE_SIZE = 512

_NO_CURVE = {
    LogisticDpEvent: "rdp: no RDP curve for the logistic mechanism; use the 'pure' accountant "
                     "(epsilon = 1 / noise_multiplier, ALM Thm. 4.1)",
    SnappingDpEvent: "rdp: no RDP curve for the snapping mechanism; use the 'pure' accountant "
                     "(epsilon = 1 / noise_multiplier + overhead, Mironov 2012 Thm. 1)",
}


class RdpAccountant(Accountant):
    name = "rdp"

    def __init__(self, orders: tuple[float, ...] = DEFAULT_ORDERS, conversion: str = "balle2020",
                 wor_bound: str = "thm27"):
        orders = tuple(float(a) for a in orders)
        if not orders or min(orders) < 1:
            raise ConfigError(f"orders: must be a non-empty list of orders >= 1, got {orders!r}")
        if wor_bound not in WOR_BOUNDS:
            raise one_of("wor_bound", wor_bound, WOR_BOUNDS)
        self.orders = orders
        self.conversion = check_conversion(conversion)
        self.wor_bound = wor_bound

    # -- RDP curve -------------------------------------------------------------------------------
    def rdp_curve(self, claim: PrivacyClaim) -> np.ndarray:
        """rho(alpha) of the whole claim at :attr:`orders`; raises NotApplicable with the reason."""
        with quiet_absl():
            return self._rdp(claim.event, claim.relation)

    def _rdp(self, event: DpEvent, relation: str) -> np.ndarray:
        """rho(alpha) of ``event``: compositions add up (Mironov 2017, Prop. 1), leaves come from the tree
        accountant, WBK19 Thm. 9 (``wor_bound="thm9"``) or dp-accounting."""
        orders = self.orders
        if isinstance(event, NoOpDpEvent):
            return np.zeros(len(orders))
        if isinstance(event, NonPrivateDpEvent):
            return np.full(len(orders), np.inf)
        if isinstance(event, SelfComposedDpEvent):
            return event.count * self._rdp(event.event, relation)
        if isinstance(event, ComposedDpEvent):
            return sum((self._rdp(e, relation) for e in event.events), np.zeros(len(orders)))
        if isinstance(event, (TreeAggregationDpEvent, SingleEpochTreeAggregationDpEvent)):
            return tree_rdp(event, orders)
        if isinstance(event, DiscreteGaussianDpEvent):  # rho-zCDP, rho = 1 / (2 z^2) (CKS 2020, Thm. 14)
            z = float(event.noise_multiplier)
            return np.full(len(orders), np.inf) if z <= 0 else np.asarray(orders, dtype=float) / (2 * z * z)
        refuse(event, _NO_CURVE)
        if (isinstance(event, SampledWithoutReplacementDpEvent) and self.wor_bound == "thm9"
                and relation == "replace-one"):
            z = effective_gaussian_noise(event.event)
            if z is None:
                raise NotApplicable(f"rdp: without-replacement sampling of {describe(event.event)} "
                                    "(only Gaussian noise is supported)")
            return wor_gaussian_rdp_thm9(event.sample_size / event.source_dataset_size, z, orders)
        return self._leaf_rdp(event, relation)

    def _leaf_rdp(self, event: DpEvent, relation: str) -> np.ndarray:
        """dp-accounting's curve of a leaf event (Poisson-subsampled Gaussians re-evaluated by
        :meth:`_poisson_exact`), kept in :data:`_LEAF_CACHE`."""
        orders = self.orders
        key = (event, relation, orders)
        try:
            cached = _LEAF_CACHE.get(key)
        except TypeError:  # an unhashable event (one holding a list)
            key, cached = None, None
        if cached is not None:
            return cached.copy()
        acc = dp_rdp.RdpAccountant(list(orders), _RELATIONS[relation])
        error = acc._maybe_compose(event, 1, False)  # the library's own support check, with its message
        if error is not None:
            raise NotApplicable(f"rdp: dp-accounting cannot account for {describe(event)} under {relation}: "
                                f"{error.error_message}")
        acc.compose(event)
        curve = np.asarray(acc.rdp, dtype=float)
        if isinstance(event, PoissonSampledDpEvent):
            curve = self._poisson_exact(event, curve)
        if key is not None:
            if len(_LEAF_CACHE) >= _LEAF_CACHE_SIZE:
                _LEAF_CACHE.pop(next(iter(_LEAF_CACHE)))
            _LEAF_CACHE[key] = curve.copy()
        return curve

    def _poisson_exact(self, event: PoissonSampledDpEvent, curve: np.ndarray) -> np.ndarray:
        """Poisson-subsampled Gaussian: A_alpha evaluated by Opacus' series (Mironov, Talwar & Zhang 2019,
        Sec. 3.3), run to convergence. dp-accounting 0.6 evaluates the same series at fractional orders but
        overestimates it there (by 26% at alpha = 1.1, q = 0.01, z = 0.6) or, when it does not converge in
        1000 terms, drops the order (inf); Opacus' values match numerical integration of the Rényi divergence
        (``tests/test_accountants_rdp.py``). Integer orders agree to ~1e-12. Where Opacus' value is not finite,
        dp-accounting's (an upper bound) is kept."""
        compute_rdp = _opacus_rdp_analysis().compute_rdp
        z = effective_gaussian_noise(event.event)
        if z is None or z <= 0:
            return curve
        with np.errstate(all="ignore"):
            exact = np.asarray(compute_rdp(q=float(event.sampling_probability), noise_multiplier=z, steps=1,
                                           orders=list(self.orders)), dtype=float)
        usable = np.isfinite(exact) & (exact >= 0)
        return np.where(usable, exact, curve)

    # -- epsilon ---------------------------------------------------------------------------------
    def _epsilon(self, claim: PrivacyClaim) -> tuple[float, dict[str, Any] | None]:
        rdp = self.rdp_curve(claim)
        eps, order = rdp_to_dp(self.orders, rdp, claim.delta, self.conversion)
        details: dict[str, Any] = {"order": order, "conversion": self.conversion}
        if any(isinstance(e, SampledWithoutReplacementDpEvent) for e in self.walk(claim.event)):
            details["wor_bound"] = self.wor_bound
        if order in (self.orders[0], self.orders[-1]):
            details["warning"] = f"optimal order {order:g} is at the edge of the orders grid; widen it"
        return eps, details
