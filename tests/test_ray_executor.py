"""The Ray executor on a local instance: cells and shadow-model batches as Ray tasks give the same numbers."""

import os
from pathlib import Path

import pytest

from privaudit.core.io import read_json

ray = pytest.importorskip("ray")
# Ray starts a local cluster per worker (5-10 s) before any test: the whole module is in the slow run (.ci/slow)
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def local_ray():
    from privaudit.attacks.ray_executor import ensure_ray

    if ray.is_initialized():
        ray.shutdown()
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tests"), old) if p)  # the test plugins
    try:
        yield ensure_ray(num_cpus=2)
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _square(x):
    return x * x


def test_ray_executor_maps_in_order(local_ray):
    from privaudit.attacks.executor import make_executor

    executor = make_executor("ray", num_cpus=1)
    assert executor.map(_square, list(range(7))) == [x * x for x in range(7)]


@pytest.mark.slow  # 35 s: a whole suite on Ray; the default run maps through a local Ray (test_ray_executor_maps_in_order)
def test_ray_run_equals_local_run(local_ray, tiny_suite, tiny_run, tmp_path):
    from privaudit.audit.run.runner import run_suite
    from privaudit.audit.suite.load import load_suite

    _, reference_out = tiny_run
    result = run_suite(load_suite(tiny_suite), out=tmp_path / "ray", executor="ray", progress=False)
    assert result.exit_code == 0 and len(result.ran) == 3
    assert read_json(tmp_path / "ray" / "timings.json")["executor"] == "ray"
    local = read_json(reference_out / "report.json")
    remote = read_json(tmp_path / "ray" / "report.json")
    assert remote == local


@pytest.mark.parametrize("attack,params", [("lira", {"shadow_models": 4}), ("rmia", {"reference_models": 4})])
def test_reference_models_spread_over_ray_workers_match_a_local_run(local_ray, attack, params):
    """LiRA's / RMIA's reference models in stacks of two (the ensemble engine) as Ray tasks on two workers give
    the same scores as the same stacks trained one after another in this process."""
    import numpy as np
    import torch

    from privaudit.attacks.base import Target
    from privaudit.attacks.executor import LocalExecutor, make_executor
    from privaudit.attacks.registry import make_attack
    from privaudit.attacks.membership.shadow_models import DataRef

    ref = DataRef("digits", seed=0)
    defense = {"epochs": 2, "width": 4, "rep_dim": 8, "proj_hidden": 8, "proj_dim": 4, "batch_size": 64}
    config = {**params, "max_stack": 2, "queries": 1, "n_views": 2, "n_anchors": 16, "n_population": 32}
    results = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' arithmetic (one thread each), so the comparison is exact
    try:
        for name, executor in (("local", LocalExecutor()), ("ray", make_executor("ray", num_cpus=1, threads=1))):
            target = Target.train("nonprivate", ref.load(), params=defense, seed=0, data_ref=ref)
            results[name] = make_attack(attack, config).run(target, executor=executor)
    finally:
        torch.set_num_threads(threads)
    local, remote = results["local"], results["ray"]
    assert np.array_equal(local.scores, remote.scores) and np.array_equal(local.membership, remote.membership)
    assert all(np.array_equal(local.variants[k], remote.variants[k]) for k in local.variants)
    assert local.metrics() == remote.metrics() and local.counts == remote.counts
