"""Defenses: the five papers' methods and their baselines, plus the pieces they share."""

from privaudit.defenses.base import Budget, Defense, PrivatizedQuantity, Trained, default_delta
from privaudit.defenses.registry import DEFENSES, defense_class, make_defense

__all__ = ["Budget", "DEFENSES", "Defense", "PrivatizedQuantity", "Trained", "default_delta", "defense_class",
           "make_defense"]
