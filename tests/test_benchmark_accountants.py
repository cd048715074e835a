"""Benchmarks: epsilon of 100,000 DP-SGD steps over the default orders, and one calibration (cold caches)."""

import time

from accountants import calibrate, epsilon
from accountants.dpsgd import sampled_gaussian_claim, sampled_gaussian_template
from accountants.rdp import _LEAF_CACHE, DEFAULT_ORDERS


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
