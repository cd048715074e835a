"""DP-FedEmb / DP-FedAvg's rounds recorded as they ran (:mod:`privaudit.defenses.fedemb.trace`) and checked against
their claim: a correct run matches it; each planted federated bug the trace can see is named."""

import contextlib

import pytest
import torch

from privaudit.accountants.trace.trace import check_trace
from privaudit.defenses import Budget, make_defense

TINY = dict(pretrain=False, width=8, rep_dim=16, rounds=4, local_steps=2, local_batch_size=8)


def _fit(digits, name="dp-fedemb", plant=None, budget=None, **params):
    import bug_plants

    with (bug_plants.BUGS[plant].plant(name, {}) if plant else contextlib.nullcontext()):
        return make_defense(name, {**TINY, **params}).fit(digits, budget or Budget(noise_multiplier=1.0), seed=0,
                                                          progress=False)


def test_a_federated_run_records_every_round_and_matches_its_claim(digits):
    t = _fit(digits)
    trace = t.extras["trace"]
    users = t.extras["users"]["num_users"]
    assert (trace["unit"], trace["sampler"], trace["population"], trace["steps"]) == (
        "user", "without-replacement", users, 4)
    assert trace["batch_size"] == [16] * 4 and trace["units"] == [4] * 4 and trace["normalizer"] == [4.0] * 4
    assert trace["sensitivity"] == [0.4] * 4 and trace["noise_std"] == [0.2] * 4 and trace["multiplier"] == [0.5] * 4
    assert all(0 < v <= 0.2 * (1 + 1e-6) for v in trace["unit_norm_max"])
    dim = trace["dim"]
    assert dim == sum(p.numel() for p in t.model.encoder.parameters())
    assert all(0.9 < n / (0.2 * dim ** 0.5) < 1.1 for n in trace["noise_norm"])
    assert len(set(trace["noise_digest"])) == 4 and sum(trace["sampling"]["counts"]) == 64
    assert check_trace(t.claim, trace) == []


def test_adaptive_clipping_is_traced_in_each_rounds_own_clip(digits):
    """DP-FedAvg with adaptive clipping: each round's std and sensitivity follow its clip; the clipped norms are
    checked against it (recorded in units of the configured clip); the count query is in the multiplier."""
    t = _fit(digits, "dp-fedavg", budget=Budget(target_epsilon=20.0), adaptive_clipping=True)
    trace, clips = t.extras["trace"], t.history["clip_norm"]
    assert len(set(clips)) > 1 and trace["sensitivity"] == pytest.approx([2 * c for c in clips])
    z = t.claim.event.event.event.noise_multiplier
    assert trace["multiplier"] == pytest.approx([z] * 4) and all(s / d > z for s, d in
                                                                 zip(trace["noise_std"], trace["sensitivity"]))
    assert max(trace["unit_norm_max"]) <= 0.2 * (1 + 1e-6) and check_trace(t.claim, trace) == []


@pytest.mark.parametrize("plant, field, says", [
    ("rate-1.5x", "batch_size", "step 1: batch of 24, above the claimed 16"),
    ("reseeded-sampler", "sampling", "drew the same batch as step 1"),
    ("clip-2x", "unit_norm", "above the clip 0.01"),
    ("no-clip", "unit_norm", "above the clip 0.01"),
    ("reused-noise", "noise", "added the same noise as step 1"),
    ("count-unaccounted", "noise_multiplier", "clipped count: std 2.236 at sensitivity 1: the claim leaves out clipped "
                                              "count"),
    ("sign-flipped-tensor", "noise_law", "step 1: tensors 1 and 2 (8 coordinates each) drew correlated noise "
                                         "(cosine -1:"),
])
def test_the_trace_names_each_planted_federated_bug_it_can_see(digits, plant, field, says):
    """At clip 0.01 (the tiny model's first-round client deltas reach about 0.08) a clipping bug reaches the sum."""
    t = _fit(digits, plant=plant, clip_norm=0.01)
    found = check_trace(t.claim, t.extras["trace"])
    assert field in {m.field for m in found} and any(says in m.message for m in found), [m.message for m in found]


def test_a_federated_cell_gets_the_trace_check_without_a_dp_sgd_step_audit(digits):
    from privaudit.audit.run.claim_checks import run_claim_checks, trace_findings

    t = _fit(digits, plant="clip-2x", clip_norm=0.01)
    record, evidence = run_claim_checks("dp-fedemb", TINY, t, digits, target_epsilon=None, delta=1e-5, seed=0)
    assert "step_audit" not in record and record["trace"]["steps"] == 4
    assert "unit_norm" in [m["field"] for m in record["trace"]["mismatches"]]
    assert [m.to_dict() for m in trace_findings(evidence)] == record["trace"]["mismatches"]
    assert torch.isfinite(torch.tensor(evidence["trace"]["noise_norm"])).all()


def test_the_federated_control_is_seen_by_the_trace_noise_norm(digits):
    """The federated positive control adds 1/f of the noise its claim accounts; its trace records the claimed std
    and the noise drawn, so the noise-norm check names the rounds (before the trace, only the canary users saw it)."""
    t = _fit(digits, "control-dp-fedemb", control_factor=1.5)
    found = check_trace(t.claim, t.extras["trace"])
    assert {m.field for m in found} == {"noise_norm"} and len(found) == 4, [m.message for m in found]
    assert all(0.6 < m.observed / m.claimed < 0.73 for m in found), [m.message for m in found]  # 1 / 1.5


def test_replayed_rounds_stay_within_the_sensitivity_and_leave_training_unchanged(digits, monkeypatch):
    """The first and middle rounds re-run with one user replaced: a correct run moves by less than 2 clips; the
    replays restore every generator, so the model trained is the one trained without them."""
    import privaudit.defenses.fedemb.defense as module

    t = _fit(digits)
    replays = t.extras["trace"]["replays"]
    assert [r["step"] for r in replays] == [1, 3] and all(r["neighbour"] == "replace" for r in replays)
    assert all(0 < r["ratio"] and r["distance"] <= r["sensitivity"] + r["slack"] for r in replays), replays
    monkeypatch.setattr(module, "replay_steps", lambda steps: set())
    plain = _fit(digits)
    assert plain.extras["trace"]["replays"] == []
    for a, b in zip(t.model.state_dict().values(), plain.model.state_dict().values()):
        assert torch.equal(a, b)


def test_a_replayed_round_refutes_skipped_clipping(digits):
    t = _fit(digits, plant="no-clip", clip_norm=0.01)
    found = [m for m in check_trace(t.claim, t.extras["trace"]) if m.field == "replay"]
    assert found and "replace neighbour's release differs by" in found[0].message, [m.message for m in found]


def test_clients_in_chunks_record_the_same_trace(digits):
    """Clients aggregated ``client_chunk`` at a time: the largest clipped norm is taken over every chunk, and the
    noise drawn is the same draw (its digests equal)."""
    whole, chunked = (_fit(digits, clients_per_round=5, client_chunk=c).extras["trace"] for c in (0, 2))
    assert chunked["unit_norm_max"] == pytest.approx(whole["unit_norm_max"], rel=1e-5)
    assert chunked["noise_digest"] == whole["noise_digest"] and chunked["units"] == whole["units"] == [5] * 4
    assert [r["distance"] for r in chunked["replays"]] == pytest.approx([r["distance"] for r in whole["replays"]],
                                                                         rel=1e-4, abs=1e-6)
