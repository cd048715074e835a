"""The Gaussian queries an Opacus release answers besides the gradient, measured as they ran and composed with it.

Opacus' ``AdaClipDPOptimizer`` noises, every step, the count of units it left unclipped (``unclipped_num``, std
``unclipped_num_std``), from which it moves its clip; any optimizer may noise some statistic of the batch beside the
gradient. Each is a Gaussian mechanism on the same batch, so the release is one Gaussian mechanism whose multiplier
composes them (1 / z^2 = sum_i 1 / z_i^2, McMahan et al. 2018, Sec. 3) and the accountant must be told that z. The
watch (:mod:`privaudit.defenses.watch.opacus_step`) measures every part of it from the code:

* *which statistic a draw noises* (:func:`linked`): at the draw, the optimizer's numeric attributes whose value is
  the draw's reference (AdaClip draws on ``unclipped_num.float()``); after the release, the one of them that received
  the draw (:func:`received`: its change is the draw times a factor c in (0, 1], c < 1 a noise drawn and then scaled
  down). A draw no attribute received is not judged (its statistic is not the optimizer's);
* *its sensitivity* (:func:`changes`): the clipping probe runs the code's own clipping on one unit alone (at the drawn
  norm, and just below the clip, where a unit enters the gradient at almost the full clip and a count of unclipped
  units counts it), and the change it made to each attribute is that unit's contribution to the statistic as the
  code computes it; every attribute is restored after each probe (:func:`restore`), so the statistic released is
  the batch's alone;
* *the composition* (:func:`compose`): per probe unit u, mu_u^2 = (nu_u / sigma_g)^2 + sum_k (Delta_{u,k} / (c_k
  sigma_k))^2 with nu_u its clipped norm as applied and Delta_{u,k} its change to statistic k; the release's multiplier
  is 1 / sqrt(max((C / sigma_g)^2, max_u mu_u^2)). Each probe unit is a real unit of the code, so max_u mu_u is a lower
  bound on the release's sensitivity in units of its noise: the composed multiplier is at least the true one, and a
  claim above it is refuted soundly.

What it cannot see: a statistic noised outside the optimizer's attributes (a local variable of the recipe), a unit
whose contribution to the statistic is larger at a norm the probes do not reach; the clip that then moves is read by
the next release as its clip (the release's sensitivity), not checked against the count it came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from privaudit.accountants.trace import rounding

#: How far below the clip the second probe unit sits (relative): under every correct clip it enters whole.
BELOW_CLIP = 2.0 ** -10
#: Attributes with more values than this are not statistics a probe tracks (parameters, buffers).
MAX_VALUES = 4096


def _values(value: Any) -> torch.Tensor:
    return torch.as_tensor(value).detach().to("cpu", torch.float64).reshape(-1)


def stats(opt: Any) -> dict[str, Any]:
    """The optimizer's numeric attributes (its instance's: numbers and small tensors, not flags or parameters)."""
    out = {}
    for name, value in vars(opt).items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and not value.requires_grad
                                               and value.numel() <= MAX_VALUES):
            out[name] = value
    return out


def snapshot(opt: Any) -> dict[str, tuple[Any, Any]]:
    """name -> (the attribute's object, a copy of its value) for :func:`changes` and :func:`restore`."""
    return {k: (v, v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in stats(opt).items()}


def changes(opt: Any, snap: dict[str, tuple[Any, Any]]) -> dict[str, float]:
    """The L2 norm of each attribute's change since ``snap`` (attributes that changed only)."""
    out = {}
    now = stats(opt)
    for k, (_, was) in snap.items():
        if k in now:
            a, b = _values(was), _values(now[k])
            if a.shape == b.shape and not torch.equal(a, b):
                out[k] = float((b - a).norm())
    return out


def restore(opt: Any, snap: dict[str, tuple[Any, Any]]) -> None:
    """Every attribute of ``snap`` back to its object and value (a tensor changed in place is copied back)."""
    for k, (obj, was) in snap.items():
        if isinstance(obj, torch.Tensor):
            with torch.no_grad():
                obj.copy_(was)
        setattr(opt, k, obj)


@dataclass
class Query:
    """One Gaussian draw not on the gradient: its std, size and dtype, the attributes whose value it was drawn on
    (``before``), the draw, and once received (:func:`received`) the attribute noised and the factor c it got."""

    std: float
    values: int
    dtype: str
    before: dict[str, torch.Tensor]
    draw: torch.Tensor
    name: str | None = None
    scale: float = 1.0
    sensitivity: float | None = None
    owner: str = ""
    stat_dtype: str | None = None  # the dtype of the statistic as noised

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.label, "std": self.std, "values": self.values, "sensitivity": self.sensitivity,
                "scale": self.scale, "judged": self.name is not None}

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name}" if self.name else f"{self.owner} query"


def linked(opt: Any, std: Any, reference: Any, draw: torch.Tensor) -> Query:
    """The draw's :class:`Query`, with the attributes whose value equals its reference now."""
    ref = _values(reference)
    before = {k: _values(v) for k, v in stats(opt).items()}
    before = {k: v for k, v in before.items() if v.shape == ref.shape and torch.equal(v, ref)}
    return Query(float(std), int(draw.numel()), rounding.dtype_name(std), before, _values(draw),
                 owner=type(opt).__name__)


def received(opt: Any, query: Query) -> None:
    """Which linked attribute received the draw after the release, and the factor c = <change, draw> / |draw|^2 it
    got (the largest of those that moved along it; within the rounding of the attribute's dtype of 1, 1: adding the
    draw to the statistic rounds at u |statistic + draw|, so c moves by at most u |after| / |draw|); none: the query
    stays unjudged."""
    now = stats(opt)
    best: tuple[float, str, str] | None = None
    norm2 = float(query.draw @ query.draw)
    for k, was in query.before.items():
        if k not in now or norm2 <= 0:
            continue
        after = _values(now[k])
        moved = after - was
        if moved.shape != query.draw.shape or not bool(moved.any()):
            continue
        c = float(moved @ query.draw) / norm2
        dtype = rounding.dtype_name(now[k])
        slack = rounding.relative_tolerance(dtype) * max(1.0, float(after.norm()) / math.sqrt(norm2))
        if c > 0 and (best is None or c > best[0]):
            best = (1.0 if c >= 1 - slack else c, k, dtype)
    if best is not None:
        query.scale, query.name, query.stat_dtype = best


@dataclass
class Probe:
    """One probe unit: its clipped norm as applied, and its change to each optimizer attribute."""

    norm: float
    moved: dict[str, float] = field(default_factory=dict)


def compose(clip: float, gradient_std: float, probes: list[Probe], queries: list[Query]) -> float:
    """The release's multiplier with its judged queries composed in (module docstring; a probe unit's gradient norm
    counts at most the clip: a larger one is the unit-norm check's finding); each query's sensitivity (its largest
    change by one probe unit) is set on it. Without a probe, no query is judged."""
    if gradient_std <= 0:
        return 0.0
    judged = [q for q in queries if q.name is not None] if probes else []
    for q in queries:
        if q not in judged:
            q.name = None
    worst = (clip / gradient_std) ** 2
    for q in judged:
        q.sensitivity = max(p.moved.get(q.name, 0.0) for p in probes)
    for p in probes:
        mu2, moved = (min(p.norm, clip) / gradient_std) ** 2, False
        for q in judged:
            delta, std = p.moved.get(q.name, 0.0), q.std * q.scale
            if delta > 0:
                mu2, moved = mu2 + (math.inf if std <= 0 else (delta / std) ** 2), True
        worst = max(worst, mu2) if moved else worst
    return 0.0 if math.isinf(worst) else 1.0 / math.sqrt(worst)
