"""The Ray executor: tasks become Ray tasks with CPU/GPU resource requests (``pip install '.[ray]'``).

It implements the executor protocol of :mod:`privaudit.attacks.executor` (``map(fn, tasks)``, results in task
order), so shadow/reference-model batches fan out over a Ray cluster unchanged, and the suite runner
uses the same connection to run whole cells as Ray tasks (:func:`submit`). Tasks are plain picklable
functions and data; nothing here knows about defenses or attacks.

Without ``address`` (and no Ray already initialised) a local instance is started with the project on
the workers' ``PYTHONPATH``, no dashboard and quiet logs. A task uses ``threads`` torch threads (default:
the CPUs it requested); the runner passes the suite's ``threads`` so that every task computes exactly
what the in-process executor computes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from privaudit.core.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")

PROJECT_ROOT = str(Path(__file__).resolve().parents[1])


def ensure_ray(address: str | None = None, num_cpus: int | None = None):
    """Import Ray and connect (or start a local instance) once; a missing Ray is a ConfigError."""
    try:
        import ray
    except ImportError:
        raise ConfigError("executor: 'ray' needs the ray package; install it with pip install 'privaudit[ray]'") \
            from None
    if not ray.is_initialized():
        path = os.pathsep.join(p for p in (PROJECT_ROOT, os.environ.get("PYTHONPATH")) if p)
        import logging

        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
                                  "runtime_env": {"env_vars": {"PYTHONPATH": path}}}
        if address is None:
            kwargs["num_cpus"] = num_cpus
        ray.init(address=address, **kwargs)
    return ray


def _call(fn: Callable[..., R], args: tuple, threads: int) -> R:
    import torch

    torch.set_num_threads(max(1, threads))
    return fn(*args)


def remote_options(num_cpus: float, num_gpus: float) -> dict[str, Any]:
    return {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_retries": 0}


def submit(fn: Callable[..., R], *args: Any, num_cpus: float = 1.0, num_gpus: float = 0.0,
           threads: int | None = None):
    """Submit ``fn(*args)`` as one Ray task with the given resources and torch threads (default: its CPUs)."""
    import ray

    remote = ray.remote(_call).options(**remote_options(num_cpus, num_gpus))
    return remote.remote(fn, args, threads if threads is not None else max(1, int(num_cpus)))


class RayExecutor:
    """``map(fn, tasks)`` as Ray tasks, each requesting ``num_cpus`` CPUs and ``num_gpus`` GPUs."""

    def __init__(self, progress: bool = False, desc: str = "shadow models", num_cpus: float = 1.0,
                 num_gpus: float = 0.0, address: str | None = None, threads: int | None = None):
        if num_cpus <= 0 or num_gpus < 0:
            raise ConfigError(f"ray resources: need num_cpus > 0 and num_gpus >= 0, got {num_cpus}, {num_gpus}")
        self.progress, self.desc = progress, desc
        self.num_cpus, self.num_gpus, self.threads = num_cpus, num_gpus, threads
        self.ray = ensure_ray(address)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        from tqdm.auto import tqdm

        refs = [submit(fn, task, num_cpus=self.num_cpus, num_gpus=self.num_gpus, threads=self.threads)
                for task in tasks]
        pending = list(refs)
        with tqdm(total=len(refs), desc=self.desc, disable=None if self.progress else True, leave=False,
                  dynamic_ncols=True) as bar:
            while pending:
                done, pending = self.ray.wait(pending, num_returns=1)
                bar.update(len(done))
        return self.ray.get(refs)
