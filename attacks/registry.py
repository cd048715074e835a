"""Every attack privaudit knows, by name (``module:Class``, imported on first use)."""

from __future__ import annotations

from privaudit.attacks.base import Attack
from privaudit.core.registry import Registry

ATTACKS: Registry[type[Attack]] = Registry("attack", {
    "loss": "privaudit.attacks.loss:LossAttack",
    "shadow": "privaudit.attacks.shadow:ShadowModelAttack",
    "encodermi": "privaudit.attacks.encodermi:EncoderMI",
    "lira": "privaudit.attacks.lira:LiRA",
    "rmia": "privaudit.attacks.rmia:RMIA",
    "canary": "privaudit.attacks.canary:CanaryAudit",
    "gradient-canary": "privaudit.attacks.gradient_canary:GradientCanaryAudit",
    "user-canary": "privaudit.attacks.user_canary:UserCanaryAudit",
    "user-data-canary": "privaudit.attacks.user_data_canary:UserDataCanaryAudit",
})


#: ``attack_class(name)``: the class registered as ``name``; ``make_attack(name, params=None, **overrides)``: an instance
#: with validated settings. An unknown name is a ConfigError listing the accepted ones.
attack_class = ATTACKS.load
make_attack = ATTACKS.create
