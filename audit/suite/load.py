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

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from privaudit.core.config import MAX_BUDGET_SECONDS, MAX_INT, MAX_SEED, build_config
from privaudit.core.errors import ConfigError
from privaudit.core.io import check_output_path, nesting_depth
from privaudit.core.registry import load_reference
from privaudit.audit.suite.model import (AttackEntry, DefenseEntry, GateConfig, RayConfig, SensitivityConfig,
                                         StepAuditConfig, Suite, UtilityConfig)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


TOP_KEYS = ("name", "description", "out", "datasets", "data_dir", "splits", "seeds", "epsilons", "delta",
            "device", "threads", "knn_k", "allow_plugins", "defenses", "attacks", "sensitivity", "gate", "ray",
            "step_audit", "utility", "timings")
DEFENSE_KEYS = ("name", "label", "params", "epsilons", "delta", "noise_multiplier", "attacks", "primary", "control")
ATTACK_KEYS = ("name", "label", "params")
SENSITIVITY_KEYS = ("claims", "all", "budget_seconds", "evaluations", "seed", "expect", "allow_inconclusive")
EXPECTATIONS = ("holds", "violated")
DEFAULT_OUT = "reports/{name}"
MAX_LIST = 10_000  # entries of any list in a suite (seeds, epsilons, datasets, ...)
STEP_AUDIT_KEYS = ("defenses", "draws", "pair", "target_epsilon", "witness_evaluations", "seed", "expect")


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
    _check_attacked_pool(where, splits, defenses, attacks)
    sensitivity = _sensitivity(where, raw.get("sensitivity"))
    gate = _table_config(where, raw, "gate", GateConfig)
    ray = _table_config(where, raw, "ray", RayConfig)
    return Suite(path=path, name=name, description=description, out=out_dir, datasets=datasets,
                 data_dir=data_dir, splits=splits, seeds=seeds, device=device, knn_k=knn_k, threads=threads,
                 defenses=defenses, attacks=attacks, sensitivity=sensitivity, gate=gate, ray=ray,
                 step_audit=_step_audit(where, raw.get("step_audit")),
                 utility=_table_config(where, raw, "utility", UtilityConfig),
                 timings=_typed(where, "timings", raw.get("timings"), (str, type(None)), "a file path"))


def _table_config(where: _Where, raw: Mapping[str, Any], key: str, cls: type) -> Any:
    """The table ``key`` (absent: empty) built into the config dataclass ``cls`` (its own range checks)."""
    table = _typed(where, key, raw.get(key, {}), dict, "a table")
    try:
        return build_config(cls, table, owner=key, prefix=key)
    except ConfigError as exc:
        raise where.prefix(exc) from None


def _datasets(where: _Where, raw: Mapping[str, Any], present: bool = True) -> tuple[tuple[str, ...], str | None]:
    """``datasets`` (known names; with ``present``, whose files are here) and ``data_dir``."""
    from privaudit.core.datasets import DATASETS, get_spec, missing_files

    datasets = tuple(_list(where, "datasets", raw.get("datasets", ["digits"]), str, "dataset names"))
    data_dir = raw.get("data_dir")
    if data_dir is not None:
        _typed(where, "data_dir", data_dir, str, "a directory path")
    for i, ds in enumerate(datasets):
        if ds not in DATASETS:
            raise where.error(f"datasets[{i}]", f"unknown value {ds!r}; accepted: {', '.join(DATASETS)}")
        missing = missing_files(ds, data_dir) if present else []
        if missing:
            package = get_spec(ds).package
            raise where.error(f"datasets[{i}]", f"dataset {ds!r} is missing {missing[0]}; "
                                                + (f"install it with `apt-get install {package}`, or " if package
                                                   else "") + "set data_dir in the suite, --data-dir, or "
                                                "PRIVAUDIT_DATA_DIR")
    return datasets, data_dir


def _splits(where: _Where, raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """``splits``: the membership split's sizes (:class:`privaudit.core.datasets.SplitConfig`), or None."""
    from privaudit.core.datasets import SplitConfig

    if raw.get("splits") is None:
        return None
    return asdict(_table_config(where, raw, "splits", SplitConfig))


def _check_attacked_pool(where: _Where, splits: Mapping[str, Any] | None, defenses: Sequence[DefenseEntry],
                         attacks: Sequence[AttackEntry]) -> None:
    """With ``splits.inclusion_probability = 1`` every pool example is a member: there is no non-member, so no
    defense may name an attack that compares members with non-members. Canary audits that insert their own
    privacy units by their own coins (``needs_nonmembers`` False: gradient canaries, canary users) still run."""
    if (splits or {}).get("inclusion_probability", 0.5) != 1:
        return
    from privaudit.attacks.registry import ATTACKS, attack_class

    names = {a.label: a.name for a in attacks}
    for i, d in enumerate(defenses):
        pool = [a for a in d.attacks if names[a] not in ATTACKS or attack_class(names[a]).needs_nonmembers]
        if pool:
            raise where.error(f"defenses[{i}].attacks", f"splits.inclusion_probability = 1 trains on every pool "
                                                        f"example, so there are no non-members to attack; give "
                                                        f"attacks = [] or only canary audits that insert their own "
                                                        f"units (gradient-canary, user-canary) (defense {d.label!r} "
                                                        f"names {', '.join(pool)})")


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
