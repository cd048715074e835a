"""The common result of every attack: per-example scores (higher = member) and the true membership.

An :class:`AttackResult` carries the primary score vector, optional named variants (LiRA's offline
test, EncoderMI's set and threshold classifiers, ...), the attack's configuration, the sample counts
the figures rest on (members, non-members, shadow/reference models, queries) and, when the scores
come from a one-run-valid design, the epsilon lower bound. Everything a report prints is recomputed
from the saved scores (``save``/``load``: ``scores.npz`` + ``result.json``, written atomically).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privaudit.attacks import metrics
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound
from privaudit.core.errors import ConfigError
from privaudit.core.io import atomic_write_group, load_npz, read_json, to_json


@dataclass
class AttackResult:
    """Scores of one attack on one target.

    Attributes:
        attack: attack name (``lira``, ``encodermi``, ...) and ``variant`` of the primary scores.
        scores: float (n,), higher = more likely a member.
        membership: bool (n,), the truth.
        index: int (n,), the examples' indices in the raw dataset (or canary ids), for joins.
        config: the attack's resolved configuration.
        counts: sample counts (n_shadow_models, n_queries, ...) beyond members / non-members.
        variants: other score vectors over the same examples, by name.
        bound: the epsilon lower bound these scores support (None where no sound bound applies).
        extras: plain-data details (decision threshold and accuracy, timings, notes).
        mechanism_bound: the lower bound against the claim's own mechanism (``eps_lb_mechanism``,
            :mod:`privaudit.attacks.bounds.mechanism`; refutes that mechanism, not every (eps, delta) one), or None.
        trajectory_bound: the white-box bound from every step's canary observation (``eps_lb_trajectory``,
            :mod:`privaudit.attacks.bounds.trajectory`; refutes the claim's per-step release, composed), or None.
    """

    attack: str
    variant: str
    scores: np.ndarray
    membership: np.ndarray
    index: np.ndarray | None = None
    config: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    variants: dict[str, np.ndarray] = field(default_factory=dict)
    bound: EpsilonLowerBound | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    mechanism_bound: EpsilonLowerBound | None = None
    trajectory_bound: EpsilonLowerBound | None = None

    def __post_init__(self) -> None:
        self.scores = np.asarray(self.scores, dtype=np.float64).ravel()
        self.membership = np.asarray(self.membership, dtype=bool).ravel()
        if self.scores.shape != self.membership.shape:
            raise ConfigError(f"scores: {self.scores.size} entries for {self.membership.size} membership labels")
        for name, v in self.variants.items():
            self.variants[name] = np.asarray(v, dtype=np.float64).ravel()
            if self.variants[name].shape != self.scores.shape:
                raise ConfigError(f"variant {name!r}: {self.variants[name].size} scores for {self.scores.size} examples")

    @property
    def n_members(self) -> int:
        return int(self.membership.sum())

    @property
    def n_nonmembers(self) -> int:
        return int((~self.membership).sum())

    def metrics(self, variant: str | None = None) -> dict[str, Any]:
        """AUC, balanced accuracy, TPR at FPR 0.1% / 1% / 10% and counts for one variant."""
        scores = self.scores if variant in (None, self.variant) else self.variants[variant]
        return metrics.summarize(scores, self.membership)

    def roc(self, variant: str | None = None) -> metrics.Roc:
        scores = self.scores if variant in (None, self.variant) else self.variants[variant]
        return metrics.roc(scores, self.membership)

    def summary(self) -> dict[str, Any]:
        """The report object: the keys every report uses, then details.

        ``auc``, ``tpr_at_fpr`` ({"0.001", "0.01", "0.1"}), ``eps_lower_bound``, ``eps_lb_method``,
        ``n_members``, ``n_nonmembers`` first; then balanced accuracy, advantage (max TPR - FPR), FPR resolution, the bound's
        full record, every variant's metrics, counts and the configuration.
        """
        m = self.metrics()
        out: dict[str, Any] = {
            "auc": m["auc"],
            "tpr_at_fpr": m["tpr_at_fpr"],
            "eps_lower_bound": None if self.bound is None else self.bound.epsilon,
            "eps_lb_method": None if self.bound is None else self.bound.label,
            "n_members": m["n_members"],
            "n_nonmembers": m["n_nonmembers"],
            "attack": self.attack,
            "variant": self.variant,
            "balanced_accuracy": m["balanced_accuracy"],
            "advantage": m["advantage"],
            "fpr_resolution": m["fpr_resolution"],
            "fpr_resolved": m["fpr_resolved"],
            "bound": None if self.bound is None else self.bound.to_dict(),
            "variants": {name: {k: v for k, v in self.metrics(name).items() if k in ("auc", "tpr_at_fpr",
                                                                                  "balanced_accuracy")}
                         for name in self.variants},
            "counts": dict(self.counts),
            "config": dict(self.config),
        }
        if self.mechanism_bound is not None:
            out["eps_lb_mechanism"] = self.mechanism_bound.epsilon
            out["eps_lb_mechanism_method"] = self.mechanism_bound.label
            out["mechanism_bound"] = self.mechanism_bound.to_dict()
        if self.trajectory_bound is not None:
            out["eps_lb_trajectory"] = self.trajectory_bound.epsilon
            out["eps_lb_trajectory_method"] = self.trajectory_bound.label
            out["trajectory_bound"] = self.trajectory_bound.to_dict()
        if self.extras:
            out["extras"] = dict(self.extras)
        return out

    # -- persistence -------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write ``scores.npz`` (scores, membership, index, variants) and ``result.json`` atomically."""
        directory = Path(directory)
        atomic_write_group({directory / name: data for name, data in self.files().items()})
        return directory

    def files(self) -> dict[str, bytes]:
        """What :meth:`save` writes, by file name: ``scores.npz`` and ``result.json``."""
        import io

        arrays = {"scores": self.scores, "membership": self.membership}
        if self.index is not None:
            arrays["index"] = np.asarray(self.index)
        arrays.update({f"variant.{k}": v for k, v in self.variants.items()})
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
        meta = {"attack": self.attack, "variant": self.variant, "config": self.config, "counts": self.counts,
                "bound": None if self.bound is None else self.bound.to_dict(), "extras": self.extras,
                "mechanism_bound": None if self.mechanism_bound is None else self.mechanism_bound.to_dict(),
                "trajectory_bound": None if self.trajectory_bound is None else self.trajectory_bound.to_dict(),
                "summary": self.summary()}
        return {"scores.npz": buffer.getvalue(), "result.json": (to_json(meta) + "\n").encode("utf-8")}

    @classmethod
    def load(cls, directory: str | Path) -> "AttackResult":
        directory = Path(directory)
        arrays = load_npz(directory / "scores.npz")
        meta = read_json(directory / "result.json")
        def bound_from(data: dict[str, Any] | None) -> EpsilonLowerBound | None:
            if not data:
                return None
            b = dict(data)
            b["notes"] = tuple(b.get("notes", ()))
            return EpsilonLowerBound(**b)

        bound = bound_from(meta.get("bound"))
        return cls(attack=meta["attack"], variant=meta["variant"], scores=arrays["scores"],
                   membership=arrays["membership"], index=arrays.get("index"), config=meta["config"],
                   counts=meta["counts"], variants={k[8:]: v for k, v in arrays.items() if k.startswith("variant.")},
                   bound=bound, extras=meta.get("extras", {}), mechanism_bound=bound_from(meta.get("mechanism_bound")),
                   trajectory_bound=bound_from(meta.get("trajectory_bound")))
