"""What the step audits share (:mod:`privaudit.audit.step.audit`, :mod:`privaudit.audit.step.release`): the
request, the result type, neighbouring pairs and the witness files."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from privaudit.attacks.step.step_distinguisher import StepBounds, step_bounds
from privaudit.core.errors import ConfigError


@dataclass(frozen=True)
class StepRequest:
    """How to audit a defense's step (validated by :func:`privaudit.audit.step.audit.audit_defense`): the
    defense's hyper-parameters, the budget its noise is calibrated to, the draws per side, the pairs, the
    family-wise failure probability ``alpha``, the seed, the noise mode, the dataset, the witness search's
    evaluations and where refuting pairs' witnesses go (None: nowhere)."""

    params: Mapping[str, Any]
    target_epsilon: float | None
    noise_multiplier: float | None
    delta: float
    draws: int
    kinds: tuple[str, ...]
    alpha: float
    seed: int
    noise: str
    dataset: str
    witness_evaluations: int
    out_dir: Path | None

    @property
    def alpha_per_bound(self) -> float:
        """Each pair's two bounds at alpha / (2 pairs): the defense's family-wise error is alpha."""
        return self.alpha / (2 * len(self.kinds))

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The result's ``settings`` (plus ``extra``)."""
        return {"draws_per_side": int(self.draws), "alpha": self.alpha, "alpha_per_bound": self.alpha_per_bound,
                "noise": self.noise, "seed": self.seed, "dataset": self.dataset, "pairs": list(self.kinds), **extra}

    def generator(self, index: int) -> torch.Generator:
        """The noise draws' generator of the ``index``-th pair."""
        return torch.Generator().manual_seed(int(self.seed) * 1000 + index)

    def bounds(self, s0: np.ndarray, s1: np.ndarray, index: int, delta: float) -> StepBounds:
        """The ``index``-th pair's sound lower bounds from its two sides' scores."""
        return step_bounds(s0, s1, alpha=self.alpha_per_bound, delta=delta, seed=self.seed + index)


@dataclass(frozen=True)
class StepAudit:
    """One defense's step audit: its relation and unit, the per-step claim, the settings, one row per pair and
    the verdict (:func:`audit_verdict`: ``refuted``, ``not refuted``, or ``error`` when a pair errored and none
    refuted); unless every pair errored, the best pair with the largest lower bounds and the power (bound /
    claim)."""

    defense: str
    relation: str
    unit: str
    claim: dict[str, Any]
    settings: dict[str, Any]
    pairs: tuple[dict[str, Any], ...]
    verdict: str
    best_pair: str | None = None
    mu_lower: float | None = None
    epsilon_lower: float | None = None
    power: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``privaudit audit-step --json`` prints and the report's ``step_audit`` holds."""
        out = {"defense": self.defense, "relation": self.relation, "unit": self.unit, "claim": self.claim,
               "settings": self.settings, "pairs": [dict(p) for p in self.pairs], "verdict": self.verdict}
        if self.best_pair is not None:
            out.update({"best_pair": self.best_pair, "mu_lower": self.mu_lower, "epsilon_lower": self.epsilon_lower,
                        "power": self.power})
        return out


def refutes(mu_lower: float, epsilon_lower: float, mu_claim: float, epsilon_claim: float, *,
            gates_mu: bool = True) -> bool:
    """A pair refutes the per-step claim when a sound lower bound exceeds it: eps_lb > eps_claim, or (where the
    claim is a Gaussian one, ``gates_mu``) mu_lb > mu_claim."""
    return epsilon_lower > epsilon_claim or (gates_mu and mu_lower > mu_claim)


def recorded_pair_verdict(pair: Mapping[str, Any], claim: Mapping[str, Any]) -> str:
    """A saved pair row's verdict recomputed from its bounds and the claim (the gate's check of saved evidence):
    a one-shot release's reachability test (its counts, :func:`privaudit.attacks.step.reachability.recorded_refutes`)
    refutes it at the claim's delta whatever the bounds say; a one-shot pure-DP release is judged on its row's own
    claim (mu only for Gaussian noise), a Gaussian step on the claim's mu and epsilon."""
    if pair.get("verdict") == "error":
        return "error"
    from privaudit.attacks.step.reachability import recorded_refutes

    support = pair.get("support") or {}  # a one-shot release's reachability test: an impossible output refutes
    if any(recorded_refutes(d, float(claim.get("delta") or 0.0)) for d in support.values()):
        return "refuted"
    if claim.get("pure"):
        hit = refutes(pair["mu_lower"], pair["epsilon_lower"], pair["mu_claim"], pair["epsilon_claim"],
                      gates_mu=claim.get("mechanism") == "gaussian")
    else:
        hit = refutes(pair["mu_lower"], pair["epsilon_lower"], claim["mu"], claim["epsilon"])
    return "refuted" if hit else "not refuted"


def audit_verdict(pairs: list[dict[str, Any]]) -> str:
    """``refuted`` when any pair refutes the claim (a refutation stands whatever else failed), else ``error`` when
    any pair errored (the audit did not do its work: "not refuted" on the pairs left would overstate it), else
    ``not refuted``."""
    if any(r["verdict"] == "refuted" for r in pairs):
        return "refuted"
    return "error" if any(r["verdict"] == "error" for r in pairs) or not pairs else "not refuted"


def dirac_image(like: torch.Tensor) -> torch.Tensor:
    """A Dirac-like image shaped like ``like``: one pixel (the middle one) at 1, the rest 0."""
    img = torch.zeros_like(like)
    flat = img.reshape(-1)
    flat[flat.numel() // 2] = 1.0
    return img


def search_witness(spec: Any, ctx: Any, evaluations: int, seed: int) -> tuple[Any, Any, Any]:
    """(setting, target, search result) of the sensitivity search on a register entry, at its largest batch."""
    from privaudit.audit.sensitivity.search import search
    from privaudit.defenses.training.seeding import torch_generator

    setting = max(spec.settings, key=lambda st: st.units)  # the largest batch: the first among ties
    target = spec.target(setting, ctx)
    res = search(target, torch_generator(seed, "step-audit-witness", spec.id), evaluations=int(evaluations))
    if res.best is None:
        raise ConfigError(f"witness: the search on {spec.id} evaluated no pair")
    return setting, target, res


def witness_info(spec: Any, setting: Any, target: Any, res: Any) -> dict[str, Any]:
    """What a witness pair's row says of the search that found it (:func:`search_witness`)."""
    return {"claim": spec.id, "setting": setting.to_dict(), "evaluations": res.evaluations,
            "sensitivity_observed": res.observed, "sensitivity_bound": target.bound,
            "sensitivity_ratio": (res.observed / target.bound) if target.bound and res.observed is not None else None}


def write_witness(out_dir: Path, stem: str, tensors: Mapping[str, torch.Tensor], header: dict[str, Any]) -> str:
    """Save a refuting pair's tensors as safetensors (``header`` in its metadata) beside ``header`` as JSON,
    both atomically, under a file name made of ``stem``'s safe characters; the safetensors path."""
    from privaudit.audit.sensitivity.witness import save_with_header

    path = Path(out_dir) / f"{re.sub(r'[^A-Za-z0-9._-]+', '-', stem)}.safetensors"
    return str(save_with_header(path, dict(tensors), {"format": "privaudit-step-witness", "version": 1, **header}))
