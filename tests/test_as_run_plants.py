"""The catalogue's planted bugs (tests/bug_plants.py) through DP-GCL's real training code, read by the trace's
as-run checks (:mod:`privaudit.accountants.trace.as_run`): every bug the trace can see is found, naming its check, and
the correct run has no finding. The noise bugs only the canaries can see (no noise on the biases, a shortfall no
record shows) are planted in tests/test_noise_plants.py and measured by ``privaudit gate-power --bugs``. The
dependent-noise class (seen by the trace's ``noise_law`` tests) runs here as a slow test; the dependences it plants
are tested on simulated draws in tests/test_noise_law.py."""

import pytest

from bug_plants import BUGS, DEPENDENT_NOISE
from privaudit.accountants.trace.trace import check_trace
from privaudit.defenses import Budget
from privaudit.defenses.registry import make_defense

PARAMS = {"epochs": 2, "batch_size": 128}
#: The trace's field that names each bug the trace can see.
SEEN_BY = {"shuffled": "sampling", "rate-1.5x": "batch_size", "clip-2x": "unit_norm", "no-clip": "unit_norm",
           "reused-noise": "noise", "tensor-reused-noise": "noise", "unnoised-biases": "noise", "batch-normaliser": "normalizer",
           "half-steps": "steps", "rate-misreported": "sample_rate", "halves-sign-flipped": "noise_law"}


def findings(digits, bug: str | None, eps: float = 8.0):
    defense = make_defense("dp-gcl", PARAMS)
    if bug is None:
        trained = defense.fit(digits, Budget(target_epsilon=eps), 0, progress=False)
    else:
        with BUGS[bug].plant("dp-gcl", PARAMS):
            trained = defense.fit(digits, Budget(target_epsilon=eps), 0, progress=False)
    return trained, check_trace(trained.claim, trained.extras["trace"])


def test_the_correct_run_has_no_finding_and_records_what_ran(digits):
    trained, found = findings(digits, None)
    trace = trained.extras["trace"]
    assert found == []
    steps = trace["steps"]
    assert len(trace["noise_law"]) == steps and {r["read"] for r in trace["noise_law"]} == {trace["dim"]}
    assert len(trace["noise_digest"]) == len(set(trace["noise_digest"])) == steps
    cells = [d for row in trace["tensor_noise_digests"] for d in row if d is not None]
    assert len(trace["tensor_noise_digests"]) == steps and len(cells) == len(set(cells)) > steps
    assert sum(trace["sampling"]["counts"]) == sum(trace["sampling"]["sizes"])
    assert len(trace["sampling"]["overlaps"]) == steps // 2
    assert max(trace["unit_norm_max"]) <= trace["clip"] * (1 + 1e-5)
    assert {r["neighbour"] for r in trace["replays"]} == {"add", "remove"}
    assert all(0 < r["ratio"] <= 1 for r in trace["replays"])


@pytest.mark.parametrize("bug", sorted(SEEN_BY))
def test_each_planted_bug_is_found_by_its_check(digits, bug):
    _, found = findings(digits, bug)
    assert SEEN_BY[bug] in {m.field for m in found}, [m.message for m in found]


@pytest.mark.slow
@pytest.mark.parametrize("bug", [b.name for b in DEPENDENT_NOISE])
def test_each_dependent_noise_plant_is_found_by_the_noise_law(digits, bug):
    """Each of the class's variants through DP-GCL's engine (about 10 s each: slow; DP-FedEmb's trace runs one in the
    default tests, tests/test_fedemb_trace.py)."""
    _, found = findings(digits, bug)
    assert "noise_law" in {m.field for m in found}, [m.message for m in found]


def test_noise_reused_across_tensors_is_named_by_tensor_and_step(digits):
    _, found = findings(digits, "tensor-reused-noise")
    message = next(m.message for m in found if m.field == "noise")
    assert "tensor 1 at step 1 began with the same noise as tensor 0 at step 1" in message
    assert "reused across tensors" in message


def test_noise_missing_on_the_biases_is_named_by_tensor_and_step(digits):
    _, found = findings(digits, "unnoised-biases")
    message = next(m.message for m in found if m.field == "noise")
    assert "step 1: tensor 1 drew no noise" in message  # the first bias in the flat layout


def test_the_catalogue_has_six_classes_of_at_least_two_variants():
    classes = {}
    for bug in BUGS.values():
        classes.setdefault(bug.cls, []).append(bug.name)
    assert set(classes) == {"sampling", "clipping", "noise", "accounting", "auxiliary release", "dependent-noise"}
    assert min(len(v) for v in classes.values()) >= 2


@pytest.mark.parametrize("name, released", [("dpcl-simclr", "similarity"), ("dpcl-barlow", "mean[view1]")])
def test_an_auxiliary_release_left_out_of_the_claim_is_named(digits, name, released):
    """DPCL's step releases a noised similarity matrix (SimCLR) or statistics (Barlow) besides the gradient; a claim
    calibrated on the gradient's release alone is refuted at every step, naming what it leaves out."""
    params = {"width": 4, "rep_dim": 8, "proj_hidden": 8, "proj_dim": 4, "epochs": 1, "init": "random"}
    with BUGS["aux-unaccounted"].plant(name, params):
        trained = make_defense(name, params).fit(digits, Budget(noise_multiplier=2.0), 0, progress=False)
    found = [m for m in check_trace(trained.claim, trained.extras["trace"]) if m.field == "noise_multiplier"]
    assert len(found) == trained.extras["trace"]["steps"], found
    assert f"composed with {released}: std" in found[0].message and "the claim leaves out " in found[0].message
