"""Audit suites: a TOML file describing a grid of audits, validated into a :class:`Suite`.

A suite names datasets, defenses (with hyper-parameters), target epsilons and delta, seeds, attacks
(with settings), sensitivity claims, gate thresholds and an output directory::

    name = "quickstart"
    out = "reports/quickstart"
    datasets = ["digits"]
    seeds = [0]
    epsilons = [4.0]          # default target epsilons of private defenses
    # delta = 1e-5            # default: 1 / (N ln N) of each training set
    # threads = 1             # torch threads per cell and per task (part of the cache key)
    # allow_plugins = false   # true: defenses and attacks named "module:Class" are imported (a suite with
    #                         # plugins is code)

    [[defenses]]
    name = "nonprivate"       # a registry name or "module:Class"
    params = { epochs = 5 }

    [[defenses]]
    name = "dpcl-simclr"
    epsilons = [2.0, 8.0]     # overrides the suite's
    attacks = ["loss"]        # a subset of the suite's attacks (labels); default: all
    params = { epochs = 2 }
    # primary = "loss"        # the one attack the gate judges this claim on, fixed before any score is seen
    #                         # (default: every sound bound of the cell; fewer gated bounds = more power)
    # control = true          # a positive control: its claim is known false and the gate must catch it

    [[attacks]]
    name = "lira"             # a registry name or "module:Class"
    params = { shadow_models = 4 }

    [sensitivity]
    claims = ["dpcl.mean"]    # or: all = true
    evaluations = 200         # pairs per claim (reproducible); or budget_seconds = 20 per claim
    expect = { "dpcl.mean" = "holds" }   # or "violated": claims the suite documents as known-broken (a
    #                         # documented violation that is not found fails the gate: the auditor lost power)
    # allow_inconclusive = ["alm.head-weights"]  # claims whose "inconclusive" verdict passes (any other fails)

    [gate]
    epsilon_slack = 0.0       # fail when eps_lb > (1 + slack) * smallest applicable epsilon

The grid is dataset x defense x epsilon x seed; a non-private defense has one cell per dataset and
seed. Every error names the file, the key and the accepted values, and is raised before anything
is written (:class:`privaudit.core.errors.ConfigError`, exit status 2). Numbers are finite and within the ranges of
:data:`privaudit.core.config.RANGES`; a grid of more than :data:`MAX_CELLS` cells needs ``--yes-large``; the device
must exist here; a ``module:Class`` plugin is imported only with ``allow_plugins = true`` (or
``--allow-plugins``), since importing it runs its code.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from privaudit.core.config import MAX_BUDGET_SECONDS, MAX_INT, MAX_SEED, build_config
from privaudit.core.errors import ConfigError
from privaudit.core.io import check_output_path, nesting_depth
from privaudit.core.registry import load_reference

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

TOP_KEYS = ("name", "description", "out", "datasets", "data_dir", "splits", "seeds", "epsilons", "delta",
            "device", "threads", "knn_k", "allow_plugins", "defenses", "attacks", "sensitivity", "gate", "ray",
            "step_audit")
DEFENSE_KEYS = ("name", "label", "params", "epsilons", "delta", "noise_multiplier", "attacks", "primary", "control")
ATTACK_KEYS = ("name", "label", "params")
SENSITIVITY_KEYS = ("claims", "all", "budget_seconds", "evaluations", "seed", "expect", "allow_inconclusive")
EXPECTATIONS = ("holds", "violated")
RAY_KEYS = ("address", "cpus_per_cell", "gpus_per_cell", "cpus_per_task", "gpus_per_task")
DEFAULT_OUT = "reports/{name}"
MAX_CELLS = 1000  # a larger grid needs an explicit confirmation (--yes-large): it would run for days on a laptop
MAX_LIST = 10_000  # entries of any list in a suite (seeds, epsilons, datasets, ...)


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


STEP_AUDIT_KEYS = ("defenses", "draws", "pair", "target_epsilon", "witness_evaluations", "seed", "expect")


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

    def resolved(self) -> dict[str, Any]:
        """The configuration the cell's results depend on (what its cache key hashes)."""
        from privaudit.audit import __version__

        return {
            "version": __version__, "dataset": self.dataset, "splits": self.splits,
            "defense": {"name": self.defense.name, "params": self.defense.resolved},
            "target_epsilon": self.target_epsilon, "delta": self.delta,
            "noise_multiplier": self.defense.noise_multiplier, "seed": self.seed,
            "attacks": [{"label": a.label, "name": a.name, "params": a.resolved} for a in self.attacks],
            "device": self.device, "threads": self.threads, "knn_k": self.knn_k,
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
                            knn_k=self.knn_k, threads=self.threads))
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
        }


def config_hash(obj: Any) -> str:
    """16 hex digits of the SHA-256 of ``obj``'s canonical JSON."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------------------

class _Where:
    """Prefixes every ConfigError with the file name and the key path."""

    def __init__(self, path: str):
        self.path = path

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {message}")

    def wrap(self, key: str, exc: ConfigError) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {exc}")

    def prefix(self, exc: ConfigError) -> ConfigError:
        """``exc``, whose message already names its key, prefixed with the file name."""
        return ConfigError(f"{self.path}: {exc}")


def _unknown(where: _Where, key: str, table: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    for k in table:
        if k not in accepted:
            name = f"{key}.{k}" if key else k
            raise where.error(name, f"unknown key; accepted: {', '.join(accepted)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _typed(where: _Where, key: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is of type ``kind`` (booleans are not numbers here), else a ConfigError naming ``key``."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise where.error(key, f"expected {what}, got {_short(value)}")
    return value


def _list(where: _Where, key: str, value: Any, kind: type | tuple[type, ...], what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise where.error(key, f"expected a non-empty list of {what}, got {_short(value)}")
    if len(value) > MAX_LIST:
        raise where.error(key, f"at most {MAX_LIST} entries, got {len(value)}")
    return [_typed(where, f"{key}[{i}]", v, kind, what) for i, v in enumerate(value)]


def _epsilons(where: _Where, key: str, value: Any) -> tuple[float, ...]:
    eps = _list(where, key, value, (int, float), "numbers")
    for i, e in enumerate(eps):
        if not (e > 0 and math.isfinite(e)):
            raise where.error(f"{key}[{i}]", f"must be a finite number > 0, got {e!r}")
    if len(set(eps)) != len(eps):
        raise where.error(key, f"duplicate values in {eps!r}")
    shown = [f"{e:g}" for e in eps]  # how cell ids print them: equal there means one cell id for two cells
    if len(set(shown)) != len(shown):
        raise where.error(key, f"values {eps!r} are too close: cell ids show them as {shown!r}; make them differ "
                               "in the first 6 significant digits")
    return tuple(float(e) for e in eps)


LABEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,63}")


def _label(where: _Where, key: str, value: Any) -> str:
    """A label names a directory under --out: letters, digits and ``_ . + = -``, starting with a letter or digit,
    at most 64 characters (so no '/', no '..', no absolute path can leave the output directory)."""
    label = _typed(where, key, value, str, "a string")
    if not LABEL_PATTERN.fullmatch(label):
        raise where.error(key, f"must be 1-64 characters from letters, digits and _ . + = - (starting with a letter "
                               f"or digit), got {label!r}")
    return label


def _delta(where: _Where, key: str, value: Any) -> float | None:
    if value is None:
        return None
    _typed(where, key, value, (int, float), "a number")
    if not 0 < value < 1:
        raise where.error(key, f"must lie in (0, 1), got {value!r}")
    return float(value)


def _defense_class(where: _Where, key: str, name: str, allow_plugins: bool):
    from privaudit.defenses.base import Defense
    from privaudit.defenses.registry import DEFENSES, defense_class

    if name in DEFENSES:
        return defense_class(name)
    if ":" not in name:
        raise where.error(key, f"unknown defense {name!r}; accepted: {', '.join(DEFENSES)}, or module:Class")
    if not allow_plugins:
        raise where.error(key, f"{name!r} is a plugin: importing it runs its code; set allow_plugins = true at the "
                               "top of the suite (or pass --allow-plugins) to allow it")
    try:
        cls = load_reference(name, field="plugin defense")
    except ConfigError as exc:
        raise where.error(key, str(exc)) from None
    if not (isinstance(cls, type) and issubclass(cls, Defense)):
        raise where.error(key, f"{name!r} is not a Defense subclass")
    return cls


def _code_params(where: _Where, key: str, cls: type, params: Mapping[str, Any], allow_plugins: bool) -> None:
    """A defense parameter that names code (``code_params``, e.g. ``user-model``'s factory) is a plugin too: it is
    imported and run, so it needs ``allow_plugins`` like a ``module:Class`` defense."""
    if allow_plugins:
        return
    for name in getattr(cls, "code_params", ()):
        if params.get(name):
            raise where.error(f"{key}.params.{name}", f"{params[name]!r} is a plugin: importing it runs its code; set "
                                                      "allow_plugins = true at the top of the suite (or pass "
                                                      "--allow-plugins) to allow it")


MAX_DEPTH = 16  # a suite is at most 5 levels deep (top, [[defenses]], params, a list value); more is not a suite


def load_suite(path: str | Path, *, out: str | None = None, data_dir: str | None = None,
               allow_plugins: bool = False, machine_checks: bool = True) -> Suite:
    """Read and validate a suite file, or a shipped suite by name (``quickstart``); ``out`` and ``data_dir``
    override the suite's; ``allow_plugins`` is the CLI's ``--allow-plugins`` (else the suite's own
    ``allow_plugins``); ``machine_checks=False`` skips what depends on this machine (the datasets' files, the
    device's presence), to lint a suite meant for another machine."""
    from privaudit.audit.suite.shipped import resolve_suite

    given, path = str(path), resolve_suite(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: suite file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the suite: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deep (a suite is at most {MAX_DEPTH} levels)") from None
    if nesting_depth(raw, MAX_DEPTH) > MAX_DEPTH:
        raise ConfigError(f"{path}: nested too deep (a suite is at most {MAX_DEPTH} levels of tables and arrays)")
    if data_dir is not None and isinstance(raw, dict):
        raw = {**raw, "data_dir": data_dir}
    # a shipped suite named by its name is recorded by that name (`privaudit run quickstart` reproduces it anywhere)
    shown = given if path != Path(given) else str(path)
    return parse_suite(raw, shown, out=out, allow_plugins=allow_plugins, machine_checks=machine_checks)


def parse_suite(raw: dict[str, Any], path: str = "<suite>", *, out: str | None = None,
                allow_plugins: bool = False, machine_checks: bool = True) -> Suite:
    """Validate a parsed suite (a dict as TOML gives it), one table at a time in the file's order of keys
    (top-level settings, datasets, seeds and device, [[attacks]], [[defenses]], [sensitivity], [gate], [ray],
    [step_audit]), so the first error is the one an earlier key raises."""
    where = _Where(path)
    _unknown(where, "", raw, TOP_KEYS)
    name = _typed(where, "name", raw.get("name", Path(path).stem), str, "a string")
    allow_plugins = _typed(where, "allow_plugins", raw.get("allow_plugins", False), bool, "true or false") \
        or allow_plugins
    description = _typed(where, "description", raw.get("description", ""), str, "a string")
    out_dir = out if out is not None else _typed(where, "out", raw.get("out", DEFAULT_OUT.format(name=name)),
                                                str, "a directory path")
    if out is None:
        check_output_path(out_dir, f"{where.path}: out")
    datasets, data_dir = _datasets(where, raw, machine_checks)
    splits = _splits(where, raw)
    seeds = _seeds(where, raw)
    device = _device(where, raw, machine_checks)
    knn_k = _typed(where, "knn_k", raw.get("knn_k", 5), int, "an integer")
    if knn_k < 1:
        raise where.error("knn_k", f"must be >= 1, got {knn_k}")
    threads = _typed(where, "threads", raw.get("threads", 1), int, "an integer")
    if not 1 <= threads <= 256:
        raise where.error("threads", f"must lie in [1, 256], got {threads}")
    defaults = _BudgetDefaults(_epsilons(where, "epsilons", raw["epsilons"]) if "epsilons" in raw else None,
                               _delta(where, "delta", raw.get("delta")))
    attacks = _attacks(where, raw, allow_plugins)  # first: defenses refer to them by label
    defenses = _defenses(where, raw, tuple(a.label for a in attacks), defaults, allow_plugins)
    sensitivity = _sensitivity(where, raw.get("sensitivity"))
    gate = _table_config(where, raw, "gate", GateConfig)
    ray = _table_config(where, raw, "ray", RayConfig)
    return Suite(path=path, name=name, description=description, out=out_dir, datasets=datasets,
                 data_dir=data_dir, splits=splits, seeds=seeds, device=device, knn_k=knn_k, threads=threads,
                 defenses=defenses, attacks=attacks, sensitivity=sensitivity, gate=gate, ray=ray,
                 step_audit=_step_audit(where, raw.get("step_audit")))


def _table_config(where: _Where, raw: Mapping[str, Any], key: str, cls: type) -> Any:
    """The table ``key`` (absent: empty) built into the config dataclass ``cls`` (its own range checks)."""
    table = _typed(where, key, raw.get(key, {}), dict, "a table")
    try:
        return build_config(cls, table, owner=key, prefix=key)
    except ConfigError as exc:
        raise where.prefix(exc) from None


def _datasets(where: _Where, raw: Mapping[str, Any], present: bool = True) -> tuple[tuple[str, ...], str | None]:
    """``datasets`` (known names; with ``present``, whose files are here) and ``data_dir``."""
    from privaudit.core.datasets import DATASETS, missing_files

    datasets = tuple(_list(where, "datasets", raw.get("datasets", ["digits"]), str, "dataset names"))
    data_dir = raw.get("data_dir")
    if data_dir is not None:
        _typed(where, "data_dir", data_dir, str, "a directory path")
    for i, ds in enumerate(datasets):
        if ds not in DATASETS:
            raise where.error(f"datasets[{i}]", f"unknown value {ds!r}; accepted: {', '.join(DATASETS)}")
        missing = missing_files(ds, data_dir) if present else []
        if missing:
            raise where.error(f"datasets[{i}]", f"dataset {ds!r} is missing {missing[0]}; set data_dir in the "
                                                "suite, --data-dir, or PRIVAUDIT_DATA_DIR")
    return datasets, data_dir


def _splits(where: _Where, raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """``splits``: the membership split's sizes (:class:`privaudit.core.datasets.SplitConfig`), or None."""
    from privaudit.core.datasets import SplitConfig

    if raw.get("splits") is None:
        return None
    return asdict(_table_config(where, raw, "splits", SplitConfig))


def _seeds(where: _Where, raw: Mapping[str, Any]) -> tuple[int, ...]:
    seeds = _list(where, "seeds", raw.get("seeds", [0]), int, "integers")
    for i, seed in enumerate(seeds):
        if not 0 <= seed < 2 ** 32:
            raise where.error(f"seeds[{i}]", f"must lie in [0, 2^32), got {seed!r}")
    if len(set(seeds)) != len(seeds):
        raise where.error("seeds", f"duplicate values in {seeds!r}")
    return tuple(seeds)


def _device(where: _Where, raw: Mapping[str, Any], present: bool = True) -> str:
    """``device``: a known name or ``cuda:N``, and (with ``present``) present here (a run that would fail in every
    cell is refused before the first)."""
    from privaudit.audit.device import DEVICES, resolve_device

    device = _typed(where, "device", raw.get("device", "auto"), str, "a string")
    if device not in DEVICES and not re.fullmatch(r"cuda:\d{1,3}", device):
        raise where.error("device", f"unknown value {device!r}; accepted: {', '.join(DEVICES)}, cuda:N")
    try:
        if present:
            resolve_device(device)
    except ConfigError as exc:
        raise where.error("device", str(exc).removeprefix("device: ")) from None
    return device


def _attacks(where: _Where, raw: Mapping[str, Any], allow_plugins: bool) -> tuple[AttackEntry, ...]:
    """``[[attacks]]``: registry names (or plugins) with settings, each under a distinct label."""
    attacks: list[AttackEntry] = []
    for i, entry in enumerate(_list(where, "attacks", raw.get("attacks", []), dict, "tables")
                              if "attacks" in raw else []):
        attack = _attack(where, f"attacks[{i}]", entry, allow_plugins)
        if any(a.label == attack.label for a in attacks):
            raise where.error(f"attacks[{i}].label", f"duplicate label {attack.label!r} (give each entry a distinct "
                                                     "label)")
        attacks.append(attack)
    return tuple(attacks)


def _attack(where: _Where, key: str, entry: Mapping[str, Any], allow_plugins: bool) -> AttackEntry:
    """One ``[[attacks]]`` table: name (or plugin), label (default: the name, a plugin's class name) and settings."""
    from privaudit.attacks.registry import ATTACKS

    _unknown(where, key, entry, ATTACK_KEYS)
    if "name" not in entry:
        raise where.error(f"{key}.name", f"missing; accepted: {', '.join(ATTACKS)}, or module:Class")
    name = _typed(where, f"{key}.name", entry["name"], str, "a string")
    cls = _attack_class(where, f"{key}.name", name, allow_plugins)
    label = _label(where, f"{key}.label", entry.get("label", name.rsplit(":", 1)[-1]))
    params = dict(_typed(where, f"{key}.params", entry.get("params", {}), dict, "a table"))
    try:
        attack = cls(params)
    except ConfigError as exc:
        raise where.wrap(f"{key}.params", exc) from None
    return AttackEntry(name, label, params, attack.config_dict())


def _attack_class(where: _Where, key: str, name: str, allow_plugins: bool):
    """The attack class ``name`` names: registered, or a ``module:Class`` plugin (only with ``allow_plugins``)."""
    from privaudit.attacks.registry import ATTACKS, attack_class, is_plugin

    if not is_plugin(name):
        if name not in ATTACKS:
            raise where.error(key, f"unknown attack {name!r}; accepted: {', '.join(ATTACKS)}, or module:Class")
        return attack_class(name)
    if not allow_plugins:
        raise where.error(key, f"{name!r} is a plugin: importing it runs its code; set allow_plugins = true at the "
                               "top of the suite (or pass --allow-plugins) to allow it")
    try:
        return attack_class(name)
    except ConfigError as exc:
        raise where.error(key, str(exc)) from None


@dataclass(frozen=True)
class _BudgetDefaults:
    """The suite's top-level ``epsilons`` and ``delta``: what a private defense without its own gets."""

    epsilons: tuple[float, ...] | None
    delta: float | None


def _defenses(where: _Where, raw: Mapping[str, Any], labels: tuple[str, ...], defaults: _BudgetDefaults,
              allow_plugins: bool) -> tuple[DefenseEntry, ...]:
    """``[[defenses]]`` (at least one), each under a distinct label."""
    entries = _list(where, "defenses", raw.get("defenses"), dict, "tables") if "defenses" in raw else None
    if not entries:
        raise where.error("defenses", "missing; give at least one [[defenses]] table with a name")
    defenses: list[DefenseEntry] = []
    for i, entry in enumerate(entries):
        defenses.append(_defense(where, f"defenses[{i}]", entry, {d.label for d in defenses}, labels, defaults,
                                 allow_plugins))
    return tuple(defenses)


def _defense(where: _Where, key: str, entry: Mapping[str, Any], taken: set[str], labels: tuple[str, ...],
             defaults: _BudgetDefaults, allow_plugins: bool) -> DefenseEntry:
    """One ``[[defenses]]`` table: name (or plugin), label, parameters, budget axis, attacks and gate role."""
    _unknown(where, key, entry, DEFENSE_KEYS)
    if "name" not in entry:
        raise where.error(f"{key}.name", "missing")
    name = _typed(where, f"{key}.name", entry["name"], str, "a string")
    cls = _defense_class(where, f"{key}.name", name, allow_plugins)
    label = _label(where, f"{key}.label", entry.get("label", name.rsplit(":", 1)[-1]))
    if label in taken:
        raise where.error(f"{key}.label", f"duplicate label {label!r} (give each entry a distinct label)")
    params = dict(_typed(where, f"{key}.params", entry.get("params", {}), dict, "a table"))
    _code_params(where, key, cls, params, allow_plugins)
    try:
        defense = cls(params)
    except ConfigError as exc:
        raise where.wrap(f"{key}.params", exc) from None
    private = bool(cls.private)
    noise = _noise_multiplier(where, key, entry)
    eps = _defense_epsilons(where, key, entry, name, private, noise, defaults.epsilons)
    delta = _delta(where, f"{key}.delta", entry["delta"]) if "delta" in entry else (
        defaults.delta if private else None)
    chosen = _defense_attacks(where, key, entry, labels)
    primary = entry.get("primary")
    if primary is not None:
        primary = _typed(where, f"{key}.primary", primary, str, "an attack label")
        if primary not in chosen:
            raise where.error(f"{key}.primary", f"unknown value {primary!r}; accepted: the defense's attacks "
                                                f"({', '.join(chosen) or 'none'})")
    control = _typed(where, f"{key}.control", entry.get("control", False), bool, "true or false")
    if control and not private:
        raise where.error(f"{key}.control", f"a positive control needs a privacy claim; {name!r} makes none")
    return DefenseEntry(name, label, params, defense.config_dict(), private, eps, delta,
                        None if noise is None else float(noise), chosen, primary, control)


def _noise_multiplier(where: _Where, key: str, entry: Mapping[str, Any]) -> float | int | None:
    noise = entry.get("noise_multiplier")
    if noise is not None:
        _typed(where, f"{key}.noise_multiplier", noise, (int, float), "a number")
        if not (noise >= 0 and math.isfinite(noise)):
            raise where.error(f"{key}.noise_multiplier", f"must be a finite number >= 0, got {noise!r}")
    return noise


def _defense_epsilons(where: _Where, key: str, entry: Mapping[str, Any], name: str, private: bool,
                      noise: float | None, suite_eps: tuple[float, ...] | None) -> tuple[float | None, ...]:
    """A defense's budget axis: its own ``epsilons``, else the suite's; ``(None,)`` for a non-private defense
    or a fixed ``noise_multiplier``."""
    if not private:
        for k in ("epsilons", "noise_multiplier", "delta"):
            if k in entry:
                raise where.error(f"{key}.{k}", f"defense {name!r} is not private; remove {k}")
        return (None,)
    if noise is not None:
        if "epsilons" in entry:
            raise where.error(f"{key}.epsilons", "give either epsilons or noise_multiplier, not both")
        return (None,)
    if "epsilons" in entry:
        return _epsilons(where, f"{key}.epsilons", entry["epsilons"])
    if suite_eps is not None:
        return suite_eps
    raise where.error(f"{key}.epsilons", f"defense {name!r} is private: give epsilons (here or at the top level) "
                                         "or noise_multiplier")


def _defense_attacks(where: _Where, key: str, entry: Mapping[str, Any], labels: tuple[str, ...]) -> tuple[str, ...]:
    """The attack labels a defense is attacked by (default: every attack of the suite)."""
    if "attacks" not in entry:
        return labels
    chosen = tuple(_list(where, f"{key}.attacks", entry["attacks"], str, "attack labels")) if entry["attacks"] else ()
    for j, a in enumerate(chosen):
        if a not in labels:
            raise where.error(f"{key}.attacks[{j}]", f"unknown attack label {a!r}; accepted: "
                                                     f"{', '.join(labels) or '(no [[attacks]] defined)'}")
    return chosen


def _step_audit(where: _Where, raw: Any) -> StepAuditConfig | None:
    if raw is None:
        return None
    from privaudit.audit.step.audit import DEFAULT_DRAWS, DEFAULT_WITNESS_EVALUATIONS, PAIR_CHOICES, validate_defenses

    _typed(where, "step_audit", raw, dict, "a table")
    _unknown(where, "step_audit", raw, STEP_AUDIT_KEYS)
    try:
        defenses = validate_defenses(raw.get("defenses"), "step_audit.defenses")
    except ConfigError as exc:
        raise where.prefix(exc) from None
    draws = _typed(where, "step_audit.draws", raw.get("draws", DEFAULT_DRAWS), int, "an integer >= 8")
    if not 8 <= draws <= MAX_INT:
        raise where.error("step_audit.draws", f"must lie in [8, {MAX_INT}], got {draws!r}")
    pair = _typed(where, "step_audit.pair", raw.get("pair", "all"), (str, dict),
                  "a pair kind or a table defense = pair kind")
    for key, value in (pair.items() if isinstance(pair, dict) else [("", pair)]):
        field = "step_audit.pair" + (f".{key}" if key else "")
        if key and key not in defenses:
            raise where.error(field, f"not among the audited defenses ({', '.join(defenses)})")
        if value not in PAIR_CHOICES:
            raise where.error(field, f"unknown value {value!r}; accepted: {', '.join(PAIR_CHOICES)}")
    eps = _typed(where, "step_audit.target_epsilon", raw.get("target_epsilon", 8.0), (int, float), "a number > 0")
    if not (eps > 0 and math.isfinite(eps)):
        raise where.error("step_audit.target_epsilon", f"must be a finite number > 0, got {eps!r}")
    wev = _typed(where, "step_audit.witness_evaluations", raw.get("witness_evaluations", DEFAULT_WITNESS_EVALUATIONS),
                 int, "a positive integer")
    if not 1 <= wev <= MAX_INT:
        raise where.error("step_audit.witness_evaluations", f"must lie in [1, {MAX_INT}], got {wev!r}")
    seed = _typed(where, "step_audit.seed", raw.get("seed", 0), int, "an integer")
    expect = dict(_typed(where, "step_audit.expect", raw.get("expect", {}), dict, "a table"))
    for name, value in expect.items():
        if name not in defenses:
            raise where.error(f"step_audit.expect.{name}", f"not among the audited defenses ({', '.join(defenses)})")
        if value not in ("refuted", "not refuted"):
            raise where.error(f"step_audit.expect.{name}", f"unknown value {value!r}; accepted: refuted, not refuted")
    return StepAuditConfig(defenses, int(draws), pair, float(eps), int(wev), int(seed), expect)


def _sensitivity(where: _Where, raw: Any) -> SensitivityConfig | None:
    if raw is None:
        return None
    _typed(where, "sensitivity", raw, dict, "a table")
    _unknown(where, "sensitivity", raw, SENSITIVITY_KEYS)
    all_claims = _typed(where, "sensitivity.all", raw.get("all", False), bool, "true or false")
    if all_claims and "claims" in raw:
        raise where.error("sensitivity.claims", "give either claims or all = true, not both")
    if not all_claims and "claims" not in raw:
        raise where.error("sensitivity.claims", "missing; give claims = [...] or all = true")
    claims = None if all_claims else tuple(_list(where, "sensitivity.claims", raw["claims"], str, "claim ids"))
    budget = raw.get("budget_seconds")
    if budget is not None:
        _typed(where, "sensitivity.budget_seconds", budget, (int, float), "a number of seconds per claim")
        if not 0 < budget <= MAX_BUDGET_SECONDS:
            raise where.error("sensitivity.budget_seconds", f"must lie in (0, {MAX_BUDGET_SECONDS:g}], got {budget!r}")
        budget = float(budget)
    evaluations = raw.get("evaluations")
    if evaluations is not None:
        _typed(where, "sensitivity.evaluations", evaluations, int, "a positive integer")
        if evaluations < 1:
            raise where.error("sensitivity.evaluations", f"must be >= 1, got {evaluations!r}")
        if evaluations > MAX_INT:
            raise where.error("sensitivity.evaluations", f"must be <= {MAX_INT}, got {evaluations!r}")
        if budget is not None:
            raise where.error("sensitivity.evaluations", "give either evaluations or budget_seconds, not both")
    seed = _typed(where, "sensitivity.seed", raw.get("seed", 0), int, "an integer")
    if not 0 <= seed <= MAX_SEED:
        raise where.error("sensitivity.seed", f"must lie in [0, {MAX_SEED}], got {seed!r}")
    expect = dict(_typed(where, "sensitivity.expect", raw.get("expect", {}), dict, "a table"))
    for claim, value in expect.items():
        if value not in EXPECTATIONS:
            raise where.error(f"sensitivity.expect.{claim}", f"unknown value {value!r}; accepted: "
                                                             f"{', '.join(EXPECTATIONS)}")
    from privaudit.audit.sensitivity import CLAIMS, select

    for i, c in enumerate(claims or ()):
        try:
            select([c], include_reference=True)
        except ConfigError:
            raise where.error(f"sensitivity.claims[{i}]", f"unknown claim {c!r}; accepted: "
                                                          f"{', '.join(CLAIMS)} (or a bare key such as dpgcl.group)"
                              ) from None
    checked = {s.id for s in select(None if claims is None else list(claims), include_reference=True)}
    for c in expect:
        if c not in CLAIMS:
            raise where.error(f"sensitivity.expect.{c}", f"unknown claim; accepted: {', '.join(CLAIMS)}")
        if c not in checked:
            raise where.error(f"sensitivity.expect.{c}", "not among the claims this suite checks")
    allowed = _allow_inconclusive(where, raw, checked, expect)
    return SensitivityConfig(claims, budget, evaluations, seed, expect, allowed)


def _allow_inconclusive(where: _Where, raw: Mapping[str, Any], checked: set[str],
                        expect: Mapping[str, str]) -> tuple[str, ...]:
    """``sensitivity.allow_inconclusive``: checked claim ids whose inconclusive verdict the gate accepts (none
    documented as violated: such a claim must be found violated)."""
    if "allow_inconclusive" not in raw:
        return ()
    key = "sensitivity.allow_inconclusive"
    ids = _list(where, key, raw["allow_inconclusive"], str, "claim ids")
    for i, c in enumerate(ids):
        if c not in checked:
            raise where.error(f"{key}[{i}]", f"{c!r} is not among the claims this suite checks; accepted: "
                                             f"{', '.join(sorted(checked))}")
        if expect.get(c) == "violated":
            raise where.error(f"{key}[{i}]", f"{c!r} is expected violated (sensitivity.expect): it must be found "
                                             "violated, not allowed to be inconclusive")
    return tuple(dict.fromkeys(ids))
