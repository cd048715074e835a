"""Per-step findings folded one per check (``privaudit.audit.findings``): the steps as ranges, the message once when
every step says the same, the values' smallest and largest (with their steps) and the first step's message when
they differ; run-level findings kept whole; the gate's reasons folded the same way."""

from __future__ import annotations

import numpy as np

from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from privaudit.accountants.trace.trace import TrainingTrace, check_trace
from privaudit.audit.findings import fold_findings, step_ranges

N, Q, Z, DIM = 372, 64 / 372, 1.2, 5000


def _trace(steps: int, *, sampler: str = "poisson", std: list[float] | None = None) -> TrainingTrace:
    rng = np.random.default_rng(0)
    std = std or [Z] * steps
    return TrainingTrace("example", sampler, N, Q, round(Q * N), DIM, 1.0,
                         {"batch_size": list(rng.binomial(N, Q, steps)), "noise_std": std, "sensitivity": [1.0] * steps,
                          "multiplier": [s for s in std], "units": [0] * steps,
                          "noise_norm": [s * DIM ** 0.5 for s in std]})


def _claim(steps: int) -> PrivacyClaim:
    return PrivacyClaim(SelfComposedDpEvent(PoissonSampledDpEvent(Q, GaussianDpEvent(Z)), steps), "add-remove",
                        "example", 1e-5)


def _found(trace: TrainingTrace, steps: int) -> list[dict]:
    return [{"check": f"trace: {m.field}", **m.to_dict()} for m in check_trace(_claim(steps), trace)]


def test_ranges_are_runs_of_consecutive_steps_and_long_lists_are_elided():
    assert step_ranges([3, 1, 2, 7, 9, 10, 11, 12]) == "1-3, 7, 9-12"
    assert step_ranges([5]) == "5"
    assert step_ranges(range(1, 40, 2)) == "1, 3, 5, 7, 9, 11, ... (20 ranges)"


def test_a_check_failing_at_every_step_is_one_line():
    """112 steps drawn shuffled under a Poisson claim: check_trace finds it 112 times, the fold says it once."""
    found = _found(_trace(112, sampler="shuffled"), 112)
    assert sum(f["field"] == "sampler" for f in found) == 112
    folded = fold_findings(found, steps=112)
    sampler = [f for f in folded if f["check"] == "trace: sampler"]
    assert len(folded) == len({f["check"] for f in found})
    assert sampler == [{"check": "trace: sampler", "steps": list(range(1, 113)),
                        "message": "steps 1-112 (every step): sampled shuffled, the claim accounts poisson"}]


def test_values_that_differ_by_step_are_summarised_with_their_steps_and_the_first_message():
    std = [Z] * 20
    for t, s in ((3, 0.6), (4, 0.5), (5, 0.7), (11, 0.5)):
        std[t - 1] = s
    found = [f for f in _found(_trace(20, std=std), 20) if f["field"] == "noise_multiplier"]
    assert [f["step"] for f in found] == [3, 4, 5, 11]
    (line,) = fold_findings(found, steps=20)
    assert line["message"] == ("steps 3-5, 11 (4 of 20 steps), observed 0.5 (step 4) to 0.7 (step 5); the first, "
                               "step 3: noise multiplier 0.6 (noise std 0.6 at sensitivity 1) is below the claimed 1.2 by 0.5 "
                               "relative, beyond float64 rounding (tolerance 8.9e-16)")


def test_one_finding_keeps_its_message_and_run_level_findings_join_in_their_checks_line():
    found = [{"check": "a", "step": 7, "message": "step 7: x"},
             {"check": "b", "step": None, "message": "the run drew too few"},
             {"check": "a", "step": None, "message": "and the total too"},
             {"check": "b", "step": None, "message": "its pairs overlap"}]
    assert fold_findings(found, steps=10) == [
        {"check": "a", "steps": [7], "message": "step 7: x; and the total too"},
        {"check": "b", "steps": [], "message": "the run drew too few; its pairs overlap"}]
    assert fold_findings([{"check": "a", "step": 2, "message": "step 2: y"},
                          {"check": "a", "step": 3, "message": "step 3: y"}])[0]["message"] == "steps 2-3 (2 steps): y"


def test_the_gate_gives_one_reason_per_trace_check_of_a_cell():
    from privaudit.audit.gate.judge import claim_check_reasons
    from privaudit.audit.report.records import CellRecord

    mismatches = [m.to_dict() for m in check_trace(_claim(30), _trace(30, sampler="shuffled"))]
    cell = CellRecord(id="d/x/eps=1/seed=0", claim_checks={"trace": {"steps": 30, "mismatches": mismatches}})
    reasons = claim_check_reasons(cell)
    assert len(mismatches) >= 30 and len(reasons) == len({m["field"] for m in mismatches})
    assert ("cell d/x/eps=1/seed=0: its trace does not match its claim: steps 1-30 (every step): sampled shuffled, "
            "the claim accounts poisson") in reasons
