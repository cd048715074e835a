"""Audit a user's own PyTorch classifier: LOSS, LiRA and RMIA on the membership split, and a canary audit.

The user gives a factory ``package.module:function`` (it builds the model), the trained weights (a
state_dict in ``.safetensors``, or ``.pt``/``.pth`` loaded with ``torch.load(weights_only=True)``: no code runs
on load), and the dataset: a built-in name, or ``imagefolder`` with ``data_dir`` a folder in torchvision's
ImageFolder layout (``DIR/<class>/<image>.png|jpg``). The model must have been trained on the **members of
privaudit's membership split** of that dataset and seed: ``privaudit.load_dataset(name, seed=seed,
data_dir=...).train`` (the audit pool's candidates, each included by a fair coin, and nothing else of the
pool). That design is what makes the one-run lower bound (Steinke, Nasr & Jagielski 2023) sound; a model
trained on any other split gets meaningless numbers.

Attacks on the given weights: ``loss`` (Yeom et al. 2018), ``lira`` (Carlini et al. 2022) and ``rmia``
(Zarifzadeh et al. 2024, :mod:`privaudit.attacks.rmia`), the last two with the same reference models (built by the
same factory, trained by the user's ``train_fn`` (``module:function``, called ``train_fn(model, x, y,
seed=...)``) or a default SGD loop (:mod:`privaudit.defenses.user_model`); trained once, shared through the target's
cache).

``canary`` (needs ``train_fn``: it audits the user's *training function*, not the given weights): the
black-box one-run audit of :mod:`privaudit.attacks.canary` (Steinke, Nasr & Jagielski 2023, Alg. 1 with mislabelled
canaries): m canaries from the shadow split, each inserted into the members by a fair coin, one run of
``train_fn`` on the result, guesses on the canaries' losses, and the one-run lower bound. Factories and
training functions are code that privaudit imports and runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn as nn

from privaudit.core.errors import ConfigError

ATTACKS_RUN = ("loss", "lira", "rmia", "canary")
#: Run when the caller names none: every attack on the given weights, and the canary audit with a ``train_fn``.
DEFAULT_ATTACKS = ("loss", "lira", "rmia")


def load_state_dict(weights: str | Path) -> dict[str, torch.Tensor]:
    """A state_dict from ``.safetensors`` or ``.pt``/``.pth`` (``torch.load(weights_only=True)``)."""
    path = Path(weights)
    if not path.is_file():
        raise ConfigError(f"--weights: {path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".safetensors":
            from privaudit.core.io import load_tensors

            state = load_tensors(path)
        elif suffix in (".pt", ".pth", ".bin"):
            state = torch.load(path, map_location="cpu", weights_only=True)
        else:
            raise ConfigError(f"--weights: {path}: unknown type {suffix or '(none)'!r}; "
                              "accepted: .safetensors, .pt, .pth")
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable file is bad input, named
        raise ConfigError(f"--weights: {path}: cannot read a state_dict ({type(exc).__name__}: {exc})") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"--weights: {path}: not a state_dict (a mapping of names to tensors)")
    return state


@dataclass(frozen=True)
class ModelAudit:
    """The result of :func:`audit_model`: what was audited (the factory, the training function, the dataset and
    seed of its membership split) and each attack's report object by attack name (``auc``, ``tpr_at_fpr``,
    ``eps_lower_bound``, ``eps_lb_method``, ``n_members``, ``n_nonmembers``, ...)."""

    factory: str
    train_fn: str | None
    dataset: str
    seed: int
    attacks: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """``audit.json``'s content."""
        return {"factory": self.factory, "train_fn": self.train_fn, "dataset": self.dataset, "seed": self.seed,
                "attacks": self.attacks}


def audit_model(factory: str, weights: str | Path | Mapping[str, torch.Tensor], *, dataset: str = "digits",
                train_fn: str | None = None, seed: int = 0, data_dir: str | None = None,
                attacks: Sequence[str] | None = None, reference_models: int = 8, canaries: int | None = None,
                epochs: int = 20,
                batch_size: int = 64, lr: float = 0.05, delta: float | None = None,
                out: str | Path | None = None, progress: bool = False) -> ModelAudit:
    """Audit the classifier ``factory()`` with ``weights`` (LOSS, LiRA, RMIA) and ``train_fn`` (canary).

    ``factory`` and ``train_fn`` are ``module:function`` strings (importable in worker processes). ``attacks``:
    from :data:`ATTACKS_RUN` (None: loss, lira, rmia, and canary when ``train_fn`` is given).
    ``reference_models``: LiRA's and RMIA's (even, >= 4; shared). ``canaries``: the canary audit's m (None:
    min(200, the shadow split's size)). ``epochs``, ``batch_size``, ``lr``: the default SGD loop's (unused with
    ``train_fn``). ``delta``: of the lower bound (default: 1 / (n ln n) for the n members). ``out``: write each
    attack's ``scores.npz`` and ``result.json`` in ``out/<attack>/`` and ``out/audit.json``.
    """
    from privaudit.attacks import DataRef, Target, make_attack
    from privaudit.core.datasets import load_dataset
    from privaudit.defenses.base import Budget, default_delta
    from privaudit.defenses.user_model import UserModel, wrap

    attacks = _attack_names(attacks, train_fn, canaries)
    params = {"factory": factory, "train_fn": train_fn or "", "epochs": epochs, "batch_size": batch_size, "lr": lr}
    UserModel(params)  # validates the settings up front
    state = load_state_dict(weights) if isinstance(weights, (str, Path)) else dict(weights)
    data = load_dataset(dataset, seed=seed, data_dir=data_dir)
    trained = wrap(_loaded_model(factory, state, data), data, params, seed)
    if delta is None:
        delta = default_delta(len(data.train))
    target = Target(trained, data, "user-model", params, Budget(), seed, "cpu", DataRef(dataset, seed, data_dir))
    results: dict[str, Any] = {}
    for name in attacks:
        result = make_attack(name, _attack_settings(name, delta, reference_models, canaries, data)).run(
            target, progress=progress)
        if out is not None:
            result.save(Path(out) / name)
        results[name] = result.summary()
        if name == "canary":
            results[name]["audited"] = ("train_fn, run once on the members plus the canaries each inserted by a "
                                        "fair coin (not the given weights)")
    audit = ModelAudit(factory, train_fn, dataset, seed, results)
    if out is not None:
        from privaudit.core.io import atomic_write_json

        atomic_write_json(Path(out) / "audit.json", audit.to_dict())
    return audit


def _attack_names(attacks: Sequence[str] | None, train_fn: str | None, canaries: int | None) -> Sequence[str]:
    """The attacks to run (None: the default, with the canary audit when there is a training function)."""
    if attacks is None:
        attacks = DEFAULT_ATTACKS + (("canary",) if train_fn else ())
    unknown = [a for a in attacks if a not in ATTACKS_RUN]
    if unknown or not attacks:
        raise ConfigError(f"attacks: unknown {unknown or 'empty list'}; accepted: {', '.join(ATTACKS_RUN)}")
    if "canary" in attacks and not train_fn:
        raise ConfigError("attacks: canary audits the user's training function; pass --train-fn MODULE:FUNCTION "
                          "(train_fn=...)")
    if canaries is not None and canaries < 1:
        raise ConfigError(f"canaries: must be >= 1, got {canaries!r}")
    return attacks


def _loaded_model(factory: str, state: Mapping[str, torch.Tensor], data: Any) -> nn.Module:
    """``factory()`` with ``state`` loaded, checked to map the dataset's images to its classes' logits."""
    from privaudit.defenses.user_model import build

    net = build(factory)
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        detail = " ".join(line.strip() for line in first[:3])
        raise ConfigError(f"--weights: do not fit the factory's model: {detail}") from None
    with torch.no_grad():
        probe = net.eval()(data.pool.x[:2])
    if probe.ndim != 2 or probe.shape[1] != data.info.num_classes:
        raise ConfigError(f"factory {factory!r}: the model maps {tuple(data.pool.x[:2].shape)} to "
                          f"{tuple(probe.shape)}, expected (2, {data.info.num_classes}) class logits")
    return net


def _attack_settings(name: str, delta: float, reference_models: int, canaries: int | None,
                     data: Any) -> dict[str, Any]:
    """An attack's settings: LiRA and RMIA share their references (one cache key: one query, and RMIA's
    population samples z capped by the shadow split, which a user's small image folder may hold fewer than the
    default 256 of); the canary audit runs one-run with mislabelled canaries."""
    settings: dict[str, Any] = {"delta": delta}
    shared = {"queries": 1, "n_population": min(256, len(data.shadow))}
    if name == "lira":
        settings.update(shadow_models=reference_models, **shared)
    elif name == "rmia":
        settings.update(reference_models=reference_models, **shared)
    elif name == "canary":
        settings.update(mode="one-run", kind="mislabel",
                        canaries=canaries if canaries is not None else min(200, len(data.shadow)))
    return settings
