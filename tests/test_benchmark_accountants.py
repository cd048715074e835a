"""Benchmarks: epsilon of 100,000 DP-SGD steps over the default orders, and one calibration (cold caches)."""

import pytest
import time

from privaudit.accountants import calibrate, epsilon
from privaudit.accountants.sampled_gaussian import sampled_gaussian_claim, sampled_gaussian_template
from privaudit.accountants.rdp.rdp import _LEAF_CACHE, DEFAULT_ORDERS

# slow: a timing benchmark runs alone, with `.ci/slow` (pytest -m slow, one process): the default run (pytest -n 2)
# shares the cores between workers and disables pytest-benchmark's timer, so its timings would mean nothing.
pytestmark = pytest.mark.slow


def test_benchmark_epsilon_100k_steps(benchmark):
    claim = sampled_gaussian_claim(1.0, 100_000, 1e-5, sample_rate=0.001)
    result = benchmark.pedantic(lambda: epsilon(claim, "rdp"), setup=_LEAF_CACHE.clear, rounds=10, iterations=1)
    assert 0 < result.epsilon < 20
    benchmark.extra_info.update(epsilon=result.epsilon, orders=len(DEFAULT_ORDERS))


def test_benchmark_calibration(benchmark):
    template = sampled_gaussian_template(steps=100_000, delta=1e-5, sample_rate=0.001)
    z = benchmark.pedantic(lambda: calibrate(template, 3.0, "rdp", rel_tol=1e-6), setup=_LEAF_CACHE.clear,
                           rounds=3, iterations=1)
    assert epsilon(template(z), "rdp").epsilon <= 3.0
    _LEAF_CACHE.clear()
    start = time.perf_counter()
    epsilon(template(1.0), "rdp")
    one = time.perf_counter() - start
    _LEAF_CACHE.clear()
    calibrate(template, 3.0, "rdp", rel_tol=1e-6)
    evaluations = len(_LEAF_CACHE)  # distinct noise multipliers the calibration tried
    ratio = benchmark.stats.stats.min / one
    benchmark.extra_info.update(noise_multiplier=z, epsilon_evaluations=evaluations, calibration_over_epsilon=ratio)
    print(f"calibration: z={z:.6f} after {evaluations} epsilon evaluations; "
          f"calibration / one epsilon = {ratio:.1f}x")


def _process_seconds(*args: str) -> float:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=root, check=True, capture_output=True,
                   env={"PYTHONPATH": str(root), "PATH": ""})
    return time.perf_counter() - start


# slow: times repeated CLI start-ups (about 10 s); run with -m slow --benchmark-only
@pytest.mark.slow
def test_benchmark_accountant_cli_startup(benchmark):
    """Whole-process time of ``privaudit epsilon --accountant rdp`` over a bare ``import dp_accounting``, both
    measured in this run (interleaved, best of 3): the CLI's own start-up cost on top of the library it needs."""
    cli = ("-m", "privaudit", "epsilon", "--noise-multiplier", "1", "--steps", "1000", "--sample-rate", "0.01",
           "--delta", "1e-5", "--accountant", "rdp")
    bare, full = [], []
    for _ in range(3):
        bare.append(_process_seconds("-c", "import dp_accounting"))
        full.append(_process_seconds(*cli))
    benchmark.pedantic(lambda: _process_seconds(*cli), rounds=1, iterations=1)
    ratio = min(full) / min(bare)
    benchmark.extra_info.update(cli_seconds=min(full), import_dp_accounting_seconds=min(bare), ratio=ratio)
    print(f"privaudit epsilon --accountant rdp: {min(full):.2f} s; python -c 'import dp_accounting': "
          f"{min(bare):.2f} s; ratio {ratio:.2f}")
    assert ratio < 2.0  # torch (about 2.5 s) would at least double it
