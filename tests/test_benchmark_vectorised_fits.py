"""Vectorisation benchmarks: batched head fits (ALM sensitivity sampler) and vmapped virtual clients."""

import copy
import time

import torch
import torch.nn.functional as F

from privaudit.defenses.alm.head import HeadProblem, fit_heads, newton_solve
from privaudit.defenses.fedemb.local import local_train, stack_params
from privaudit.defenses.nn.model import ModelSpec, build_model
import pytest

# slow: a timing benchmark runs alone, with `.ci/slow` (pytest -m slow, one process): the default run (pytest -n 2)
# shares the cores between workers and disables pytest-benchmark's timer, so its timings would mean nothing.
pytestmark = pytest.mark.slow


def _timed(fn, repeat=1):
    """Best wall time of ``repeat`` calls (the machine is shared: the minimum is the stable statistic)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def test_benchmark_batched_remove_one_fits(benchmark):
    """The m retrainings of ALM Algorithm 2: one batched Newton-CG solve vs a loop of separate solves."""
    g = torch.Generator().manual_seed(0)
    n, d, k, fits = 200, 16, 10, 24
    y = torch.randint(0, k, (n,), generator=g)
    x = torch.randn(k, d, generator=g)[y] + torch.randn(n, d, generator=g)
    problem = HeadProblem.from_features(x, y, k, 0.1)
    ref = newton_solve(problem, torch.ones(n, dtype=torch.float64))
    weights = torch.ones(fits, n, dtype=torch.float64)
    weights[torch.arange(fits), torch.arange(fits)] = 0
    batched = benchmark.pedantic(lambda: fit_heads(problem, weights, reference=ref[:2]), rounds=3, iterations=1)
    loop = _timed(lambda: [newton_solve(problem, w) for w in weights])
    ratio = loop / benchmark.stats.stats.min
    benchmark.extra_info["loop_over_batched"] = ratio
    print(f"\n{fits} remove-one head fits: batched {benchmark.stats.stats.min:.3f}s, separate Newton solves "
          f"{loop:.3f}s, ratio {ratio:.1f}x")
    assert batched.max_grad_norm <= 1e-9


def test_benchmark_vmapped_virtual_clients(benchmark):
    """DP-FedEmb local training: all virtual clients in one vmap vs one client after another."""
    spec = ModelSpec(encoder="cnn", in_shape=(1, 8, 8), width=8, rep_dim=32)
    encoder = build_model(spec, seed=0).encoder
    g = torch.Generator().manual_seed(0)
    c, steps, b = 8, 3, 16
    x = torch.rand(c, steps, b, 1, 8, 8, generator=g)
    y = torch.randint(0, 4, (c, steps, b), generator=g)
    heads = torch.randn(c, 4, 32, generator=g) * 0.1
    mask = torch.ones(c, 4, dtype=torch.bool)
    start = {n: p.detach() for n, p in encoder.named_parameters()}

    def together():
        return local_train(encoder, stack_params(start, c), heads, x, y, mask, lr_backbone=0.05, lr_head=0.5)

    def one_by_one():
        """The plain implementation: a module copy per client, ordinary autograd and SGD."""
        for i in range(c):
            model = copy.deepcopy(encoder)
            head = torch.nn.Parameter(heads[i].clone())
            opt = torch.optim.SGD([{"params": model.parameters(), "lr": 0.05}, {"params": [head], "lr": 0.5}])
            for step in range(steps):
                opt.zero_grad()
                F.cross_entropy(model(x[i, step]) @ head.T, y[i, step]).backward()
                opt.step()

    benchmark.pedantic(together, rounds=3, iterations=1, warmup_rounds=1)
    loop = _timed(one_by_one, repeat=3)
    ratio = loop / benchmark.stats.stats.min
    benchmark.extra_info["loop_over_vmap"] = ratio
    print(f"\n{c} virtual clients x {steps} steps: vmap {benchmark.stats.stats.min:.3f}s, loop over clients "
          f"{loop:.3f}s, ratio {ratio:.2f}x")
