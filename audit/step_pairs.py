"""Neighbouring pairs shared by the step audits (:mod:`privaudit.audit.step_audit`, :mod:`privaudit.audit.release_audit`)."""

from __future__ import annotations

from typing import Any

import torch

from privaudit.core.errors import ConfigError


def dirac_image(like: torch.Tensor) -> torch.Tensor:
    """A Dirac-like image shaped like ``like``: one pixel (the middle one) at 1, the rest 0."""
    img = torch.zeros_like(like)
    flat = img.reshape(-1)
    flat[flat.numel() // 2] = 1.0
    return img


def search_witness(spec: Any, ctx: Any, evaluations: int, seed: int) -> tuple[Any, Any, Any]:
    """(setting, target, search result) of the sensitivity search on a register entry, at its largest batch."""
    from privaudit.audit.sensitivity.search import search
    from privaudit.defenses.seeding import torch_generator

    setting = max(spec.settings, key=lambda st: st.units)  # the largest batch: the first among ties
    target = spec.target(setting, ctx)
    res = search(target, torch_generator(seed, "step-audit-witness", spec.id), evaluations=int(evaluations))
    if res.best is None:
        raise ConfigError(f"witness: the search on {spec.id} evaluated no pair")
    return setting, target, res
