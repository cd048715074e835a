"""Shared fixtures."""

from __future__ import annotations

import os

import pytest
import torch

# Two threads at most; one per process when pytest-xdist runs the tests in several worker processes (the README's
# test command: ``pytest -n 2`` on a 2-core machine), so the workers do not oversubscribe the cores.
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else max(1, min(2, torch.get_num_threads())))


@pytest.fixture(scope="session")
def digits():
    """The embedded digits dataset split for auditing (seed 0)."""
    from privaudit.core.datasets import load_dataset

    return load_dataset("digits", seed=0)


TINY_SUITE = """
name = "tiny"
description = "A tiny suite for the runner tests."
epsilons = [1.0, 4.0]
allow_plugins = true  # the kernel-sum test double is a plugin

[[defenses]]
name = "leaky_defense:NoisyKernelSum"
label = "kernel-sum"
params = { leak_factor = 1.0, dim = 2048 }

[[defenses]]
name = "nonprivate"
params = { epochs = 4, width = 8, rep_dim = 16, batch_size = 64 }

[[attacks]]
name = "loss"

[[attacks]]
name = "lira"
params = { shadow_models = 4, queries = 1, n_views = 4 }
"""


@pytest.fixture(scope="session")
def tiny_suite(tmp_path_factory):
    """A suite file: an honest Gaussian-mechanism plugin at two epsilons and a short non-private run."""
    path = tmp_path_factory.mktemp("suite") / "tiny.toml"
    path.write_text(TINY_SUITE)
    return path


@pytest.fixture(scope="session")
def tiny_run(tiny_suite, tmp_path_factory):
    """The tiny suite run once, in process, with the local executor: (RunResult, output directory)."""
    from privaudit.audit.run.runner import run_suite
    from privaudit.audit.suite.load import load_suite

    out = tmp_path_factory.mktemp("tiny-run")
    return run_suite(load_suite(tiny_suite), out=out, progress=False), out


@pytest.fixture
def members(tmp_path):
    """An audit-training members file (half of the digits), written in the test's own directory."""
    from training_audit_helpers import write_members

    return write_members(tmp_path)


@pytest.fixture
def short_recipe(monkeypatch):
    """The honest recipe (``examples/opacus_recipe.py``) at one epoch on one torch thread, its calibration redone."""
    import opacus_recipe
    import torch

    torch.set_num_threads(1)
    monkeypatch.setattr(opacus_recipe, "EPOCHS", 1)
    opacus_recipe.noise_multiplier.cache_clear()
    yield
    opacus_recipe.noise_multiplier.cache_clear()


_OPACUS_RDP: dict[str, object] = {}


@pytest.fixture(scope="module")
def opacus_rdp_memo():
    """Opacus' RDP of one (sample rate, noise multiplier, order) computed once per process: the recipes' calibration
    (``get_noise_multiplier``'s bisection) and the PRV accountant's domain recompute the same orders at the same
    multipliers in every audit (seconds each at the recipes' small multipliers). The function is pure (floats in,
    a float out), so its cached values are the values; restored when the module's tests end."""
    import functools

    from opacus.accountants.analysis import rdp

    original = rdp._compute_rdp
    cached = _OPACUS_RDP.get("cached")
    if cached is None or cached.__wrapped__ is not original:
        cached = _OPACUS_RDP["cached"] = functools.lru_cache(maxsize=None)(original)
    rdp._compute_rdp = cached
    yield
    rdp._compute_rdp = original
