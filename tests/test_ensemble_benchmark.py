"""Benchmark: K = 16 small shadow models trained together (stacked, vmapped) vs one after another.

Both are timed in the same run (interleaved, CPU time) and the speed-up is reported as a ratio
(``extra_info``). The speed-up comes from removing per-model overhead (Python, kernel launches, optimizer loops), so it
is large for small, overhead-bound models and shrinks towards 1 as a model's own arithmetic dominates (on CPU the
stacked convolution is a grouped convolution, about as fast as K separate ones).
"""

import time

import pytest
import torch

from privaudit.defenses import Budget, make_defense
from privaudit.defenses.training.ensemble import fit_many

# slow: a timing benchmark runs alone, with `.ci/slow` (pytest -m slow, one process): the default run (pytest -n 2)
# shares the cores between workers and disables pytest-benchmark's timer, so its timings would mean nothing.
pytestmark = pytest.mark.slow

K = 16
CONFIGS = {
    "nonprivate-mlp": ("nonprivate", {"encoder": "mlp", "width": 8, "batch_size": 32, "epochs": 1}),
    "supervised-cnn": ("supervised", {"encoder": "cnn", "width": 4, "batch_size": 32, "epochs": 1}),
}


def _datas(digits):
    gen = torch.Generator().manual_seed(0)
    return [digits.with_membership(torch.rand(len(digits.pool), generator=gen) < 0.5) for _ in range(K)]


ROUNDS = 2


@pytest.mark.parametrize("config", list(CONFIGS))
def test_benchmark_stacked_vs_sequential_shadow_models(benchmark, digits, config):
    """Speed-up = best sequential time / best stacked time over ``ROUNDS`` interleaved rounds, in CPU time
    (``time.process_time``: the shared machine's other jobs inflate it far less than wall time)."""
    name, params = CONFIGS[config]
    defense = make_defense(name, params)
    datas, seeds = _datas(digits), list(range(K))
    defense.fit(datas[0], Budget(), 0, progress=False)  # warm-up

    def sequential_fits():
        return [defense.fit(d, Budget(), s, progress=False) for d, s in zip(datas, seeds)]

    def stacked_fits():
        return fit_many(defense, datas, Budget(), seeds)

    sequential = stacked = float("inf")
    for _ in range(ROUNDS):
        start = time.process_time()
        sequential_fits()
        sequential = min(sequential, time.process_time() - start)
        start = time.process_time()
        trained = stacked_fits()
        stacked = min(stacked, time.process_time() - start)
    benchmark.pedantic(stacked_fits, rounds=1, iterations=1)
    ratio = sequential / stacked
    benchmark.extra_info.update({"models": K, "sequential_cpu_s": sequential, "stacked_cpu_s": stacked,
                                 "speedup": ratio, "threads": torch.get_num_threads()})
    print(f"\n{config}: {K} models sequential {sequential:.2f}s, stacked {stacked:.2f}s (CPU time, best of "
          f"{ROUNDS}), speed-up x{ratio:.2f} ({torch.get_num_threads()} threads)")
    assert len(trained) == K and len({t.seed for t in trained}) == K
