"""``privaudit audit-training``: an unmodified Opacus recipe watched as it runs, its neighbours replayed, its planted
bugs named, and bad input refused in one line with nothing written."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from privaudit.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))

from junit_check import read_junit  # noqa: E402
from training_audit_helpers import audit_recipe  # noqa: E402


pytestmark = pytest.mark.usefixtures("short_recipe", "opacus_rdp_memo")


def audit(members: Path, train: str, **kw):
    return audit_recipe("opacus_recipe:make_net", members, train, **kw)


def test_watch_records_every_release_of_the_honest_recipe(members):
    import opacus_recipe

    from privaudit.defenses.watch.opacus_watch import OpacusWatch

    data = np.load(members)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    with OpacusWatch(len(x)) as watch:
        accountant = opacus_recipe.train(opacus_recipe.make_net(), x, y, seed=0)
    steps = accountant.history[0][2]
    assert len(watch.steps) == steps == 14
    assert watch.loader["sampler"] == "poisson" and watch.loader["sample_rate"] == pytest.approx(1 / 14)
    trace = watch.trace(1 / 14)
    assert set(trace.columns["normalizer"]) == {64.0}
    assert all(v <= 1.0 + 1e-5 for v in trace.columns["unit_norm_max"])
    assert all(r.accountant == [(opacus_recipe.noise_multiplier(), 1 / 14)] for r in watch.steps)
    assert sum(trace.sampling["sizes"]) == sum(r.batch for r in watch.steps)
    # each batch is streamed into the sampling record; only the first release keeps its indices (the replays' own)
    assert watch.steps[0].indices is not None and all(r.indices is None for r in watch.steps[1:])
    from opacus.optimizers.optimizer import DPOptimizer

    assert "pre_step" in DPOptimizer.__dict__ and DPOptimizer.pre_step.__qualname__ == "DPOptimizer.pre_step"


def test_honest_recipe_is_not_refuted(members, tmp_path):
    a = audit(members, "opacus_recipe:train", out=tmp_path / "out")
    assert a.verdict.verdict == "not refuted" and not a.findings, a.findings
    from privaudit.audit.junit import write_junit
    from privaudit.audit.user.junit import training_cases

    totals, cases = read_junit(write_junit(tmp_path / "junit.xml", "privaudit audit-training", training_cases(a)))
    assert totals["failures"] == totals["errors"] == 0 and {c.outcome for c in cases} == {"passed"}
    assert cases[0].name == "trajectory bound" and "claim: epsilon " in cases[0].out
    assert a.canary["eps_lb_trajectory"] > 0 and a.canary["eps_lb_trajectory"] < a.claim.epsilon
    assert (tmp_path / "out" / "report.html").is_file() and (tmp_path / "out" / "trace.json").is_file()
    from privaudit.audit.user.training.training_report import clipping_note, notes

    assert "clipping as applied: observed on 14 of 14 releases; the largest clipped unit" in "\n".join(notes(a))
    unseen = clipping_note({"unit_norm_max": [None, None], "clip": 1.0})
    assert unseen.startswith("clipping as applied: not observed on any of the 2 releases"), unseen


# the shuffled plant (trace: sampler) runs through the command line in
# test_a_shuffled_recipe_prints_one_line_per_failing_check_and_its_junit_fails_them
@pytest.mark.parametrize("plant, check", [("shortfall", "trace: noise_multiplier"), ("reused_noise", "trace: noise"),
                                          ("clip_mismatch", "trace: unit_norm"),
                                          ("missing_noise", "noise per tensor"), ("spared_clip", "trace: unit_norm"),
                                          ("tensor_reused_noise", "trace: noise"),
                                          ("ghost_clip_mismatch", "trace: unit_norm"),
                                          ("ghost_norm_missing_layer", "trace: unit_norm"),
                                          ("ghost_late_clip_mismatch", "trace: unit_norm"),
                                          ("adaclip_clip_mismatch", "trace: unit_norm"),
                                          ("antithetic_noise", "trace: noise_law")])
def test_each_planted_bug_is_refuted_naming_its_check(members, plant, check):
    a = audit(members, f"opacus_plants:train_{plant}")
    assert a.verdict.verdict == "refuted" and check in {f["check"] for f in a.findings}, a.findings


@pytest.mark.parametrize("plant, moved", [("adaclip_growing", lambda first, last: last > 2 * first),
                                          ("adaclip_shrinking", lambda first, last: last < first / 2)])
def test_an_adaptive_clip_is_checked_release_by_release_with_its_count_query_composed(members, plant, moved):
    """Opacus' AdaClipDPOptimizer, its accountant told the gradient and the count composed: each release's clip moves.
    Its largest clipped unit is checked against its own clip (in the first release's units), the canaries enter at
    each release's clip and are read in the first's units (no false finding from the noise's scale following the
    clip), and the count of unclipped units it noises beside the gradient is composed into each release's multiplier
    at the sensitivity one probe unit moved it by (1)."""
    from privaudit.audit.user.training.training_report import notes

    a = audit(members, f"opacus_plants:train_{plant}")
    clips = a.trace["sensitivity"]
    assert a.verdict.verdict == "not refuted" and not a.findings, a.findings
    assert moved(clips[0], clips[-1]), clips
    assert all(v <= clips[0] * (1 + 1e-5) for v in a.trace["unit_norm_max"])
    assert len(a.trace["other_queries"]) == len(clips) and {q["values"] for q in a.trace["other_queries"]} == {1}
    assert {q["name"] for q in a.trace["other_queries"]} == {"AdaClipDPOptimizer.unclipped_num"}
    assert {q["sensitivity"] for q in a.trace["other_queries"]} == {1.0}
    assert any(n.startswith("other Gaussian queries: the releases also noised AdaClipDPOptimizer.unclipped_num (14 "
                            "draws") and "composed with the gradient" in n for n in notes(a))


def test_a_size_derived_normaliser_is_found_by_replay(members, monkeypatch):
    """make_private's defaults: the rate and the normaliser follow len(data_loader) and len(dataset)."""
    import opacus_audit

    monkeypatch.setattr(opacus_audit, "EPOCHS", 1)
    from privaudit.audit.user.training.training_audit import audit_training

    from sklearn.datasets import load_digits

    digits = load_digits()  # 896 records: 14 batches of 64; 897 make 15
    np.savez(members, x=(digits.data[:896] / 16.0).astype(np.float32), y=digits.target[:896].astype(np.int64))
    a = audit_training("opacus_audit:make_net", "opacus_audit:train", members=members, delta=1e-5,
                       time_training=False, size_radius=1)
    found = {f["quantity"]: f for f in a.findings if f["check"] == "neighbours"}
    assert a.verdict.verdict == "refuted" and {"batches_per_epoch", "sample_rate"} <= set(found), a.findings
    assert found["batches_per_epoch"]["values"] == {"895": 14, "896": 14, "897": 15}
    # the first release with one record added: divided by int(897 / 15) = 59 instead of 64, it moves by over 5 clips;
    # with one removed (895 records: divided by int(895 / 14) = 63) by less: a normaliser off by one in 64
    moved = {f["values"]["neighbour"]: f["values"]["distance"] for f in a.findings
             if f["quantity"] == "release_distance"}
    assert moved["add"] > 5.0 and 1.0 < moved["remove"] < moved["add"] / 2, moved


@pytest.mark.parametrize("train, says", [("opacus_plants:train_raises", "raised RuntimeError: the user's bug"),
                                         ("opacus_plants:train_no_optimizer", "never released through an Opacus "
                                                                              "DPOptimizer")])
def test_bad_training_functions_are_one_line_and_write_nothing(members, tmp_path, train, says):
    from privaudit.audit.cli import main

    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=says) as err:
        audit(members, train, out=out)
    assert "\n" not in str(err.value) and not out.exists()
    code = main(["audit-training", "--factory", "opacus_recipe:make_net", "--train-fn", train, "--members",
                 str(members), "--delta", "1e-5", "--out", str(out)])
    assert code == 2 and not out.exists()


def test_a_shuffled_recipe_prints_one_line_per_failing_check_and_its_junit_fails_them(members, tmp_path, capsys):
    """Shuffled batches under Poisson accounting fail the sampler check at every step: one line says so (the report's
    JSON keeps every step), and the JUnit file's trace case fails with it."""
    from privaudit.audit.cli import main

    junit = tmp_path / "junit.xml"
    code = main(["audit-training", "--factory", "opacus_recipe:make_net", "--train-fn", "opacus_plants:train_shuffled",
                 "--members", str(members), "--delta", "1e-5", "--size-radius", "1", "--junit", str(junit)])
    lines = capsys.readouterr().out.splitlines()
    before = lines[:next(i for i, line in enumerate(lines) if line.startswith("trajectory bound:"))]
    assert code == 1 and lines[-1].startswith("verdict: refuted: the run is not the claim's mechanism")
    checks = [": ".join(line.split(": ")[:2 if line.startswith("trace: ") else 1]) for line in before]
    assert len(checks) == len(set(checks)) <= 4, before  # at most one line per failing check
    assert "trace: sampler: steps 1-14 (every step): sampled shuffled, the claim accounts poisson" in before
    totals, cases = read_junit(junit)
    failed = {c.name: c for c in cases if c.outcome == "failed"}
    assert totals["failures"] == len(failed) and set(failed) == {"trace"}, failed
    assert failed["trace"].message == next(line for line in before if line.startswith("trace: "))
    assert "trace: sampler: steps 1-14 (every step)" in failed["trace"].text
    assert {c.name for c in cases} >= {"trajectory bound", "neighbours", "released noise", "noise per tensor"}


def test_a_train_function_returning_anything_but_an_accountant_is_one_line_exit_2(members, tmp_path, capsys):
    from privaudit.audit.cli import main

    out = tmp_path / "out"
    code = main(["audit-training", "--factory", "opacus_recipe:make_net", "--train-fn",
                 "opacus_plants:train_returns_text", "--members", str(members), "--delta", "1e-5", "--size-radius",
                 "1", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists() and "\n" not in err, err
    assert err.startswith("privaudit: error: --train-fn 'opacus_plants:train_returns_text': returned str "
                          "'trained 1 epoch'; it must return its Opacus accountant"), err


def test_the_train_function_contract_accepts_an_opacus_accountant_or_nothing():
    from opacus.accountants import PRVAccountant, RDPAccountant

    from privaudit.audit.user.training.training_audit import returned_accountant

    for acc in (RDPAccountant(), PRVAccountant()):
        acc.history.append((1.1, 0.01, 10))
        assert returned_accountant(acc, "m:f") is acc
    assert returned_accountant(None, "m:f") is None
    from types import SimpleNamespace

    from privaudit.audit.user.training.training_audit import _claim

    stepped = _claim(None, SimpleNamespace(accountant=acc), 1e-5, None, "m:f")
    returned = _claim(acc, SimpleNamespace(accountant=None), 1e-5, None, "m:f")
    assert stepped.source.startswith("Opacus prv accountant the run stepped (the training function returned none): "
                                     "1.1 noise x 0.01 rate x 10 steps"), stepped.source
    assert returned.source.startswith("Opacus prv accountant the training function returned: ") and \
        returned.epsilon == stepped.epsilon
    for bad, shown in ((3, "returned int 3;"), (["x"], "returned list ['x'];"), (object(), "returned object <object")):
        with pytest.raises(ConfigError, match="--train-fn 'm:f': " + re.escape(shown)):
            returned_accountant(bad, "m:f")


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [8.0, 1.0])
def test_acceptance_honest_recipe_trajectory_bound(members, monkeypatch, epsilon):
    """15 epochs at epsilon 8 and 1, one run each: the trajectory bound at least 0.8 of the RDP accountant's epsilon
    (the claim; measured 0.888 and 0.866), and at least 0.95 of the most the bound reaches on a correct run (its
    optimistic PLD epsilon at the claim's own noise, 0.885 of the RDP epsilon at epsilon 1: the rest of the gap is
    RDP's slack over the PLD, not the canaries'). On a fixed 1e-3 grid the conversion read 0.804 there."""
    import opacus_recipe

    monkeypatch.setattr(opacus_recipe, "EPOCHS", 15)
    monkeypatch.setattr(opacus_recipe, "TARGET_EPSILON", epsilon)
    opacus_recipe.noise_multiplier.cache_clear()
    from privaudit.audit.user.training.training_audit import audit_training

    a = audit_training("opacus_recipe:make_net", "opacus_recipe:train", members=members, delta=1e-5)
    assert a.verdict.verdict == "not refuted" and not a.findings
    c = a.canary
    print(f"epsilon {epsilon}: ratio {c['ratio_to_claim']:.3f}; bound at the claim {c['eps_bound_at_claim']:.4g} "
          f"(ratio to it {c['ratio_to_bound_at_claim']:.3f}); accountants {a.claim.accountants}; costs {a.costs}")
    assert c["ratio_to_claim"] >= 0.8 and c["ratio_to_bound_at_claim"] >= 0.95
    assert c["eps_bound_at_claim"] <= a.claim.accountants["pld"] <= a.claim.accountants["rdp"]


def test_the_clip_probe_is_the_largest_unit_rescaled_to_a_norm_drawn_off_the_users_generator():
    """The watch's clipping probe: the unit of largest raw norm rescaled to a norm drawn log-uniform on
    [C/2, max(4C, its own norm)] per step from the observer's own generator (torch's global generator untouched);
    over steps the norms spread over the range; the same unit just below the clip is the second probe. ``probe=2``
    adds the unit as it ran."""
    from types import SimpleNamespace

    from privaudit.defenses.watch.opacus_step import StepObserver, StepRecord

    rows = [torch.tensor([[3.0, 0.0], [0.0, 12.0], [1.0, 1.0]]), torch.tensor([[0.0], [0.0], [1.0]])]
    state = torch.random.get_rng_state()
    norms = []
    for step in range(60):
        observer = StepObserver(SimpleNamespace(max_grad_norm=2.0), step, None, StepRecord())
        scaled, near = observer._probes(rows)
        assert float(torch.cat([s.reshape(-1) for s in near]).norm()) == pytest.approx(2.0 * (1 - 2 ** -10))
        ratio = float(scaled[0].norm()) / 12.0
        assert torch.allclose(scaled[0], rows[0][1:2] * ratio) and float(scaled[1].norm()) == 0.0
        norms.append(float(torch.cat([s.reshape(-1) for s in scaled]).norm()))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert 1.0 <= min(norms) < 2.0 < 8.0 < max(norms) <= 12.0
    both = StepObserver(SimpleNamespace(max_grad_norm=2.0), 0, None, StepRecord(), probe=2)._probes(rows)
    assert len(both) == 3 and torch.equal(both[2][0], rows[0][1:2])


def test_the_release_replay_reaches_the_clip_and_refutes_a_loose_one(members):
    """The first release replayed with its own batch and noise plus one record: the honest recipe moves by the clip
    itself (the replay reaches the sensitivity), a clip at twice the calibrated one moves by twice it (refuted)."""
    from privaudit.audit.user.training.release_replay import release_replay

    data = np.load(members)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    from privaudit.audit.user.training.training_audit import _recipe

    honest, found = release_replay(_recipe("opacus_recipe:make_net", "opacus_recipe:train", 0), x, y)
    assert honest["judged"] and not found and 0.99 <= honest["ratio"] <= 1 + honest["slack"], honest
    assert honest["slack"] < 0.01 and honest["runs"] == 4 and set(honest["neighbours"]) == {"add", "remove"}
    removed = honest["neighbours"]["remove"]
    assert 0.99 <= removed["ratio"] <= 1 + removed["slack"] and removed["batch"] == honest["batch"] - 1, removed
    loose, found = release_replay(_recipe("opacus_recipe:make_net", "opacus_plants:train_clip_mismatch", 0), x, y)
    assert [(f["quantity"], f["values"]["neighbour"]) for f in found] == [("release_distance", "add"),
                                                                         ("release_distance", "remove")], found
    assert all(1.99 <= v["ratio"] <= 2.0 for v in loose["neighbours"].values()), loose
    assert "more than the clip 1" in found[0]["message"] and "record was removed" in found[1]["message"]


def test_the_remove_one_replay_sees_a_normaliser_the_add_one_replay_misses(members):
    """Opacus' make_private at its defaults on 897 records: its normaliser int(n / ceil(n / 64)) is 59 at 897 and 898
    but 64 at 896, so the added record moves the release by the clip alone while the removed one moves it by far more
    (refuted, naming the remove-one neighbour)."""
    from privaudit.audit.user.training.release_replay import release_replay
    from privaudit.audit.user.training.training_audit import _recipe
    from privaudit.audit.user.training.training_neighbours import resized

    data = np.load(members)
    x, y = resized(torch.from_numpy(data["x"]), torch.from_numpy(data["y"]), 897)
    record, found = release_replay(_recipe("opacus_audit:make_net", "opacus_audit:train", 0), x, y)
    added, removed = record["neighbours"]["add"], record["neighbours"]["remove"]
    assert added["ratio"] <= 1 + added["slack"] and removed["ratio"] > 2, record
    assert [f["values"]["neighbour"] for f in found] == ["remove"], found


def test_a_release_the_replay_cannot_repeat_is_not_judged(members):
    """Randomness outside Opacus' noise (inputs jittered by an unseeded generator): the release does not repeat with
    its own batch and noise, so the distance is not judged (a note, no finding): never a false refutation."""
    from privaudit.audit.user.training.release_replay import release_replay
    from privaudit.audit.user.training.training_audit import _recipe

    data = np.load(members)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    record, found = release_replay(_recipe("opacus_recipe:make_net", "opacus_plants:train_unseeded_jitter", 0), x, y)
    assert not record["judged"] and not found and "did not repeat" in record["note"], record


def test_virtual_steps_are_replayed_and_audited(members):
    """Opacus' BatchMemoryManager (a release over several physical batches): the release replay scripts each loader
    batch and reaches the clip, and the whole audit of the honest recipe so split is not refuted."""
    a = audit(members, "opacus_plants:train_virtual_steps")
    assert a.verdict.verdict == "not refuted" and not a.findings, a.findings
    r = a.release_replay
    assert r["judged"] and 0.99 <= r["ratio"] <= 1 + r["slack"], r
