"""The user's privacy claim, and the verdict of an audit against it: refuted or not, and the design's ceiling.

A claim is epsilon at delta with its neighbouring relation (``add-remove`` or ``replace-one``) and privacy unit
(``example`` or ``user``). It is stated (``--claimed-epsilon E --delta D``) or read from an Opacus accountant's
saved state (``accountant.state_dict()`` of Opacus' RDP, PRV or GDP accountant, saved with ``torch.save`` or as
JSON): its ``history`` of (noise multiplier, sample rate, steps) is the mechanism Opacus accounted, a
composition of Poisson-subsampled Gaussian steps, and the claimed epsilon is privaudit's accountant of the same
name on it (``rdp`` for Opacus' RDP, ``prv`` for PRV, ``pld`` for GDP) at the claim's delta, unless
``--claimed-epsilon`` states another. A claim with a mechanism can be tested against that mechanism's own
trade-off curve (:mod:`privaudit.attacks.bounds.mechanism`), the test with the power to refute a DP-SGD claim.

Verdict (:func:`judge`): a sound lower bound eps_lb at confidence 1 - beta **refutes** the claim when
eps_lb > E; otherwise the claim is **not refuted** at that confidence. The **ceiling** is the largest eps_lb the
design could give (every guess right, no error among the counted runs); when it is at most E no outcome of
this design can refute the claim, and the verdict says so: "cannot refute: ceiling X < claimed E".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privaudit.core.errors import ConfigError, one_of

RELATIONS = ("add-remove", "replace-one")
UNITS = ("example", "user")
#: Opacus' accountant (its ``mechanism()``) -> privaudit's accountant giving the claimed epsilon.
OPACUS_ACCOUNTANTS = {"rdp": "rdp", "prv": "prv", "gdp": "pld"}


@dataclass(frozen=True)
class UserClaim:
    """A privacy claim to audit: ``epsilon`` at ``delta``, its relation and unit, where it came from, and (read
    from an accountant's history) the mechanism ``event`` and its epsilon under every applicable accountant."""

    epsilon: float
    delta: float
    relation: str = "add-remove"
    unit: str = "example"
    source: str = "stated"
    event: Any = None
    accountants: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_claim(self.epsilon, self.delta, self.relation, self.unit)

    def to_dict(self) -> dict[str, Any]:
        from privaudit.accountants.events import event_to_dict

        return {"epsilon": self.epsilon, "delta": self.delta, "relation": self.relation, "unit": self.unit,
                "source": self.source, "event": None if self.event is None else event_to_dict(self.event),
                "accountants": dict(self.accountants)}


def check_claim(epsilon: float, delta: float, relation: str, unit: str) -> None:
    """One line naming the field for an epsilon, delta, relation or unit that cannot be a claim."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ConfigError(f"--claimed-epsilon: must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise ConfigError(f"--delta: must lie in [0, 1), got {delta!r}")
    if relation not in RELATIONS:
        raise one_of("--relation", relation, RELATIONS)
    if unit not in UNITS:
        raise one_of("--unit", unit, UNITS)


def read_opacus_state(path: str | Path) -> tuple[str, list[tuple[float, float, int]]]:
    """(Opacus' accountant name, its history) from a saved ``state_dict`` (``.pt``/``.pth`` loaded with
    ``torch.load(weights_only=True)``, or ``.json``), every entry checked."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--opacus-state: {path}: no such file")
    state = _load_state(path)
    if not isinstance(state, dict) or "history" not in state:
        raise ConfigError(f"--opacus-state: {path}: not an Opacus accountant state_dict (needs 'history' and "
                          "'mechanism': save accountant.state_dict())")
    mechanism = state.get("mechanism", "rdp")
    if mechanism not in OPACUS_ACCOUNTANTS:
        raise ConfigError(f"--opacus-state: {path}: mechanism: unknown value {mechanism!r}; accepted: "
                          f"{', '.join(OPACUS_ACCOUNTANTS)}")
    history = state["history"]
    if not isinstance(history, (list, tuple)) or not history:
        raise ConfigError(f"--opacus-state: {path}: history: empty (the accountant saw no step)")
    return mechanism, [_entry(path, i, e) for i, e in enumerate(history)]


def _load_state(path: Path) -> Any:
    from privaudit.core.datasets.arrays import read_torch

    if path.suffix.lower() != ".json":
        return read_torch(path, "--opacus-state")
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (ValueError, OSError) as exc:
        raise ConfigError(f"--opacus-state: {path}: not a readable JSON file ({exc})") from None


def _entry(path: Path, i: int, entry: Any) -> tuple[float, float, int]:
    where = f"--opacus-state: {path}: history[{i}]"
    if not isinstance(entry, (list, tuple)) or len(entry) != 3:
        raise ConfigError(f"{where}: expected (noise_multiplier, sample_rate, steps), got {entry!r}")
    sigma, rate, steps = entry
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ConfigError(f"{where}: noise_multiplier must be a finite number > 0, got {sigma!r}")
    if not (isinstance(rate, (int, float)) and 0 < rate <= 1):
        raise ConfigError(f"{where}: sample_rate must lie in (0, 1], got {rate!r}")
    if not (isinstance(steps, int) and 1 <= steps <= 10_000_000):
        raise ConfigError(f"{where}: steps must be an integer in [1, 1e7], got {steps!r}")
    return float(sigma), float(rate), int(steps)


def opacus_claim(path: str | Path, delta: float, *, epsilon: float | None = None, relation: str = "add-remove",
                 unit: str = "example") -> UserClaim:
    """The claim of an Opacus accountant's saved state at ``delta`` (module docstring); ``epsilon`` overrides the
    claimed epsilon (the mechanism is still the history's)."""
    mechanism, history = read_opacus_state(path)
    return history_claim(mechanism, history, delta, epsilon=epsilon, relation=relation, unit=unit,
                         where=f"--opacus-state: {path}", what=f"accountant state {Path(path).name}",
                         source=f"Opacus {mechanism} accountant state {path}")


def history_claim(mechanism: str, history: list[tuple[float, float, int]], delta: float, *,
                  epsilon: float | None = None, relation: str = "add-remove", unit: str = "example",
                  where: str = "the training function's accountant", what: str = "accountant",
                  source: str = "Opacus accountant",
                  options: dict[str, dict[str, Any]] | None = None) -> UserClaim:
    """The claim of an Opacus accountant's ``history`` (noise multiplier, sample rate, steps) under ``mechanism``
    (its ``mechanism()``: rdp, prv or gdp) at ``delta``: :func:`opacus_claim` without the file. ``options``: the
    accountants' options (:func:`~privaudit.accountants.all_epsilons`)."""
    from privaudit.accountants import PrivacyClaim, all_epsilons
    from privaudit.accountants.events import ComposedDpEvent
    from privaudit.accountants.sampled_gaussian import sampled_gaussian_event

    check_claim(epsilon if epsilon is not None else 1.0, delta, relation, unit)
    if not 0 < delta < 1:
        raise ConfigError(f"--delta: a claim read from an accountant needs 0 < delta < 1, got {delta!r}")
    events = [sampled_gaussian_event(z, steps, sample_rate=q) for z, q, steps in history]
    event = events[0] if len(events) == 1 else ComposedDpEvent(events)
    claim = PrivacyClaim(event=event, relation=relation, unit=unit, delta=delta, paper_accountant=mechanism,
                         sampler="poisson", source=source)
    results = {name: r.epsilon for name, r in all_epsilons(claim, options).items() if r.applicable}
    ours = OPACUS_ACCOUNTANTS[mechanism]
    if epsilon is None and ours not in results:
        raise ConfigError(f"{where}: privaudit's {ours} accountant does not apply to this history")
    claimed = float(results[ours]) if epsilon is None else float(epsilon)
    source = (f"Opacus {mechanism} {what}: " + ", ".join(
        f"{z:.4g} noise x {q:.4g} rate x {s} steps" for z, q, s in history) +
        (f"; epsilon by privaudit's {ours} accountant" if epsilon is None else "; epsilon as stated"))
    return UserClaim(claimed, delta, relation, unit, source, event, results)


def claim_from_args(epsilon: float | None, delta: float | None, relation: str, unit: str,
                    opacus_state: str | None) -> UserClaim | None:
    """The claim of the command-line flags: None when neither a claimed epsilon nor an accountant state is given."""
    if opacus_state is None and epsilon is None:
        if relation != "add-remove" or unit != "example":
            raise ConfigError("--relation/--unit: describe a claim; give --claimed-epsilon E --delta D or "
                              "--opacus-state FILE --delta D")
        return None
    if delta is None:
        raise ConfigError("--delta: required with a claim (the delta the epsilon is stated at, e.g. 1e-5)")
    if opacus_state is not None:
        return opacus_claim(opacus_state, delta, epsilon=epsilon, relation=relation, unit=unit)
    return UserClaim(float(epsilon), float(delta), relation, unit)


@dataclass(frozen=True)
class Verdict:
    """An audit's verdict on a claim: ``refuted`` or ``not refuted`` at ``confidence``, the lower bound it rests on,
    the design's ``ceiling`` and one sentence saying all of it."""

    verdict: str
    confidence: float
    eps_lower_bound: float
    ceiling: float
    claimed_epsilon: float
    method: str
    refutable: bool
    statement: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def judge(claim: UserClaim, eps_lower_bound: float, ceiling: float, confidence: float, method: str) -> Verdict:
    """Refuted when the sound lower bound exceeds the claimed epsilon; the ceiling says whether it ever could."""
    e, c = claim.epsilon, f"{100 * confidence:.3g}%"
    refuted = eps_lower_bound > e
    refutable = ceiling > e
    if refuted:
        statement = (f"refuted at {c} confidence: epsilon >= {eps_lower_bound:.3g} > claimed {e:g} "
                     f"(this design could show up to {ceiling:.3g})")
    elif refutable:
        statement = (f"not refuted at {c} confidence: epsilon >= {eps_lower_bound:.3g}, claimed {e:g} "
                     f"(this design could show up to {ceiling:.3g})")
    else:
        statement = (f"not refuted at {c} confidence: cannot refute: ceiling {ceiling:.3g} < claimed {e:g} "
                     f"(epsilon >= {eps_lower_bound:.3g}; run `privaudit plan` to size a design that can)")
    return Verdict("refuted" if refuted else "not refuted", confidence, eps_lower_bound, ceiling, e, method,
                   refutable, statement)
