"""ResNet-18 (GroupNorm + weight standardisation, ``ResNet18GN``) through every DP method's engine.

Default run, a tiny ResNet-18 (width 4, 3 x 8 x 8 inputs): each DP method's clipped sum (its privatized
quantity ``gradient``) from the layerwise engine -- in one pass and cut into chunks by a shrunken memory
budget -- equals the vmap reference, and the model is served with no fallback; Opacus and DP-FedEmb train it.

Slow (``-m slow``), the CIFAR ResNet-18 (width 64, 11.2M parameters) at 3 x 32 x 32, batch 64 on the CPU and 64
and 256 on a GPU (``RESNET_BENCH_BATCHES``, ``RESNET_BENCH_WIDTH``, ``RESNET_BENCH_METHODS``, ``RESNET_BENCH_INPUT`` and
``RESNET_BENCH_DEVICE`` override: ``RESNET_BENCH_DEVICE=cuda`` times the steps on a GPU): each method's DP step
against the same model's non-private step on the same examples, CPU time and peak tensor memory
(:mod:`memtrack`), ratios from one run (non-private steps before and after the DP step; the DP step runs once,
timed and memory-tracked at once), with the engine each step used, its chunks, and the per-layer plan.
Non-private counterparts: two-view SimCLR (DP-SGD, batch clipping, DPCL, Logit-DP), DP-GCL's own objective
(three views), one cross-entropy SGD step on the round's examples (DP-FedEmb, one local step per client) and
on the batch (Opacus' DP-SGD classifier).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import privaudit.defenses.dp.engine.chunked as chunked
import privaudit.defenses.dp.engine.layerwise as layerwise
from memtrack import peak_bytes
from privaudit.core.datasets.registry import DatasetInfo, RawDataset
from privaudit.core.datasets.splits import SplitConfig, make_splits
from privaudit.defenses import Budget, make_defense
from privaudit.defenses.dp import Embedder, Source
from privaudit.defenses.dp.engine.engine_plan import layer_plan
from test_dp_benchmarks import dp_run, gcl_objective_step, nonprivate_step

DP_METHODS = ("dpsgd", "dp-clip", "dpcl-simclr", "dpcl-barlow", "dp-gcl", "logit-dp")


def synthetic(size: int, n: int = 600, seed: int = 0, channels: int = 3):
    """Random ``channels`` x size x size images and labels (the step's cost does not depend on the pixels)."""
    info = DatasetInfo(f"synthetic-{channels}x{size}", channels, size, 10, "rgb" if channels == 3 else "grey",
                       "random images")
    rng = np.random.default_rng(seed)
    raw = RawDataset(info, rng.integers(0, 256, (n, channels, size, size), dtype=np.uint8), rng.integers(0, 10, n),
                     np.arange(n) >= n - 50)
    return make_splits(raw, seed, SplitConfig(public=0.05, shadow=0.05))


def resnet_params(name: str, width: int, batch: int) -> dict:
    """ResNet-18 with the CIFAR suites' heads (512-dim representation, 128-dim embedding; Logit-DP's 8, its
    App. B.1), random init, one epoch; DP-GCL with the paper's group size 16."""
    params = {"encoder": "resnet18", "width": width, "rep_dim": 8 * width, "proj_hidden": 8 * width,
              "proj_dim": 8 if name == "logit-dp" else 128, "init": "random", "batch_size": batch, "epochs": 1}
    if name == "dp-gcl":
        params["group_size"] = 16
    return params


# -- default run: a tiny ResNet-18 through every engine ------------------------------------------------------------

TINY = 4  # first stage's channels


@pytest.fixture(scope="module")
def tiny_data():
    return synthetic(8, n=160)


def resnet(name: str, params: dict, data) -> torch.nn.Module:
    """The model the defense ``name`` with ``params`` trains (seed 0)."""
    defense = make_defense(name, params)
    return defense.build(defense.model_spec(data.info), 0)


def gradient(name: str, params: dict, data, engine: str) -> torch.Tensor:
    fn = make_defense(name, {**params, "engine": engine}).quantity_function(data, seed=0)("gradient")
    return fn(data.train.x[:4], 3)


@pytest.mark.parametrize("name", DP_METHODS)
def test_tiny_resnet18_goes_through_every_engine_and_matches_vmap(monkeypatch, tiny_data, name):
    """The layerwise engine serves ResNet18GN (residual blocks, shortcuts, GroupNorm, WS convolutions): no
    layer without a rule, and its clipped sums -- one pass, then units and rows in chunks -- equal vmap's."""
    params = resnet_params(name, TINY, 4)
    emb = Embedder(resnet(name, params, tiny_data))
    plans = layer_plan(emb, emb.params(), tiny_data.train.x[:1])
    assert not isinstance(plans, str), plans  # a string is the reason the engine declines the model
    assert {p.kind for p in plans} == {"WSConv2d", "GroupNorm", "Linear"}
    assert any("shortcut" in p.name for p in plans)
    ref = gradient(name, params, tiny_data, "vmap")
    one_pass = gradient(name, params, tiny_data, "layerwise")
    assert float((one_pass - ref).norm() / ref.norm()) < 1e-4
    per_row = chunked.row_bytes(emb, emb.params(), Source(tiny_data.train.x[:1]))
    monkeypatch.setattr(chunked, "GRAD_BYTES", 2 * 4 * emb.space.size)  # two units' gradients
    monkeypatch.setattr(chunked, "ROW_BYTES", 8 * per_row)  # eight recorded rows (Logit-DP: blocks of 1-2 rows)
    monkeypatch.setattr(layerwise, "MEMORY_LIMIT", 1)  # dense units: no single pass
    chunks = gradient(name, params, tiny_data, "layerwise")
    assert float((chunks - ref).norm() / ref.norm()) < 1e-4


def test_tiny_resnet18_trains_with_opacus_and_dp_fedemb(tiny_data):
    opacus = make_defense("opacus-dpsgd", {"encoder": "resnet18", "width": TINY, "epochs": 1, "batch_size": 24,
                                           "max_physical_batch_size": 8})
    trained = opacus.fit(tiny_data, Budget(noise_multiplier=1.0), 0)
    assert trained.extras["steps"] >= 1
    fedemb = make_defense("dp-fedemb", {"encoder": "resnet18", "width": TINY, "rep_dim": 32, "pretrain": False,
                                        "rounds": 1, "clients_per_round": 4, "users_per_client": 1, "client_chunk": 2, "local_steps": 1,
                                        "local_batch_size": 4, "examples_per_user": 4})
    trained = fedemb.fit(tiny_data, Budget(noise_multiplier=1.0), 0, progress=False)
    assert len(trained.history["loss"]) == 1


# -- slow: the full ResNet-18 at batch 64 (and 256 on a GPU) ---------------------------------------------------------

def _env_list(name: str, default: str) -> list[str]:
    return [v for v in os.environ.get(name, default).split(",") if v]


#: ``cpu`` (CPU time, peak from the memory tracker) or ``cuda`` (wall time between synchronisations after a
#: warm-up step -- ``RESNET_BENCH_WARMUP=0`` skips it for steps too long to run twice -- and the peak from
#: CUDA's allocator above what was allocated before the step).
DEVICE = os.environ.get("RESNET_BENCH_DEVICE", "cpu")
#: Batch 64 on the CPU (minutes per method; batch 256 there is about an hour for DP-SGD alone, so `.ci/slow` would not
#: finish on a 2-core machine: ask for it with ``RESNET_BENCH_BATCHES=64,256``); 64 and 256 on a GPU.
BATCHES = [int(b) for b in _env_list("RESNET_BENCH_BATCHES", "64" if DEVICE == "cpu" else "64,256")]
WIDTH = int(os.environ.get("RESNET_BENCH_WIDTH", "64"))
METHODS = _env_list("RESNET_BENCH_METHODS", ",".join(DP_METHODS + ("dp-fedemb", "opacus-dpsgd")))
#: input ``CxS``: 3x32 (CIFAR-10) or 1x28 (Fashion-MNIST, as suites/fashion-mnist-full.toml trains it).
CHANNELS, SIZE = (int(v) for v in os.environ.get("RESNET_BENCH_INPUT", "3x32").split("x"))


def step_seconds(step) -> float:
    """CPU seconds of one run of ``step`` (on CUDA: wall seconds between synchronisations)."""
    if DEVICE != "cpu":
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        return time.perf_counter() - start
    start = time.process_time()
    step()
    return time.process_time() - start


def tracked(step) -> tuple[float, float]:
    """(seconds, peak MB) of one run of ``step``: on the CPU under the memory tracker; on CUDA after a warm-up
    run (kernel selection, allocator growth), the allocator's peak above the memory held before the step."""
    if DEVICE == "cpu":
        box = {}
        start = time.process_time()
        peak = peak_bytes(lambda: box.setdefault("out", step()))
        return time.process_time() - start, peak / 1e6
    if os.environ.get("RESNET_BENCH_WARMUP", "1") != "0":
        step_seconds(step)
    held = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    seconds = step_seconds(step)
    return seconds, (torch.cuda.max_memory_allocated() - held) / 1e6


def dp_and_nonprivate(name: str, data, batch: int):
    """(DP step, its non-private counterpart, a callable giving the engine record) for ``name`` at ``batch``."""
    idx = torch.arange(batch)
    if name == "dp-fedemb":
        return fedemb_steps(data, batch)
    if name == "opacus-dpsgd":
        return opacus_steps(data, batch)
    params = resnet_params(name, WIDTH, batch)
    run, step = dp_run(data, name, params, DEVICE)
    if name == "dp-gcl":
        base = gcl_objective_step(data, idx, params, DEVICE)
    else:
        base = nonprivate_step(data, {k: params[k] for k in ("encoder", "width", "rep_dim", "proj_hidden", "proj_dim")},
                               idx, DEVICE)

    def engine() -> str:
        counter = run.extras["dp"]["overflow_counter"]
        chunks = "; ".join(counter.get("chunks", {}))
        return " + ".join(sorted(counter["engines"])) + (f" [{chunks}]" if chunks else "")
    return (lambda: step(idx)), base, engine


def fedemb_steps(data, batch: int):
    """One DP-FedEmb round (one local step of 16 examples per virtual client, batch / 16 clients, 4 trained at
    once) against one cross-entropy SGD step on the round's examples."""
    from privaudit.defenses.nn.model import build_model
    from privaudit.defenses.training.seeding import torch_generator

    clients = max(1, batch // 16)
    defense = make_defense("dp-fedemb", {"encoder": "resnet18", "width": WIDTH, "rep_dim": 8 * WIDTH,
                                         "pretrain": False, "clients_per_round": clients, "users_per_client": 1,
                                         "local_steps": 1, "local_batch_size": 16, "examples_per_user": 16,
                                         "client_chunk": 4})
    model = build_model(defense.config.model_spec(data.info), seed=0).to(DEVICE)
    users = defense.users(data, 0)
    plan = next(defense.round_plans(len(users), 0))
    gens = {k: torch_generator(0, "fedemb", k) for k in ("batches", "heads", "noise", "clip")}
    x, y = data.train.x.to(DEVICE), data.train.y.to(DEVICE)
    step = lambda: defense.run_round(model.encoder, None, plan, users, x, y, 10, 0.2, 1.0, gens)  # noqa: E731
    rows = torch.cat(plan.client_examples(users))[:clients * 16]
    return step, cross_entropy_step(model.encoder, 8 * WIDTH, x[rows], y[rows]), \
        lambda: f"vmap over clients (stacked backbones, {defense.config.client_chunk} at a time)"


def cross_entropy_step(encoder, dim: int, x, y):
    head = torch.nn.Linear(dim, 10).to(DEVICE)
    opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.01)

    def step():
        opt.zero_grad()
        F.cross_entropy(head(encoder(x)), y).backward()
        opt.step()
    return step


def opacus_steps(data, batch: int):
    """Opacus' DP-SGD step (its grad samplers; physical batches of 64 rows as its BatchMemoryManager takes them)
    against the same classifier's non-private cross-entropy step."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    from privaudit.defenses.nn.classifier import ClassifierNet
    from privaudit.defenses.nn.model import ModelSpec, build_model
    from privaudit.defenses.supervised import build_head

    spec = ModelSpec(encoder="resnet18", in_shape=data.info.shape, width=WIDTH, rep_dim=8 * WIDTH)
    net = ClassifierNet(build_model(spec, seed=0).encoder, build_head(spec.rep_dim, 10, 0)).to(DEVICE)
    private = GradSampleModule(net)
    opt = DPOptimizer(torch.optim.SGD(private.parameters(), lr=0.01), noise_multiplier=1.0, max_grad_norm=1.0,
                      expected_batch_size=batch)
    x, y = data.train.x[:batch].to(DEVICE), data.train.y[:batch].to(DEVICE)

    def step():
        parts = list(range(0, batch, 64))
        for k, start in enumerate(parts):
            opt.signal_skip_step(do_skip=k < len(parts) - 1)
            F.cross_entropy(private(x[start:start + 64]), y[start:start + 64]).backward()
            opt.step()
            opt.zero_grad()  # as BatchMemoryManager: clears the per-example gradients, keeps the clipped sums
    plain = ClassifierNet(build_model(spec, seed=0).encoder, build_head(spec.rep_dim, 10, 0)).to(DEVICE)
    sgd = torch.optim.SGD(plain.parameters(), lr=0.01)

    def base():
        sgd.zero_grad()
        F.cross_entropy(plain(x), y).backward()
        sgd.step()
    return step, base, lambda: ("opacus grad samplers (functorch for WSConv2d): per-example gradients of every layer "
                                "materialised, 64 rows x p per physical batch")


@pytest.mark.slow  # the full ResNet-18 on CPU: minutes per method at batch 64 (256: about an hour for DP-SGD)
@pytest.mark.parametrize("batch", BATCHES)
def test_resnet18_dp_step_vs_nonprivate(benchmark, batch):
    data = synthetic(SIZE, n=4 * batch + 200, channels=CHANNELS)
    rows = {}
    for name in METHODS:
        dp, base, engine = dp_and_nonprivate(name, data, batch)
        t_base_first, base_mb = tracked(base)
        t_dp, dp_mb = tracked(dp)
        t_base = min(t_base_first, step_seconds(base))
        rows[name] = (t_dp, t_base, dp_mb, base_mb, engine())
        print(f"\n  {name:13s} batch {batch}: DP step {t_dp:9.3f} s, non-private {t_base:7.3f} s, ratio "
              f"{t_dp / t_base:6.1f}x; peak {dp_mb:7.0f} MB vs {base_mb:6.0f} MB ({dp_mb / base_mb:4.1f}x); "
              f"engine {rows[name][4]}", flush=True)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update({**{f"time_ratio[{k}]": v[0] / v[1] for k, v in rows.items()},
                                 **{f"peak_mb[{k}]": v[2] for k, v in rows.items()},
                                 **{f"nonprivate_peak_mb[{k}]": v[3] for k, v in rows.items()},
                                 **{f"engine[{k}]": v[4] for k, v in rows.items()}, "load": os.getloadavg()[0],
                                 "device": DEVICE, "input": f"{CHANNELS}x{SIZE}"})
    emb = Embedder(resnet("dp-gcl", resnet_params("dp-gcl", WIDTH, batch), data))
    plan = layer_plan(emb, emb.params(), data.train.x[:1], pairs=(batch, batch), copies=7)
    clock = "CPU time" if DEVICE == "cpu" else f"wall time on {torch.cuda.get_device_name()}"
    print(f"\nResNet-18 (width {WIDTH}) at {CHANNELS} x {SIZE} x {SIZE}, batch {batch}, {clock} "
          f"(load {os.getloadavg()[0]:.1f}); "
          "per-layer plan (unit gradients; Logit-DP's Gram form at n = m = batch, K = 7):\n  "
          + "\n  ".join(p.line() for p in plan))
    assert all(v[4] for v in rows.values())  # every step says which engine ran (and why, for vmap)
    # every method's step under 8 GB on the CPU (on a GPU, 8 GB per chunked.budget_scale: 16 GiB of its memory)
    assert all(v[2] < 8000 * chunked.budget_scale(torch.device(DEVICE)) for v in rows.values())
