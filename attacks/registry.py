"""Every attack privaudit knows, by name (``module:Class``, imported on first use)."""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from attacks.base import Attack
from audit.errors import one_of

ATTACKS: dict[str, str] = {
    "loss": "attacks.loss:LossAttack",
    "shadow": "attacks.shadow:ShadowModelAttack",
    "encodermi": "attacks.encodermi:EncoderMI",
    "lira": "attacks.lira:LiRA",
    "canary": "attacks.canary:CanaryAudit",
    "gradient-canary": "attacks.gradient_canary:GradientCanaryAudit",
}


def attack_class(name: str) -> type[Attack]:
    if name not in ATTACKS:
        raise one_of("attack", name, ATTACKS)
    module, cls = ATTACKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_attack(name: str, params: Mapping[str, Any] | None = None, **overrides: Any) -> Attack:
    """Instantiate attack ``name`` with validated settings."""
    return attack_class(name)(params, **overrides)
