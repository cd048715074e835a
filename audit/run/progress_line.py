"""The progress line a CI log reads (:class:`~privaudit.audit.run.heartbeat.Heartbeat` prints it): how many tasks of
each kind are done, what runs now (each task, its stage and for how long), and the time left
(:mod:`privaudit.audit.run.progress_estimate`) or what is not timed yet, from a
:class:`~privaudit.audit.run.progress_estimate.Snapshot` of the run's progress.
"""

from __future__ import annotations

from typing import Sequence

from privaudit.audit.run.progress_estimate import Snapshot, Task

KIND_NAMES = {"cell": ("cell", "cells"), "sensitivity": ("sensitivity claim", "sensitivity claims"),
              "step audit": ("step audit", "step audits")}


def counts(tasks: Sequence[Task]) -> str:
    """``3/13 cells, 15/15 sensitivity claims done`` for the kinds this run has."""
    parts = []
    for kind, (one, many) in KIND_NAMES.items():
        of_kind = [t for t in tasks if t.kind == kind]
        if of_kind:
            done = sum(t.finished is not None for t in of_kind)
            parts.append(f"{done}/{len(of_kind)} {many if len(of_kind) != 1 else one}")
    return ", ".join(parts) + " done" if parts else "starting"


def running(snapshot: Snapshot) -> str:
    """What runs now: each started task, its stage and for how long; then how many wait."""
    now, tasks = snapshot.now, snapshot.tasks
    active = [t for t in tasks if t.started is not None and t.finished is None]
    parts = []
    for t in active:
        label = KIND_NAMES.get(t.kind, (t.kind,))[0]
        name = t.id if t.kind == "cell" else f"{label} {t.id.removeprefix(t.kind + ' ')}"
        if t.stage is not None and t.stage_started is not None:
            parts.append(f"{name}: {t.stage} ({now - t.stage_started:.0f}s)")
        else:
            parts.append(f"{name} ({now - t.started:.0f}s)")
    if snapshot.phase:
        parts.append(snapshot.phase)
    waiting = sum(t.started is None for t in tasks)
    text = "running " + ", ".join(parts) if parts else "waiting for a worker"
    return text + (f"; {waiting} waiting" if waiting else "")


def line(snapshot: Snapshot, estimate: tuple[float | None, list[str]]) -> str:
    """The whole line: elapsed time, :func:`counts`, :func:`running`, then the time left (``estimate``: seconds or
    None, and the kinds not timed yet) and the untracked work still to come."""
    s = snapshot
    text = f"[privaudit +{s.now - s.started:.0f}s] {counts(s.tasks)}; {running(s)}"
    left, unknown = estimate
    later = _and([n for n in s.untracked if n not in s.phase_priors])
    if unknown:
        text += f"; time left: estimated once {_and([f'a {KIND_NAMES.get(k, (k,))[0]}' for k in unknown])} " \
                f"{'has' if len(unknown) == 1 else 'have'} finished"
    elif left is not None and (left > 0 or not ((s.phase and s.phase not in s.phase_priors) or later)):
        text += f"; about {left:.0f}s left" + (f", then {later} (not timed)" if later else "")
    elif later:
        text += f"; then {later} (not timed)"
    return text


def _and(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(items) if len(items) < 3 else f"{', '.join(items[:-1])} and {items[-1]}"
