"""How a register entry becomes a search :class:`~privaudit.audit.sensitivity.evaluator.Target` at one setting.

Each builder takes the defense's privatized quantity for the claim (:meth:`ClaimSpec.quantity`), the input
domain the neighbours are drawn from, the bound's parameters realised at the setting, and the defense's own
bound (reported beside the register's; the register's is the claim that is checked).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from privaudit.core.errors import ConfigError
from privaudit.audit.sensitivity.claim_spec import Builder, ClaimSpec, Params, Setting
from privaudit.audit.sensitivity.context import Context
from privaudit.audit.sensitivity.domains import ImageDomain, VectorDomain
from privaudit.audit.sensitivity.evaluator import Target
from privaudit.defenses.base import PrivatizedQuantity

ParamFn = Callable[[Setting, PrivatizedQuantity], dict[str, Any]]


def _defense_bounds(q: PrivatizedQuantity, params: Params) -> dict[str, Any]:
    """The defense's own bound (and corrected bound) evaluated at the setting's parameters."""
    merged = {**dict(q.params), **dict(params)}
    out: dict[str, Any] = {}
    for name, fn in (("defense_bound", q.bound), ("corrected_bound", getattr(q, "corrected_bound", None))):
        if fn is None:
            continue
        try:
            out[name] = float(fn(merged))
        except (KeyError, TypeError, ValueError) as exc:
            out[name] = f"not evaluable: {exc}"
    return out


def reference_builder(spec: ClaimSpec, setting: Setting, ctx: Context, state: Any = None) -> Target:
    """Reference functions of N vectors in the clip ball (:mod:`privaudit.audit.sensitivity.reference`)."""
    from privaudit.audit.sensitivity.reference import reference_quantities

    dim, clip = int(spec.base_overrides.get("dim", 16)), float(spec.base_overrides.get("clip", 1.0))
    [q] = [q for q in reference_quantities(dim, clip) if q.claim_id == spec.key]
    params = {"C": clip, "N": setting.units, "d": dim}
    return Target(q.fn, VectorDomain(dim, clip), spec.relation, spec.norm, setting.units, spec.bound(params), params,
                  setting.to_dict())


def image_builder(param_fn: ParamFn, seeds: str = "gradient_seeds") -> Builder:
    """Builder for quantities of a batch of images (the DP training defenses).

    ``seeds``: the name of the constructed-pair function of :mod:`privaudit.audit.sensitivity.extremal` the
    search starts from (by name: that package imports the search types).
    """

    def build(spec: ClaimSpec, setting: Setting, ctx: Context, state: Any = None) -> Target:
        q, saved, net = spec.quantity(setting, ctx, state)
        params = param_fn(setting, q)
        data = ctx.data
        domain = ImageDomain(data.train.x, data.train.y, num_classes=data.info.num_classes)
        from privaudit.audit.sensitivity import extremal

        return Target(q.fn, domain, spec.relation, spec.norm, setting.units, spec.bound(params), params,
                      setting.to_dict(), extra=_defense_bounds(q, params), model_state=saved,
                      seeds=getattr(extremal, seeds), module=net)

    return build


def alm_builder(spec: ClaimSpec, setting: Setting, ctx: Context, state: Any = None) -> Target:
    """ALM: replace one record of the fine-tuning set (the members) by any labelled image."""
    q, _, _ = spec.quantity(setting, ctx, state)
    data = ctx.data
    params = {k: v for k, v in q.params.items()}
    pool_x = torch.cat([data.train.x, data.public.x, data.test.x])
    pool_y = torch.cat([data.train.y, data.public.y, data.test.y])
    domain = ImageDomain(pool_x, pool_y, num_classes=data.info.num_classes, labels=True)
    base = {"x": data.train.x.clone(), "y": data.train.y.clone().long()}
    return Target(q.fn, domain, spec.relation, spec.norm, len(data.train.x), spec.bound(params), params,
                  setting.to_dict(), fixed_base=base, extra=_defense_bounds(q, params))


def fedemb_builder(spec: ClaimSpec, setting: Setting, ctx: Context, state: Any = None) -> Target:
    """DP-FedEmb: one user's examples (``examples_per_user`` rows) replaced inside one virtual client.

    The replacement keeps the user's labels: the implementation sizes every client's fresh local
    head by the largest class count among the clients and draws all heads in one call, so a label
    change that altered that count would re-draw every other client's head from the shared seed --
    a change of coupling, not of data, which no proof (nor DP) cares about.
    """
    q, _, _ = spec.quantity(setting, ctx, state)
    data = ctx.data
    per_user = int(setting.overrides.get("examples_per_user", 2))
    per_client = int(setting.overrides.get("users_per_client", 1))
    params = {**dict(q.params), "users_per_client": per_client, "examples_per_user": per_user}
    domain = ImageDomain(data.train.x, data.train.y, num_classes=data.info.num_classes, labels=True,
                         unit_size=per_user, users_per_client=per_client, fixed_labels=True)
    return Target(q.fn, domain, spec.relation, spec.norm, setting.units, spec.bound(params), params,
                  setting.to_dict(), extra={**_defense_bounds(q, params),
                                            "implemented_bound": q.params.get("implemented_bound")})


def params_with(*names: str) -> ParamFn:
    """Parameters: the realised batch size B = setting.units plus ``names`` read from the quantity's params."""

    def fn(setting: Setting, q: PrivatizedQuantity) -> dict[str, Any]:
        out: dict[str, Any] = {"B": setting.units}
        for n in names:
            if n not in q.params:
                raise ConfigError(f"quantity {q.claim_id}: parameter {n!r} missing from its params "
                                  f"({', '.join(map(str, q.params))})")
            out[n] = q.params[n]
        return out

    return fn


def logit_params(setting: Setting, q: PrivatizedQuantity) -> dict[str, Any]:
    """Logit-DP: B pairs in D, n = B + 1 in the larger neighbour, clip C and temperature tau."""
    return {"B": setting.units, "n": setting.units + 1, "C": q.params["C"], "tau": q.params.get("tau", 1.0)}


def group_params(setting: Setting, q: PrivatizedQuantity) -> dict[str, Any]:
    """DP-GCL group clipping: batch B, group size S, clip C and temperature tau."""
    return {"B": setting.units, "S": q.params["S"], "C": q.params["C"], "tau": q.params["tau"]}
