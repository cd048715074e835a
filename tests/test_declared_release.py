"""``privaudit.declare_release``: a plain PyTorch loop that adds its own noise is audited by audit-training with the
same trace and canary checks as an Opacus recipe; its planted bugs are named; a loop that declares nothing is refused
in one line (exit 2, nothing written)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import privaudit
from privaudit.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))

from training_audit_helpers import audit_recipe  # noqa: E402

pytestmark = pytest.mark.usefixtures("opacus_rdp_memo")


@pytest.fixture(autouse=True)
def _short_loop(monkeypatch):
    import plain_dp_loop

    torch.set_num_threads(1)
    monkeypatch.setattr(plain_dp_loop, "STEPS", 14)
    plain_dp_loop.noise_multiplier.cache_clear()
    yield
    plain_dp_loop.noise_multiplier.cache_clear()


def audit(members: Path, train: str, **kw):
    return audit_recipe("plain_dp_loop:make_net", members, train, **kw)


def test_outside_an_audit_the_block_only_runs_the_loops_code():
    s = torch.ones(5)
    with privaudit.declare_release([s], noise_multiplier=2.0, clip_norm=1.0, sample_rate=0.1):
        s.add_(1.0)
    assert torch.equal(s, torch.full((5,), 2.0))


@pytest.mark.parametrize("field, kw", [("noise_multiplier", {"noise_multiplier": 0.0}),
                                       ("sample_rate", {"sample_rate": 1.5}), ("clip_norm", {"clip_norm": -1.0})])
def test_a_declaration_that_cannot_be_a_gaussian_release_names_its_field(field, kw):
    args = {"noise_multiplier": 1.0, "clip_norm": 1.0, "sample_rate": 0.1, **kw}
    with pytest.raises(ConfigError, match=f"declare_release: {field}"):
        with privaudit.declare_release([torch.zeros(3)], **args):
            pass


def test_the_watch_records_each_declared_release(members):
    import plain_dp_loop

    from privaudit.defenses.watch.opacus_watch import OpacusWatch

    data = np.load(members)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    net = plain_dp_loop.make_net()
    with OpacusWatch(len(x), names={id(p): n for n, p in net.named_parameters()}) as watch:
        accountant = plain_dp_loop.train(net, x, y, seed=0)
    z = plain_dp_loop.noise_multiplier()
    assert len(watch.steps) == accountant.history[0][2] == 14
    assert [n for n, _ in watch.optimizer["tensors"]] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert all(r.accountant == [(z, plain_dp_loop.SAMPLE_RATE)] for r in watch.steps)
    assert all(r.unit_norm_max <= 1.0 + 1e-5 and r.units == r.batch for r in watch.steps)
    dim = sum(k for _, k in watch.optimizer["tensors"])
    ratio = np.array([r.noise_norm for r in watch.steps]) / (z * dim ** 0.5)
    assert np.all(np.abs(ratio - 1) < 0.05), ratio  # the noise measured is the noise the loop added
    trace = watch.trace(plain_dp_loop.SAMPLE_RATE)
    assert trace.sampler == "poisson" and trace.sample_rate == plain_dp_loop.SAMPLE_RATE
    assert set(trace.columns["normalizer"]) == {64.0} and sum(trace.sampling["sizes"]) == sum(
        r.batch for r in watch.steps)


def test_an_honest_plain_loop_is_not_refuted(members):
    a = audit(members, "plain_dp_loop:train")
    assert a.verdict.verdict == "not refuted" and not a.findings, a.findings
    assert 0 < a.canary["eps_lb_trajectory"] < a.claim.epsilon


@pytest.mark.parametrize("plant, check", [("shortfall", "trace: noise_norm"),
                                          ("reused_noise", "noise independence across steps"),
                                          ("tiled_noise", "trace: noise_law")])
def test_each_planted_bug_of_a_plain_loop_is_refuted_naming_its_check(members, plant, check):
    a = audit(members, f"plain_loop_plants:train_{plant}")
    assert a.verdict.verdict == "refuted" and check in {f["check"] for f in a.findings}, a.findings


def test_a_loop_with_no_declared_release_is_one_line_exit_2_and_writes_nothing(members, tmp_path):
    from privaudit.audit.cli import main

    out = tmp_path / "out"
    with pytest.raises(ConfigError, match="nor a declared release") as err:
        audit(members, "plain_loop_plants:train_undeclared", out=out)
    assert "\n" not in str(err.value) and not out.exists()
    code = main(["audit-training", "--factory", "plain_dp_loop:make_net", "--train-fn",
                 "plain_loop_plants:train_undeclared", "--members", str(members), "--delta", "1e-5", "--out", str(out)])
    assert code == 2 and not out.exists()
