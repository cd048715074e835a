"""Every defense privaudit knows, by name (``module:Class``, imported on first use)."""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from audit.errors import one_of
from defenses.base import Defense

DEFENSES: dict[str, str] = {
    "nonprivate": "defenses.nonprivate:NonPrivate",
    "supervised": "defenses.supervised:Supervised",
    "alm": "defenses.alm:ALM",
    "dp-fedemb": "defenses.fedemb:DPFedEmb",
    "dp-fedavg": "defenses.fedemb:DPFedAvg",
    "dpsgd": "defenses.dpsgd:DPSGD",
    "dp-clip": "defenses.dp_clip:DPClip",
    "dpcl-simclr": "defenses.dpcl:DPCLSimCLR",
    "dpcl-barlow": "defenses.dpcl:DPCLBarlow",
    "dp-gcl": "defenses.dp_gcl:DPGCL",
    "logit-dp": "defenses.logit_dp:LogitDP",
}


def defense_class(name: str) -> type[Defense]:
    if name not in DEFENSES:
        raise one_of("defense", name, DEFENSES)
    module, cls = DEFENSES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_defense(name: str, params: Mapping[str, Any] | None = None, **overrides: Any) -> Defense:
    """Instantiate defense ``name`` with validated hyper-parameters."""
    return defense_class(name)(params, **overrides)
