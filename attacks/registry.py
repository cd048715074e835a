"""Every attack privaudit knows, by name (``module:Class``, imported on first use)."""

from __future__ import annotations

from attacks.base import Attack
from core.registry import Registry

ATTACKS: Registry[type[Attack]] = Registry("attack", {
    "loss": "attacks.loss:LossAttack",
    "shadow": "attacks.shadow:ShadowModelAttack",
    "encodermi": "attacks.encodermi:EncoderMI",
    "lira": "attacks.lira:LiRA",
    "rmia": "attacks.rmia:RMIA",
    "canary": "attacks.canary:CanaryAudit",
    "gradient-canary": "attacks.gradient_canary:GradientCanaryAudit",
    "user-canary": "attacks.user_canary:UserCanaryAudit",
    "user-data-canary": "attacks.user_data_canary:UserDataCanaryAudit",
})


#: ``attack_class(name)``: the class registered as ``name``; ``make_attack(name, params=None, **overrides)``: an instance
#: with validated settings. An unknown name is a ConfigError listing the accepted ones.
attack_class = ATTACKS.load
make_attack = ATTACKS.create
