"""The Ray executor on a local instance: cells and shadow-model batches as Ray tasks give the same numbers."""

import os
from pathlib import Path

import pytest

from privaudit.core.io import read_json

ray = pytest.importorskip("ray")
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


def test_ray_run_equals_local_run(local_ray, tiny_suite, tiny_run, tmp_path):
    from privaudit.audit.runner import run_suite
    from privaudit.audit.suite import load_suite

    _, reference_out = tiny_run
    result = run_suite(load_suite(tiny_suite), out=tmp_path / "ray", executor="ray", progress=False)
    assert result.exit_code == 0 and len(result.ran) == 3
    assert read_json(tmp_path / "ray" / "timings.json")["executor"] == "ray"
    local = read_json(reference_out / "report.json")
    remote = read_json(tmp_path / "ray" / "report.json")
    assert remote == local
