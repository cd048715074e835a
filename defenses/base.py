"""The defense contract: ``Defense.fit(data, budget, seed) -> Trained``.

A defense trains a model on ``data.train`` (the members), emits the :class:`PrivacyClaim` it actually
implements, and exposes the privatized quantities whose sensitivity its paper bounds
(:class:`PrivatizedQuantity`) so the sensitivity checks can try to break them.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import torch
import torch.nn as nn

from privaudit.accountants.claim import PrivacyClaim
from privaudit.core.datasets import MembershipData
from privaudit.core.config import build_config
from privaudit.core.errors import ConfigError, check_positive, check_probability
from privaudit.core.io import atomic_save_tensors, atomic_write_json, load_tensors, read_json
from privaudit.defenses.evaluation.evaluation import embed
from privaudit.defenses.nn.model import ContrastiveModel, ModelSpec, build_model


def default_delta(n: int) -> float:
    """delta = 1 / (N ln N), the default for N training examples (or users)."""
    if n < 3:
        raise ConfigError(f"cannot choose a default delta for {n} training units")
    return 1.0 / (n * math.log(n))


@dataclass(frozen=True)
class Budget:
    """The privacy budget a defense is asked to meet.

    ``target_epsilon`` None means non-private. ``delta`` None means :func:`default_delta` of the
    number of privacy units. ``noise_multiplier`` overrides calibration (the claim's epsilon is then
    whatever that noise gives).
    """

    target_epsilon: float | None = None
    delta: float | None = None
    noise_multiplier: float | None = None

    def __post_init__(self) -> None:
        if self.target_epsilon is not None:
            check_positive("target_epsilon", self.target_epsilon)
        if self.delta is not None:
            check_probability("delta", self.delta)
        if self.noise_multiplier is not None:
            check_positive("noise_multiplier", self.noise_multiplier, allow_zero=True)

    @property
    def private(self) -> bool:
        return self.target_epsilon is not None or self.noise_multiplier is not None

    def resolve_delta(self, n_units: int) -> float:
        return self.delta if self.delta is not None else default_delta(n_units)


@dataclass(frozen=True)
class PrivatizedQuantity:
    """A quantity a defense privatises, with the sensitivity bound its paper claims for it.

    ``fn(batch, randomness)`` computes the quantity for a batch (a tensor of inputs, or a tuple for
    paired data) given the shared randomness (a seed or generator fixed across both neighbours);
    ``bound(params)`` is the claimed sensitivity as a function of the parameters (B, S, C, tau, ...)
    in norm ``norm`` under ``relation``. Where the paper's bound is wrong, ``corrected_bound(params)``
    is the bound that holds (None: the claimed bound is believed correct). ``variant`` tells apart
    several implementations of one claim (e.g. two groupings of DP-GCL).
    """

    claim_id: str
    source: str
    relation: str
    fn: Callable[..., torch.Tensor]
    bound: Callable[[Mapping[str, float]], float]
    params: Mapping[str, float]
    norm: str = "l2"
    description: str = ""
    corrected_bound: Callable[[Mapping[str, float]], float] | None = None
    variant: str = ""


@dataclass
class Trained:
    """A trained model with its claim, history and the configuration that produced it.

    ``classifier`` maps representations to class logits for defenses that release a classifier (ALM);
    ``extras`` holds defense-specific outputs (sampled sensitivities, utility curves, ...) as plain data.
    """

    defense: str
    model: ContrastiveModel
    spec: ModelSpec
    claim: PrivacyClaim
    history: dict[str, list[float]]
    config: dict[str, Any]
    seed: int
    classifier: nn.Module | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def features(self, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
        """Representations h = f(x) (no gradients, CPU output)."""
        self.model.eval()
        return embed(self.model.represent, x, batch_size=batch_size, device=self.device)

    def embeddings(self, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
        """Projections z = g(f(x)) the contrastive loss saw (no gradients, CPU output)."""
        self.model.eval()
        return embed(self.model, x, batch_size=batch_size, device=self.device)

    def logits(self, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor | None:
        """Class logits when the defense releases a classifier, else None."""
        if self.classifier is None:
            return None
        self.model.eval()
        self.classifier.eval()
        return embed(lambda b: self.classifier(self.model.represent(b)), x, batch_size=batch_size,
                     device=self.device)

    # -- persistence -------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write ``model.safetensors`` and ``trained.json`` atomically into ``directory``."""
        directory = Path(directory)
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        classifier_shape = None
        if self.classifier is not None:
            if not isinstance(self.classifier, nn.Linear):
                raise TypeError("only nn.Linear classifiers can be saved")
            tensors.update({f"classifier.{k}": v for k, v in self.classifier.state_dict().items()})
            classifier_shape = [self.classifier.in_features, self.classifier.out_features]
        atomic_save_tensors(directory / "model.safetensors", tensors)
        atomic_write_json(directory / "trained.json", {
            "defense": self.defense, "spec": self.spec.to_dict(), "claim": self.claim.to_dict(),
            "history": self.history, "config": self.config, "seed": self.seed,
            "classifier_shape": classifier_shape, "extras": self.extras,
        })
        return directory

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> "Trained":
        """Load a model saved by :meth:`save` (safetensors: no code is executed)."""
        directory = Path(directory)
        meta = read_json(directory / "trained.json")
        tensors = load_tensors(directory / "model.safetensors", device)
        spec = ModelSpec.from_dict(meta["spec"])
        model = build_model(spec).to(device)
        model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
        classifier = None
        if meta.get("classifier_shape"):
            classifier = nn.Linear(*meta["classifier_shape"]).to(device)
            classifier.load_state_dict({k[11:]: v for k, v in tensors.items() if k.startswith("classifier.")})
        return cls(defense=meta["defense"], model=model, spec=spec, claim=PrivacyClaim.from_dict(meta["claim"]),
                   history=meta["history"], config=meta["config"], seed=meta["seed"], classifier=classifier,
                   extras=meta.get("extras", {}))


class Defense(ABC):
    """Base class of every defense.

    Subclasses set ``name``, ``Config`` (a frozen dataclass of hyper-parameters with defaults) and
    implement :meth:`fit`. ``Defense(params)`` validates ``params`` against ``Config``: unknown keys
    and wrongly typed values raise ``ConfigError`` naming the key and the accepted keys.
    """

    name: ClassVar[str] = ""
    private: ClassVar[bool] = True
    Config: ClassVar[type]

    def __init__(self, params: Mapping[str, Any] | None = None, **overrides: Any):
        self.config = build_config(self.Config, {**(params or {}), **overrides}, owner=f"defense {self.name!r}",
                                   prefix=self.name)

    def config_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)

    @abstractmethod
    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device: str | torch.device = "cpu",
            progress: bool = True) -> Trained:
        """Train on ``data.train`` under ``budget`` and return the trained model with its claim."""

    def privatized_quantities(self, data: MembershipData) -> list[PrivatizedQuantity]:
        """Quantities this defense privatises, with their claimed sensitivity (none by default)."""
        return []
