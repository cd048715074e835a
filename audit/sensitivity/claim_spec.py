"""What a register entry is: a claimed sensitivity bound (:class:`ClaimSpec`) and the settings it is searched at
(:class:`Setting`).

A :class:`ClaimSpec` names its source (paper and theorem/equation), the neighbouring relation, the norm,
and the claimed bound **as the paper states it**, as a function of the parameters (batch size B, group
size S, clip norm C, temperature tau, ...). The function it bounds is never re-implemented: its
:meth:`~ClaimSpec.target` instantiates the defense that implements it and takes the matching
:class:`~privaudit.defenses.base.PrivatizedQuantity` from ``privatized_quantities`` -- the code path the
defense trains with (:mod:`privaudit.audit.sensitivity.builders`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch

from privaudit.core.errors import ConfigError
from privaudit.audit.sensitivity.evaluator import Target
from privaudit.defenses.base import PrivatizedQuantity

if TYPE_CHECKING:
    from privaudit.audit.sensitivity.context import Context

Params = Mapping[str, Any]

MODEL_STATES = ("init", "trained", "antipodal")
# A setting override that is not a defense hyper-parameter: the noise multiplier of the mechanisms
# released *before* the gradient (DPCL's similarity matrix and batch statistics), which the gradient
# quantity is computed from. The claims hold (or not) at every multiplier; a small one (a large
# epsilon) lets every view's gradient see every other example, the regime where the paper's 4C is
# furthest from the truth.
NOISE_MULTIPLIER = "noise_multiplier"


@dataclass(frozen=True)
class Setting:
    """One configuration to search: the size of D in units, defense hyper-parameter overrides, and the
    model state the quantity is evaluated at.

    ``model``: ``init`` -- the defense's seeded initial model (what ``privatized_quantities`` uses by
    default); ``trained`` -- the same architecture after
    :data:`~privaudit.audit.sensitivity.context.TRAINED_EPOCHS` epochs of non-private contrastive
    training on the public split. The theorems bound the quantity at *every* parameter value w, and a
    freshly initialised network maps all inputs to nearly the same direction, which hides the worst
    cases; a briefly trained one spreads them over the sphere. ``antipodal`` -- the trained model with
    its last linear layer replaced by the constructed rank-one head of
    :func:`privaudit.audit.sensitivity.extremal.antipodal_head`, which maps the training image 0 (and
    its copies) to one unit vector u and its inversion to -u: the parameter value at which the
    normalised-representation theorems (DPCL Thms. 1-3) are extreme. Inputs in [0, 1] cannot reach
    antipodal embeddings under the trained or initial parameters, so the extreme needs a searched
    parameter value.
    """

    units: int
    overrides: Mapping[str, Any] = field(default_factory=dict)
    model: str = "init"

    def __post_init__(self) -> None:
        if self.model not in MODEL_STATES:
            raise ConfigError(f"model: unknown model state {self.model!r}; accepted: {', '.join(MODEL_STATES)}")

    def to_dict(self) -> dict[str, Any]:
        return {"units": self.units, "overrides": dict(self.overrides), "model": self.model}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Setting":
        return cls(int(d["units"]), dict(d.get("overrides", {})), str(d.get("model", "init")))


Builder = Callable[["ClaimSpec", Setting, "Context", Any], Target]


@dataclass(frozen=True)
class ClaimSpec:
    """A claimed sensitivity bound (see the module doc).

    ``key``: the claim id (``claim_id`` of the quantity); ``variant`` tells apart implementations of
    one claim (``id`` = ``key[variant]``). ``bound(params)`` is the paper's bound; ``formula`` states
    it in words; ``parameters`` are the names it reads. ``closed_form`` False: the bound is sampled,
    so the search can refute it but never confirm it. ``black_box``: a training algorithm, also
    checked with Rubinstein–Aldà's sampler. ``budget_seconds``: default search time over all settings.
    ``growth``: the parameters (``B``, ``tau``) a growth table reports the measured ratio against;
    such a claim searches every setting even after one is violated. ``reference``: a function with
    known sensitivity that calibrates the samplers, not a paper claim.
    """

    key: str
    source: str
    relation: str
    norm: str
    formula: str
    bound: Callable[[Params], float]
    parameters: tuple[str, ...]
    builder: Builder
    settings: tuple[Setting, ...]
    defense: str | None = None
    variant: str = ""
    base_overrides: Mapping[str, Any] = field(default_factory=dict)
    closed_form: bool = True
    black_box: bool = False
    budget_seconds: float = 10.0
    notes: tuple[str, ...] = ()
    reference: bool = False
    growth: tuple[str, ...] = ()

    @property
    def supremum(self) -> tuple[Callable[[Params], float], str] | None:
        """The quantity's closed-form supremum and its formula (:data:`extremal.SUPREMA`), if derived."""
        from privaudit.audit.sensitivity.extremal.suprema import SUPREMA

        return SUPREMA.get(self.id)

    @property
    def id(self) -> str:
        return f"{self.key}[{self.variant}]" if self.variant else self.key

    def target(self, setting: Setting, ctx: "Context", state: Mapping[str, torch.Tensor] | None = None) -> Target:
        """The search target at ``setting`` (``state``: model parameters to load, from a witness)."""
        return self.builder(self, setting, ctx, state)

    def quantity(self, setting: Setting, ctx: "Context", state: Mapping[str, torch.Tensor] | None = None
                 ) -> tuple[PrivatizedQuantity, dict[str, torch.Tensor] | None, torch.nn.Module | None]:
        """The defense's privatized quantity for this claim at ``setting``, with its model's state and model."""
        overrides = {**self.base_overrides, **setting.overrides}
        z = overrides.pop(NOISE_MULTIPLIER, None)
        qs, saved, net = ctx.quantities(self.defense, overrides, setting.model, state, z)
        found = [q for q in qs if q.claim_id == self.key and getattr(q, "variant", "") == self.variant]
        if len(found) != 1:
            raise ConfigError(f"claim {self.id}: defense {self.defense!r} exposes {len(found)} quantities with this "
                              "claim id and variant (expected 1)")
        return found[0], saved, net
