"""The trajectory bound's per-step probes: sound over many simulated correct runs through the canaries' own counting
(and a probe larger than the one the observer subtracts, planted, is caught by the same check), withdrawn from every
release path (the engine's, Opacus', a declared loop's), and the power page rendered from its reference."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from privaudit.attacks.bounds.pooled_gdp import mu_lower_pooled
from privaudit.attacks.canaries.gradient_canary import GradientCanaries
from privaudit.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BETA = 0.05


def probed_runs(runs: int, *, m: int, steps: int, z: float, rate: float, planted: float = 1.0) -> np.ndarray:
    """The pooled per-step mu_lb of ``runs`` correct runs counted by :class:`GradientCanaries` with probes: each
    step's centred observation is the sampled canaries, the probes (``planted`` times the +-Delta / 2 the observer
    subtracts) and N(0, (z Delta)^2) noise, Delta = 1."""
    out = np.empty(runs)
    for r in range(runs):
        can = GradientCanaries(m, m, clip_norm=1.0, seed=r, score="sum", rate=rate, noise_std=z, probes=True)
        can.track_trajectory(0.5, "pooled")
        gen = torch.Generator().manual_seed(10_000 + r)
        for t in range(steps):
            sampled = torch.rand(m, generator=gen) < rate
            probe = can.step_probes()
            value = (torch.as_tensor(can.inserted) & sampled).double() + planted * probe / 2
            noisy = torch.zeros(m, dtype=torch.float64)
            noisy[torch.as_tensor(can.directions)] = value
            can.observe(t, noisy + z * torch.randn(m, generator=gen, dtype=torch.float64), sampled.numpy(), probe)
        tr = can.trajectory
        assert tr.n0 + tr.n1 == m * steps
        out[r] = float(mu_lower_pooled(tr.fp, tr.n0, tr.fn, tr.n1, beta=BETA))
    return out


def test_probe_trials_are_sound_over_runs_and_a_larger_probe_planted_is_caught():
    """950 correct runs (tests/soundness.py: the check then rejects a bound over-claiming on twice beta of them with
    probability >= 0.9) of 200 canaries over 4 steps, counted by the canaries' own code: at most the stated share of
    their mu_lb exceed the claim's mu, and the shared x1.2 plant is rejected. A probe inserted 1.25 times larger than
    the one the observer subtracts (the trials' difference then exceeds the sensitivity) over-claims, and the same check
    rejects it. About 5 s."""
    from soundness import assert_planted_rejected, assert_sound, rejects, runs_for_power, TARGET_POWER

    z, runs = 1.0, runs_for_power(BETA)
    mu = probed_runs(runs, m=200, steps=4, z=z, rate=0.05)
    assert_sound("trajectory bound, per-step probes", mu, 1.0 / z, BETA, min_power=TARGET_POWER)
    assert_planted_rejected("trajectory bound, per-step probes", mu, 1.0 / z, BETA)
    planted = probed_runs(200, m=200, steps=4, z=z, rate=0.05, planted=1.25)
    assert rejects(planted, 1.0 / z, BETA)


def test_the_one_run_scores_leave_the_probes_out_and_the_signs_are_required():
    """With probes the scores are the canaries' alone (the probes subtracted); a step without its signs is refused."""
    m = 50
    can = GradientCanaries(m, m, clip_norm=2.0, seed=3, score="sum", rate=0.5, noise_std=1.0, probes=True)
    probe = can.step_probes()
    assert set(probe.tolist()) <= {-1.0, 1.0} and probe.shape == (m,)
    noisy = torch.zeros(m, dtype=torch.float64)
    noisy[torch.as_tensor(can.directions)] = 2.0 * torch.as_tensor(can.inserted).double() + probe * 1.0
    can.observe(0, noisy, np.ones(m, dtype=bool), probe)
    assert np.allclose(can.scores, 2.0 * can.inserted)
    with pytest.raises(ConfigError, match="probe signs"):
        can.observe(1, noisy, np.ones(m, dtype=bool))
    plain = GradientCanaries(m, m, clip_norm=2.0, seed=3, score="sum")
    assert plain.step_probes() is None


def test_the_engines_release_withdraws_its_probes_after_the_observer():
    """The engine's release (defenses/dp/release/step.py): the observer sees the probes; the released gradient is the
    one
    without them (same noise), so the model trains as without probes."""
    from privaudit.defenses.dp.release.step import dirac_canaries, release

    total = torch.randn(40, dtype=torch.float32)
    coords, include = torch.arange(0, 40, 2), torch.zeros(20, dtype=torch.bool)
    include[:5] = True
    probes = (torch.randint(0, 2, (20,), generator=torch.Generator().manual_seed(1)).double() * 2 - 1) * 0.5
    seen = []
    plain = release(total, 1.0, torch.Generator().manual_seed(7), normalizer=4.0, canary_bound=1.0,
                    canaries=dirac_canaries(coords, 1.0, include, centred=True))
    probed = release(total, 1.0, torch.Generator().manual_seed(7), normalizer=4.0, canary_bound=1.0,
                     canaries=dirac_canaries(coords, 1.0, include, observer=seen.append, centred=True, probes=probes))
    assert torch.allclose(probed.gradient, plain.gradient, atol=1e-6)
    noise = seen[0].double() - dirac_canaries(coords, 1.0, include).total(40, 1.0, device="cpu",
                                                                         dtype=torch.float64)
    assert torch.allclose(noise[coords], (plain.gradient.double() * 4 - total.double())[coords] - include.double()
                          + probes, atol=1e-5)
    with pytest.raises(ConfigError, match="exceeds the mechanism's sensitivity"):
        release(total, 1.0, torch.Generator().manual_seed(7), canary_bound=1.0,
                canaries=dirac_canaries(coords, 1.0, include, probes=probes * 3))


class _Kept:
    """A planted hook: its probes enter the sum but are never withdrawn from the release."""

    def __init__(self, canaries):
        self.c = canaries

    def __getattr__(self, name):
        return None if name == "withdrawal" else getattr(self.c, name)

    def withdrawal(self, *args, **kwargs):
        return None


def _weights_under_probes(module, x, y, plant: bool) -> tuple[torch.Tensor, list[float]]:
    """The recipe's weights trained under a watch whose canaries take part in no step but probe every coordinate."""
    from privaudit.defenses.dp.release.step import dirac_canaries
    from privaudit.defenses.watch.opacus_watch import OpacusWatch

    torch.manual_seed(0)
    net, seen = module.make_net(), []
    dim = sum(p.numel() for p in net.parameters())
    coords, gen = torch.arange(dim), torch.Generator().manual_seed(5)

    def source(t):
        probe = torch.randint(0, 2, (dim,), generator=gen).double() - 0.5
        hook = dirac_canaries(coords, 1.0, torch.zeros(dim, dtype=torch.bool), centred=True, probes=probe,
                              observer=lambda noisy: seen.append(float((noisy.double() - probe).std())))
        return _Kept(hook) if plant else hook
    with OpacusWatch(len(x), canaries=source, names={id(p): n for n, p in net.named_parameters()}):
        module.train(net, x, y, seed=0)
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]), seen


@pytest.mark.parametrize("recipe", ["opacus_recipe", "plain_dp_loop"])
def test_a_watched_run_with_probes_trains_the_unwatched_runs_model(members, monkeypatch, recipe):
    """Through Opacus' optimizer step and a declared release alike (14 releases): canaries that take part in no step
    but probe every coordinate at every step leave the trained weights those of the unwatched run (float rounding
    apart), while the observer saw them; the probes planted without their withdrawal move the weights far more.
    About 2 s."""
    import importlib

    sys.path.insert(0, str(ROOT / "examples"))
    module = importlib.import_module(recipe)
    monkeypatch.setattr(module, "EPOCHS" if recipe == "opacus_recipe" else "STEPS", 1 if recipe == "opacus_recipe"
                        else 14)
    module.noise_multiplier.cache_clear()
    torch.set_num_threads(1)
    data = np.load(members)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    torch.manual_seed(0)
    net = module.make_net()
    module.train(net, x, y, seed=0)
    alone = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    probed, seen = _weights_under_probes(module, x, y, plant=False)
    kept, _ = _weights_under_probes(module, x, y, plant=True)
    module.noise_multiplier.cache_clear()
    assert len(seen) == 14 and min(seen) > 0.3  # the observer saw the noise once the probes are subtracted
    assert float((probed - alone).abs().max()) < 1e-5
    assert float((kept - alone).abs().max()) > 100 * float((probed - alone).abs().max()) + 1e-3


def test_the_power_page_is_its_references_render_and_a_row_is_reproduced():
    """docs/trajectory-power.md is the committed reference's render, and its cheapest rows (100 steps, 1000 canaries)
    are what the simulation gives again (seeded). About 2 s."""
    import json

    sys.path.insert(0, str(ROOT / "scripts"))
    import render_trajectory_power as page

    from privaudit.attacks.bounds.trajectory_power import power_row

    reference = json.loads(page.REFERENCE.read_text(encoding="utf-8"))
    real = json.loads(page.REAL.read_text(encoding="utf-8"))
    assert page.PAGE.read_text(encoding="utf-8") == page.render(reference, real)
    # the real run's row: its bound over the claim is what its report says, and the simulation's row beside it
    assert real["ratio_to_claim"] == pytest.approx(real["eps_lower_bound"] / real["accountants"]["rdp"], rel=1e-12)
    assert page.simulated(reference, real) == pytest.approx(0.858, abs=5e-4)
    rows = [r for s in reference["settings"] for r in s["rows"] if r["steps"] == 100 and r["canaries"] == 1000]
    assert len(rows) == 2
    for row in rows:
        again = power_row(row["design"], z=row["multiplier"], q=row["rate"], steps=100, m=1000,
                          delta=reference["delta"], runs=reference["runs"], coarsening=row["coarsening"]).to_dict()
        assert again.pop("design") == row["design"]
        assert again == pytest.approx({k: row[k] for k in again}, rel=1e-9)
