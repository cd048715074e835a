"""Every attack privaudit knows, by name (``module:Class``, imported on first use), and plugin attacks.

A name outside the registry of the form ``module:Class`` is a plugin: :func:`attack_class` imports it and accepts it
when it is an :class:`~privaudit.attacks.base.Attack` subclass, as :func:`~privaudit.attacks.membership.shadow_models.
resolve_defense` does for defenses. Importing a plugin runs its code, so the boundaries that read untrusted names
(a suite, the ``attack`` command) accept one only with ``allow_plugins`` / ``--allow-plugins``
(docs/extending.md).
"""

from __future__ import annotations

from typing import Any, Mapping

from privaudit.attacks.base import Attack
from privaudit.core.errors import ConfigError
from privaudit.core.registry import Registry, load_reference

ATTACKS: Registry[type[Attack]] = Registry("attack", {
    "loss": "privaudit.attacks.membership.loss:LossAttack",
    "shadow": "privaudit.attacks.membership.shadow:ShadowModelAttack",
    "encodermi": "privaudit.attacks.membership.encodermi:EncoderMI",
    "lira": "privaudit.attacks.membership.lira:LiRA",
    "rmia": "privaudit.attacks.membership.rmia:RMIA",
    "canary": "privaudit.attacks.canaries.canary:CanaryAudit",
    "gradient-canary": "privaudit.attacks.canaries.gradient_canary_audit:GradientCanaryAudit",
    "user-canary": "privaudit.attacks.canaries.user_canary:UserCanaryAudit",
    "user-data-canary": "privaudit.attacks.canaries.user_data_canary:UserDataCanaryAudit",
})


def is_plugin(name: str) -> bool:
    """True when ``name`` names a plugin (``module:Class``) rather than a registered attack."""
    return ":" in name and name not in ATTACKS


def attack_class(name: str) -> type[Attack]:
    """The class registered as ``name``, or the plugin ``module:Class`` (an Attack subclass). An unknown name is a
    ConfigError listing the accepted ones."""
    if not is_plugin(name):
        return ATTACKS.load(name)
    cls = load_reference(name, field="plugin attack")
    if not (isinstance(cls, type) and issubclass(cls, Attack)):
        raise ConfigError(f"plugin attack {name!r} is not an Attack subclass")
    return cls


def make_attack(name: str, params: Mapping[str, Any] | None = None, **overrides: Any) -> Attack:
    """An instance of :func:`attack_class` ``(name)`` with validated settings (``params`` then ``overrides``)."""
    return attack_class(name)(params, **overrides)
