"""The suite's data model: the grid's cells (:class:`CellSpec`), the :class:`Suite` they come from, its
sections' settings (gate, Ray, sensitivity, step audit) and the cache key of a configuration
(:func:`config_hash`). :mod:`privaudit.audit.suite.load` builds a :class:`Suite` from a TOML file.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from privaudit.core.errors import ConfigError

RAY_KEYS = ("address", "cpus_per_cell", "gpus_per_cell", "cpus_per_task", "gpus_per_task")
MAX_CELLS = 1000  # a larger grid needs an explicit confirmation (--yes-large): it would run for days on a laptop


@dataclass(frozen=True)
class GateConfig:
    """Gate thresholds.

    ``epsilon_slack``: a sound lower bound fails the gate when it exceeds (1 + slack) times the
    smallest applicable accountant's epsilon (0: any excess fails). ``max_auc``: optionally, fail when
    any attack on a *private* cell reaches this AUC. ``fail_on_sensitivity``: an unexpected
    ``violated`` sensitivity verdict fails the gate. ``fail_on_error``: a cell that errors fails it.
    """

    epsilon_slack: float = 0.0
    max_auc: float | None = None
    fail_on_sensitivity: bool = True
    fail_on_error: bool = True

    def validate(self) -> None:
        if not (self.epsilon_slack >= 0 and math.isfinite(self.epsilon_slack)):
            raise ConfigError(f"epsilon_slack: must be a finite number >= 0, got {self.epsilon_slack!r}")
        if self.max_auc is not None and not 0.5 <= self.max_auc <= 1:
            raise ConfigError(f"max_auc: must lie in [0.5, 1], got {self.max_auc!r}")


@dataclass(frozen=True)
class RayConfig:
    """Ray resources: ``address`` (None: start a local instance), CPUs/GPUs per cell task and per
    shadow-model batch task."""

    address: str | None = None
    cpus_per_cell: float = 1.0
    gpus_per_cell: float = 0.0
    cpus_per_task: float = 1.0
    gpus_per_task: float = 0.0

    def validate(self) -> None:
        for name in RAY_KEYS[1:]:
            value = getattr(self, name)
            if value < 0 or (name.startswith("cpus") and value == 0):
                raise ConfigError(f"{name}: must be {'> 0' if name.startswith('cpus') else '>= 0'}, got {value!r}")


@dataclass(frozen=True)
class UtilityConfig:
    """``[utility]``: how each cell's encoder is evaluated (:mod:`privaudit.defenses.evaluation.utility`).

    ``reference``: beside an encoder trained from an init, train the non-private reference (same init, steps and
    batch) the panel's gap closed is measured against (off where the suite trains its own non-private cell).
    ``per_example``: every encoder cell gets the panel against its untrained init (McNemar, both sides) and keeps
    each test example's correctness, packed, for paired comparisons between cells (a benchmark's tables).
    """

    reference: bool = True
    per_example: bool = False

    def validate(self) -> None:
        for name in ("reference", "per_example"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: must be true or false, got {getattr(self, name)!r}")

    def non_default(self) -> dict[str, Any]:
        """The settings that differ from the defaults (what a cell's key and the suite's record add)."""
        return {k: v for k, v in asdict(self).items() if v != getattr(UtilityConfig(), k)}


@dataclass(frozen=True)
class DefenseEntry:
    """One defense of the suite: registry name or plugin, a unique label, hyper-parameters, budget axis."""

    name: str
    label: str
    params: dict[str, Any]
    resolved: dict[str, Any]  # every hyper-parameter, defaults included
    private: bool
    epsilons: tuple[float | None, ...]  # (None,) for non-private defenses or a fixed noise multiplier
    delta: float | None
    noise_multiplier: float | None
    attacks: tuple[str, ...]
    primary: str | None = None  # the attack whose bound the gate judges the claim on (None: every sound bound)
    control: bool = False  # a positive control: a claim known to be false, which the gate must catch


@dataclass(frozen=True)
class AttackEntry:
    name: str
    label: str
    params: dict[str, Any]
    resolved: dict[str, Any]


@dataclass(frozen=True)
class SensitivityConfig:
    """``[sensitivity]``: the claims checked and the budget; ``expect`` documents known-broken claims
    (``"violated"``: a violation is a note, and not finding it fails the gate); ``allow_inconclusive`` lists the
    claims whose ``inconclusive`` verdict the gate accepts (any other inconclusive verdict fails it)."""

    claims: tuple[str, ...] | None  # None: every registered claim
    budget_seconds: float | None  # per claim; None: each claim's default
    evaluations: int | None  # pairs per claim (reproducible); replaces budget_seconds
    seed: int
    expect: dict[str, str]
    allow_inconclusive: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepAuditConfig:
    """``[step_audit]``: audit each listed defense's privatised step (:mod:`privaudit.audit.step.audit`).

    ``expect`` documents refutations the suite knows of (``{"dpcl-simclr" = "refuted"}``), like the
    sensitivity ``expect`` map: an undocumented refutation fails the gate.
    """

    defenses: tuple[str, ...]
    draws: int
    pair: str | dict[str, str]  # one kind for all, or per defense (unlisted: "canonical")
    target_epsilon: float
    witness_evaluations: int
    seed: int
    expect: dict[str, str]


@dataclass(frozen=True)
class CellSpec:
    """One cell of the grid, with everything needed to run it anywhere (plain, picklable data)."""

    id: str
    dataset: str
    data_dir: str | None
    splits: dict[str, Any] | None
    defense: DefenseEntry
    target_epsilon: float | None
    delta: float | None
    seed: int
    attacks: tuple[AttackEntry, ...]
    device: str
    knn_k: int
    threads: int = 1
    utility: UtilityConfig = UtilityConfig()

    def resolved(self) -> dict[str, Any]:
        """The configuration the cell's results depend on (what its cache key hashes; ``utility`` only where it
        is not the default, so the keys of suites without ``[utility]`` stay as they were)."""
        from privaudit.audit import __version__

        utility = self.utility.non_default()
        return {
            "version": __version__, "dataset": self.dataset, "splits": self.splits,
            "defense": {"name": self.defense.name, "params": self.defense.resolved},
            "target_epsilon": self.target_epsilon, "delta": self.delta,
            "noise_multiplier": self.defense.noise_multiplier, "seed": self.seed,
            "attacks": [{"label": a.label, "name": a.name, "params": a.resolved} for a in self.attacks],
            "device": self.device, "threads": self.threads, "knn_k": self.knn_k,
            **({"utility": utility} if utility else {}),
        }

    @property
    def key(self) -> str:
        return config_hash(self.resolved())

    @property
    def slug(self) -> str:
        """A directory name: the id with unsafe characters replaced, then the key."""
        safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in self.id.replace("/", "__"))
        return f"{safe}-{self.key}"


@dataclass(frozen=True)
class Suite:
    path: str
    name: str
    description: str
    out: str
    datasets: tuple[str, ...]
    data_dir: str | None
    splits: dict[str, Any] | None
    seeds: tuple[int, ...]
    device: str
    knn_k: int
    threads: int
    defenses: tuple[DefenseEntry, ...]
    attacks: tuple[AttackEntry, ...]
    sensitivity: SensitivityConfig | None
    gate: GateConfig
    ray: RayConfig
    step_audit: StepAuditConfig | None = None
    utility: UtilityConfig = UtilityConfig()
    timings: str | None = None  # an earlier run's measured stage times, the progress estimate's priors

    @property
    def n_cells(self) -> int:
        """How many cells the grid has (computed without building them)."""
        return len(self.datasets) * len(self.seeds) * sum(len(d.epsilons) for d in self.defenses)

    def size_estimate(self) -> str:
        """The grid's size in words: cells and attack runs (each a training run and its attacks)."""
        runs = len(self.datasets) * len(self.seeds) * sum(len(d.epsilons) * len(d.attacks) for d in self.defenses)
        return (f"{self.n_cells} cells ({len(self.datasets)} datasets x {len(self.seeds)} seeds x "
                f"{sum(len(d.epsilons) for d in self.defenses)} defense/epsilon pairs), {runs} attack runs")

    def check_size(self, confirmed: bool) -> None:
        """A grid of more than :data:`MAX_CELLS` cells runs only when ``confirmed`` (``--yes-large``)."""
        if self.n_cells > MAX_CELLS and not confirmed:
            raise ConfigError(f"{self.path}: suite too large: {self.size_estimate()}, more than {MAX_CELLS} cells; "
                              "pass --yes-large to run it anyway")

    def check_knn_k(self, cells: Sequence[CellSpec]) -> None:
        """``knn_k`` is at most the training set (the k-NN reference set) of every dataset and seed ``cells`` use:
        with more neighbours than members, k-NN votes over the whole training set and its accuracy is the
        majority class's share, not a measurement. Loads each dataset once (its split draws no image)."""
        from privaudit.core.datasets import SplitConfig, load_raw, training_set_size

        config = SplitConfig(**self.splits) if self.splits else SplitConfig()
        for dataset in dict.fromkeys(c.dataset for c in cells):
            raw = load_raw(dataset, self.data_dir)
            for seed in dict.fromkeys(c.seed for c in cells if c.dataset == dataset):
                members = training_set_size(raw, seed, config)
                if self.knn_k > members:
                    raise ConfigError(f"{self.path}: knn_k: must be at most the training set's size ({members} "
                                      f"members of {dataset} at seed {seed}), got {self.knn_k}")

    def cells(self, only: list[str] | None = None) -> list[CellSpec]:
        """The grid dataset x defense x epsilon x seed (filtered by glob patterns on the cell id)."""
        by_label = {a.label: a for a in self.attacks}
        out = []
        for dataset in self.datasets:
            for d in self.defenses:
                for eps in d.epsilons:
                    for seed in self.seeds:
                        parts = [dataset, d.label]
                        if eps is not None:
                            parts.append(f"eps={eps:g}")
                        elif d.noise_multiplier is not None:
                            parts.append(f"z={d.noise_multiplier:g}")
                        parts.append(f"seed={seed}")
                        out.append(CellSpec(
                            id="/".join(parts), dataset=dataset, data_dir=self.data_dir, splits=self.splits,
                            defense=d, target_epsilon=eps, delta=d.delta, seed=seed,
                            attacks=tuple(by_label[a] for a in d.attacks), device=self.device,
                            knn_k=self.knn_k, threads=self.threads, utility=self.utility))
        if only:
            out = [c for c in out if any(fnmatch.fnmatchcase(c.id, p) for p in only)]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The resolved suite as plain data (what the report's ``suite`` field records)."""
        return {
            "name": self.name, "description": self.description, "path": self.path,
            "datasets": list(self.datasets), "splits": self.splits, "seeds": list(self.seeds),
            "device": self.device, "threads": self.threads, "knn_k": self.knn_k,
            "defenses": [{"label": d.label, "name": d.name, "private": d.private, "params": d.params,
                          "resolved": d.resolved,
                          "epsilons": [e for e in d.epsilons if e is not None], "delta": d.delta,
                          "noise_multiplier": d.noise_multiplier, "attacks": list(d.attacks),
                          "primary": d.primary, "control": d.control}
                         for d in self.defenses],
            "attacks": [{"label": a.label, "name": a.name, "params": a.params, "resolved": a.resolved}
                        for a in self.attacks],
            "sensitivity": None if self.sensitivity is None else {
                "claims": None if self.sensitivity.claims is None else list(self.sensitivity.claims),
                "budget_seconds": self.sensitivity.budget_seconds, "evaluations": self.sensitivity.evaluations,
                "seed": self.sensitivity.seed,
                "expect": dict(self.sensitivity.expect),
                "allow_inconclusive": list(self.sensitivity.allow_inconclusive)},
            "gate": asdict(self.gate),
            **({"step_audit": asdict(self.step_audit)} if self.step_audit is not None else {}),
            **({"utility": self.utility.non_default()} if self.utility.non_default() else {}),
        }


def config_hash(obj: Any) -> str:
    """16 hex digits of the SHA-256 of ``obj``'s canonical JSON."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
