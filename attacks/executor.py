"""The executor hook: how shadow/reference-model jobs fan out.

An executor maps a picklable, top-level function over a list of picklable tasks and returns the
results in order. The in-process :class:`LocalExecutor` is the default; a distributed executor
(Ray) only needs the same ``map`` method. Attack code never assumes where a task runs: tasks carry
the defense by name and parameters, the data by reference (or value), seeds and masks, never
closures or live models.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Protocol, Sequence, TypeVar, runtime_checkable

from privaudit.core.registry import Registry

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Executor(Protocol):
    """Anything with ``map(fn, tasks) -> list`` (results in task order)."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]: ...


class LocalExecutor:
    """Runs tasks one after another in this process, with an optional progress bar."""

    def __init__(self, progress: bool = False, desc: str = "shadow models"):
        self.progress = progress
        self.desc = desc

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """Results in task order. With ``progress``: a bar on a terminal, a line per finished task in a log."""
        from tqdm.auto import tqdm

        out: list[R] = []
        lines = self.progress and not sys.stderr.isatty()  # tqdm hides its bar there; a CI log gets lines
        start = time.perf_counter()
        with tqdm(total=len(tasks), desc=self.desc, disable=None if self.progress else True, leave=False,
                  dynamic_ncols=True) as bar:
            for i, task in enumerate(tasks, 1):
                out.append(fn(task))
                bar.update(1)
                if lines:
                    print(f"  {self.desc}: {i}/{len(tasks)} done ({time.perf_counter() - start:.0f}s)",
                          file=sys.stderr, flush=True)
        return out


EXECUTORS: Registry[type[Executor]] = Registry("executor", {"local": "privaudit.attacks.executor:LocalExecutor", "ray": "privaudit.attacks.ray_executor:RayExecutor"})


def make_executor(name: str = "local", **kwargs) -> Executor:
    """Instantiate executor ``name`` (``module:Class`` from :data:`EXECUTORS`)."""
    return EXECUTORS.create(name, **kwargs)
