"""The one reader of ``report.json`` (``privaudit report``, ``privaudit gate``): a file is read only through
:func:`load_report`, which checks it before anything uses it, so any malformed file is one line (a ConfigError,
exit status 2) rather than a traceback from deep inside the renderers or the gate.

Checked, in order: the file is a regular file of at most :data:`MAX_REPORT_BYTES`; it is UTF-8; it is strict JSON
(``NaN`` and ``Infinity`` are refused: the writer turns non-finite numbers into null); it nests at most
:data:`MAX_REPORT_DEPTH` levels (a deeper file is refused before it can exhaust the parser's stack); and every
field that the gate and the renderers read has the type they assume (:data:`REPORT`: objects, lists, strings,
numbers or null, the gate's status one of ``pass`` / ``fail``, score paths inside the run's directory). The typed
records of :mod:`privaudit.audit.report.records` (a cell, its attacks and claim, its gate and comparisons, the suite's
gate) are closed: each field they have is listed here, a field they lack is refused by name, and so is one they do not
have. Elsewhere fields the readers do not use are left unchecked, so reports with more of them still load.

Every value is checked in two passes (:func:`validate`): first the type of every field present, then every required
field's presence and every closed object's field names, so a field of the wrong type is named before a missing one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path, PurePosixPath
from typing import Any, Callable

from privaudit.core.errors import ConfigError
from privaudit.core.io import nesting_depth

#: Largest report.json read (bytes): a suite's report grows by some ten kilobytes per cell.
MAX_REPORT_BYTES = 256 * 2 ** 20
#: Deepest nesting of objects and arrays read (a report nests about ten levels).
MAX_REPORT_DEPTH = 64
REBUILD = "rerun privaudit run --resume to rebuild it"


class SchemaError(ConfigError):
    """A record that is not of its schema: the message names the field (its path) and what was expected."""


class _Invalid(Exception):
    """A field of the report is missing, unexpected or does not have the type its readers assume (``where``: its
    path)."""

    def __init__(self, where: str, expected: str, value: Any = None, missing: bool = False, unexpected: bool = False):
        if missing or unexpected:
            super().__init__(f"{where}: {'missing (expected' if missing else 'unexpected:'} {expected}"
                             + (")" if missing else ""))
            return
        shown = {dict: "an object", list: "a list"}.get(type(value)) or repr(value)[:60]
        super().__init__(f"{where or 'the top level'}: expected {expected}, got {shown}")


class Spec:
    """A type a field must have: :meth:`check` raises :class:`_Invalid` naming the field otherwise (``whole``: also
    the objects' required and closed fields; :func:`validate` runs both passes)."""

    what = "a value"

    def check(self, value: Any, where: str, whole: bool = True) -> None:
        if not self.accepts(value):
            raise _Invalid(where, self.what, value)

    def accepts(self, value: Any) -> bool:
        return True


class Scalar(Spec):
    """A value that passes ``test`` (described by ``what``)."""

    def __init__(self, what: str, test: Callable[[Any], bool]):
        self.what, self.test = what, test

    def accepts(self, value: Any) -> bool:
        return self.test(value)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _relative_path(x: Any) -> bool:
    """A path inside the run's directory: relative, without ``..``."""
    return isinstance(x, str) and bool(x) and not PurePosixPath(x).is_absolute() and ".." not in PurePosixPath(x).parts


ANY = Spec()
STR = Scalar("a string", lambda x: isinstance(x, str))
NUM = Scalar("a finite number", _number)
INT = Scalar("an integer", lambda x: isinstance(x, int) and not isinstance(x, bool))
REL_PATH = Scalar("a path inside the run's directory", _relative_path)


class Nullable(Spec):
    def __init__(self, inner: Spec):
        self.inner, self.what = inner, f"{inner.what} or null"

    def check(self, value: Any, where: str, whole: bool = True) -> None:
        if value is None:
            return
        if isinstance(self.inner, Scalar) and not self.inner.accepts(value):
            raise _Invalid(where, self.what, value)
        self.inner.check(value, where, whole)


class ListOf(Spec):
    def __init__(self, item: Spec):
        self.item, self.what = item, f"a list of {item.what.removeprefix('a ').removeprefix('an ')}s"

    def check(self, value: Any, where: str, whole: bool = True) -> None:
        if not isinstance(value, list):
            raise _Invalid(where, self.what, value)
        for i, item in enumerate(value):
            self.item.check(item, f"{where}[{i}]", whole)


class MapOf(Spec):
    """An object whose every value has type ``value`` (keys are strings: JSON's)."""

    what = "an object"

    def __init__(self, value: Spec):
        self.value = value

    def check(self, value: Any, where: str, whole: bool = True) -> None:
        if not isinstance(value, dict):
            raise _Invalid(where, self.what, value)
        for key, item in value.items():
            self.value.check(item, f"{where}.{key}", whole)


class Obj(Spec):
    """An object with ``required`` fields and ``optional`` ones (absent or of their type); other fields pass unless
    the object is ``closed`` (``name``: what it is, for the message naming a field it does not have)."""

    what = "an object"

    def __init__(self, required: dict[str, Spec] | None = None, optional: dict[str, Spec] | None = None, *,
                 closed: bool = False, name: str = "object"):
        self.required, self.optional = required or {}, optional or {}
        self.closed, self.name = closed, name

    @property
    def fields(self) -> dict[str, Spec]:
        return {**self.required, **self.optional}

    def check(self, value: Any, where: str, whole: bool = True) -> None:
        if not isinstance(value, dict):
            raise _Invalid(where, self.what, value)
        for key, spec in self.fields.items():
            path = f"{where}.{key}".lstrip(".")
            if key in value:
                spec.check(value[key], path, whole)
            elif whole and key in self.required:
                raise _Invalid(path, spec.what, missing=True)
        unexpected = [key for key in value if key not in self.fields] if whole and self.closed else []
        if unexpected:
            raise _Invalid(f"{where}.{unexpected[0]}".lstrip("."), f"no such field (a {self.name} has "
                           f"{', '.join(self.fields)})", unexpected=True)


def validate(spec: Spec, value: Any, where: str = "") -> None:
    """Check ``value`` against ``spec`` in two passes: the types of the fields present, then the required and closed
    fields (a :class:`SchemaError` naming the first field that is wrong)."""
    try:
        spec.check(value, where, whole=False)
        spec.check(value, where, whole=True)
    except _Invalid as exc:
        raise SchemaError(str(exc)) from None


def _opt(**fields: Spec) -> dict[str, Spec]:
    """Fields that may be null (absent too, where they are optional)."""
    return {k: Nullable(v) for k, v in fields.items()}


NUMBERS = MapOf(Nullable(NUM))
NOTES = Nullable(ListOf(STR))
BOOL = Scalar("true or false", lambda x: isinstance(x, bool))
STATUS = Scalar("'pass' or 'fail'", lambda x: x in ("pass", "fail"))
# The typed records (privaudit.audit.report.records): closed, each field in the order the report writes it.
COMPARISON = Obj({"attack": STR, "eps_lower_bound": Nullable(NUM), "method": Nullable(STR), "epsilon": Nullable(NUM),
                  "accountant": Nullable(STR), "gate_eps_lower_bound": Nullable(NUM),
                  "gate_confidence": Nullable(NUM), "verdict": STR, "reason": Nullable(STR)},
                 _opt(quantity=STR, eps_lb_any_mechanism=NUM, eps_lb_mechanism=NUM, relation=STR, unit=STR,
                      claim_epsilon=NUM), closed=True, name="comparison")
CELL_GATE = Obj({"status": STATUS, "reasons": ListOf(STR), "comparisons": ListOf(COMPARISON)},
                {"control": BOOL, "caught": BOOL, "caught_by": ListOf(STR), "released_noise": ListOf(Obj())},
                closed=True, name="cell's gate")
ATTACK = Obj({**_opt(auc=NUM, tpr_at_fpr=NUMBERS, eps_lower_bound=NUM, eps_lb_method=STR, n_members=INT,
                     n_nonmembers=INT),
              **_opt(variant=STR, scores=REL_PATH),
              "details": Nullable(Obj(optional={"bound": Nullable(Obj(optional={"notes": NOTES}))}))},
             _opt(eps_lb_mechanism=NUM, eps_lb_mechanism_method=STR, eps_lb_trajectory=NUM,
                  eps_lb_trajectory_method=STR), closed=True, name="attack record")
CLAIM = Obj({"mechanism": STR, **_opt(relation=STR, unit=STR, paper_accountant=STR, delta=NUM, sampler=STR,
                                      source=STR), "notes": NOTES}, closed=True, name="claim")
PANEL = Obj(optional={**{k: Nullable(NUMBERS) for k in ("trained", "init", "random", "nonprivate", "gap_closed")},
                      "vs_init": Nullable(MapOf(Nullable(Obj({"gained": INT, "lost": INT, "n": INT, "p_drop": NUM}))))})
CELL = Obj({"id": STR, "dataset": STR, "defense": STR, **_opt(target_epsilon=NUM, delta=NUM), "seed": INT,
            **_opt(claim=CLAIM, epsilon=NUMBERS),
            "utility": Nullable(Obj(optional=_opt(knn_accuracy=NUM, linear_probe_accuracy=NUM, panel=PANEL))),
            "attacks": Nullable(MapOf(ATTACK)),
            "details": Nullable(Obj(optional=_opt(error=STR, init=Obj(),
                                                  epsilon=MapOf(Nullable(Obj(optional=_opt(epsilon=NUM)))))))},
           {"claim_checks": Nullable(Obj()), "gate": Nullable(CELL_GATE)}, closed=True, name="cell record")
SENSITIVITY = Obj(optional={**_opt(claim=STR, source=STR, relation=STR, bound=NUM, observed=NUM, ratio=NUM,
                                   verdict=STR, witness=REL_PATH),
                            "config": Nullable(Obj(optional={"notes": NOTES, "closed_form_supremum": Nullable(Obj(
                                optional=_opt(value=NUM, formula=STR, search_ratio=NUM)))}))})
STEP_PAIR = Obj({"pair": STR, "verdict": STR},
                _opt(mu_lower=NUM, epsilon_lower=NUM, power=NUM, power_mu=NUM, error=STR, witness=REL_PATH))
STEP = Obj({"defense": STR, "relation": STR, "claim": Obj(optional=_opt(mu=NUM, epsilon=NUM)),
            "pairs": ListOf(STEP_PAIR)})
EXPECT = Nullable(Obj(optional={"expect": Nullable(MapOf(STR))}))
SUITE = Obj({"name": STR, "path": STR},
            {"description": Nullable(STR), "sensitivity": EXPECT, "step_audit": EXPECT,
             "attacks": Nullable(ListOf(Obj(optional={"label": STR, "name": STR})))})
GATE = Obj({"status": STATUS, "reasons": ListOf(STR), "notes": ListOf(STR), "family_wise_error": Nullable(NUM),
            "controls": INT, "controls_caught": INT}, closed=True, name="suite's gate")
#: What the gate and the renderers read of a report (see :mod:`privaudit.audit.report` for the whole layout).
REPORT = Obj({"suite": SUITE, "version": STR, "git_commit": Nullable(STR), "device": STR,
              "cells": ListOf(CELL), "sensitivity": ListOf(SENSITIVITY), "gate": GATE},
             {"step_audit": ListOf(STEP)})


def load_report(out: str | Path) -> dict[str, Any]:
    """``out/report.json``, checked (module docstring), or a one-line ConfigError naming what is wrong."""
    path = Path(out) / "report.json"
    if not path.is_file():
        raise ConfigError(f"{out}: no report.json here (give the output directory of privaudit run)")
    report = _parse(path, _read_text(path))
    try:
        validate(REPORT, report)
    except SchemaError as exc:
        raise ConfigError(f"{path}: not a privaudit report ({exc}); {REBUILD}") from None
    return report


def _read_text(path: Path) -> str:
    """The file's text: at most :data:`MAX_REPORT_BYTES` (larger files are not read), UTF-8."""
    try:
        data, too_big = b"", path.stat().st_size > MAX_REPORT_BYTES
        if not too_big:  # read at most one byte more than allowed, whatever the file grew to
            with open(path, "rb") as handle:
                data = handle.read(MAX_REPORT_BYTES + 1)
            too_big = len(data) > MAX_REPORT_BYTES
        if too_big:
            raise ConfigError(f"{path}: not a privaudit report (more than the {MAX_REPORT_BYTES} bytes a report "
                              f"may have); {REBUILD}")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "empty"
        raise ConfigError(f"{path}: not a readable report ({type(exc).__name__}: {reason}); {REBUILD}") from None


def _parse(path: Path, text: str) -> Any:
    """Strict JSON (no NaN, no Infinity) nesting at most :data:`MAX_REPORT_DEPTH` levels."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON (a report writes non-finite numbers as null)")

    try:
        report = json.loads(text, parse_constant=refuse)
    except RecursionError:
        report, deep = None, True
    except ValueError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "empty"
        raise ConfigError(f"{path}: not a readable report ({type(exc).__name__}: {reason}); {REBUILD}") from None
    else:
        deep = nesting_depth(report, MAX_REPORT_DEPTH) > MAX_REPORT_DEPTH
    if deep:
        raise ConfigError(f"{path}: not a privaudit report (nested more than {MAX_REPORT_DEPTH} levels deep); "
                          f"{REBUILD}")
    return report
