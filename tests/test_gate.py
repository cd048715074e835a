"""The gate compares only what is sound, at family-wise confidence, and names what it could not compare."""

import numpy as np
import pytest

from privaudit.attacks.bounds.multi_run import multi_run_bound
from privaudit.attacks.bounds.one_run import one_run_bound
from privaudit.audit.gate.recompute import family_bound
from privaudit.audit.gate.judge import gate_cells, sensitivity_gate, suite_gate
from privaudit.audit.suite.model import GateConfig, SensitivityConfig

from cell_records import make_attack_record, make_cell_record, make_claim

COUNTS = {"m": 700, "r": 140, "v": 120, "k_pos": 70, "k_neg": 70}


def cell(cid="digits/x/eps=1/seed=0", *, relation="add-remove", unit="example", eps=1.0, delta=1e-5, bound=None,
         eps_lb=None, counts=COUNTS):
    bound = bound or {"method": "one-run", "relation": "add-remove", "delta": delta, "confidence": 0.95,
                      "counts": counts}
    return make_cell_record(cid, claim=make_claim(relation=relation, unit=unit, delta=delta),
                            epsilon={"rdp": eps, "pld": None if eps is None else eps * 0.9},
                            attacks={"loss": make_attack_record(1.5 if eps_lb is None else eps_lb, bound=bound)})


def test_family_bound_reproduces_the_attack_bound_and_shrinks_with_the_family():
    rng = np.random.default_rng(0)
    membership = rng.random(600) < 0.5
    scores = membership * 1.5 + rng.normal(size=600)
    b = one_run_bound(scores, membership, k_pos=60, k_neg=60, delta=1e-5).to_dict()
    assert family_bound(b, 1) == pytest.approx(b["epsilon"], abs=1e-9)
    assert 0 < family_bound(b, 10) < b["epsilon"]
    mr = multi_run_bound(rng.normal(2, 1, 40), rng.normal(0, 1, 40), delta=1e-5).to_dict()
    assert family_bound(mr, 1) == pytest.approx(mr["epsilon"], abs=1e-9)
    assert family_bound(mr, 5) <= mr["epsilon"]
    assert family_bound({**b, "method": "gdp"}, 2) is None


def test_only_sound_example_level_add_remove_comparisons_are_made():
    cells = [cell("a"), cell("b", relation="replace-one"), cell("c", unit="user"), cell("d", eps=None),
             cell("e", bound={"method": "gdp", "relation": "add-remove", "delta": 1e-5, "confidence": 0.95}),
             cell("f", bound={"method": "one-run", "relation": "add-remove", "delta": 1e-7, "confidence": 0.95,
                              "counts": {"m": 700, "r": 140, "v": 120}})]
    gates = gate_cells(cells, GateConfig())
    verdicts = {c.id: g.comparisons[0] for c, g in zip(cells, gates)}
    a = verdicts["a"]
    assert a.verdict == "exceeds" and a.accountant == "pld" and a.epsilon == pytest.approx(0.9)
    assert a.gate_confidence == pytest.approx(0.95)  # the only comparable pair: family of one
    assert gates[0].reasons[0].startswith("cell a: loss's sound lower bound eps_lb = ")
    assert "the claim is replace-one: the bound is on add-remove epsilon" in verdicts["b"].reason
    assert "the claim protects a user; the bound's coin is one example" in verdicts["c"].reason
    assert verdicts["d"].reason == "no accountant gives an epsilon for this claim"
    assert "'gdp' is not a sound lower bound in general" in verdicts["e"].reason
    assert "the bound is at delta=1e-07 < the claim's delta=1e-05" in verdicts["f"].reason
    assert [g.status for g in gates] == ["fail", "pass", "pass", "pass", "pass", "pass"]
    # Slack: the claim is allowed (1 + slack) times its epsilon.
    assert gate_cells([cell("a")], GateConfig(epsilon_slack=10.0))[0].status == "pass"
    # More comparisons, each bound at beta / N: the same bound can stop exceeding.
    many = [cell(f"m{i}", eps_lb=0.95, counts={"m": 700, "r": 140, "v": 90}) for i in range(50)]
    single = gate_cells(many[:1], GateConfig())[0].comparisons[0].gate_eps_lower_bound
    fifty = gate_cells(many, GateConfig())[0].comparisons[0].gate_eps_lower_bound
    assert fifty < single


def test_errors_max_auc_and_sensitivity_expectations():
    broken = make_cell_record("z", error="train: RuntimeError: boom", no_claim=True, epsilon={})
    ok = cell("ok", eps=100.0)
    gates = gate_cells([broken, ok], GateConfig(max_auc=0.55))
    assert gates[0].reasons == ("cell z errored: train: RuntimeError: boom",)
    assert gates[1].reasons == ("cell ok: loss reaches AUC 0.6 >= gate.max_auc 0.55",)
    assert gate_cells([broken], GateConfig(fail_on_error=False))[0].status == "pass"
    results = [{"claim": "dpcl.mean", "source": "s", "bound": 1.0, "observed": 2.0, "verdict": "violated", "witness": "w.json"},
               {"claim": "dpcl.sse", "source": "s", "bound": 1.0, "observed": 0.5, "verdict": "holds", "witness": None},
               {"claim": "logitdp.infonce", "source": "s", "bound": 1.0, "observed": None, "verdict": "inconclusive"}]
    config = SensitivityConfig(("dpcl.mean", "dpcl.sse", "logitdp.infonce", "dpgcl.sample-level"), 10.0, None, 0,
                               {"dpcl.sse": "violated"})
    reasons, notes = sensitivity_gate(results, config, GateConfig())
    # strict: a documented violation that is not found, and an inconclusive verdict nobody allowed, fail the gate
    assert reasons == ["sensitivity claim dpgcl.sample-level: no result was returned",
                       "sensitivity claim dpcl.mean (s) violated: observed 2 > bound 1 (witness: w.json)",
                       "sensitivity claim dpcl.sse: expected violated, found not refuted (observed 0.5, bound 1): the "
                       "auditor lost power; if the claim was fixed, update the suite's sensitivity.expect",
                       "sensitivity claim logitdp.infonce is inconclusive (no reason recorded); list it in the suite's "
                       "sensitivity.allow_inconclusive if that is expected"]
    allowed = SensitivityConfig(("logitdp.infonce",), 10.0, None, 0, {}, ("logitdp.infonce",))
    reasons, notes = sensitivity_gate(results[2:], allowed, GateConfig())
    assert reasons == [] and "allowed by the suite (sensitivity.allow_inconclusive)" in notes[0]
    reasons, notes = sensitivity_gate(results[:1], SensitivityConfig(("dpcl.mean",), 1.0, None, 0,
                                                                     {"dpcl.mean": "violated"}), GateConfig())
    assert reasons == [] and "known-broken" in notes[0]
    # an error fails even an allowed or documented claim, naming the exception
    errored = [{"claim": "logitdp.infonce", "source": "s", "bound": None, "observed": None, "verdict": "error",
                "config": {"errors": ["setting {'units': 1}: RuntimeError: boom"]}}]
    reasons, _ = sensitivity_gate(errored, allowed, GateConfig())
    assert reasons == ["sensitivity claim logitdp.infonce errored: setting {'units': 1}: RuntimeError: boom"]
    report_cells = [ok.with_gate(gates[1])]
    assert suite_gate(report_cells, results[:1], SensitivityConfig(("dpcl.mean",), 1.0, None, 0, {}),
                      GateConfig()).status == "fail"


def test_bounds_are_compared_at_their_own_relation_and_unit():
    counts = {"m": 700, "r": 140, "v": 120, "k_pos": 70, "k_neg": 70}
    paired = {"method": "one-run-paired", "relation": "replace-one", "unit": "example", "delta": 1e-5,
              "confidence": 0.95, "counts": counts}
    users = {"method": "one-run-best", "relation": "replace-one", "unit": "user", "delta": 1e-5, "confidence": 0.95,
             "counts": {**counts, "r_fdp": 70, "v_fdp": 68}}
    cells = [cell("r1", relation="replace-one", bound=paired), cell("u1", relation="replace-one", unit="user",
                                                                    bound=users),
             cell("r2", bound=paired), cell("u2", relation="replace-one", bound=users)]
    gates = gate_cells(cells, GateConfig())
    v = {c.id: g.comparisons[0] for c, g in zip(cells, gates)}
    assert v["r1"].verdict == "exceeds" and (v["r1"].relation, v["r1"].unit) == ("replace-one", "example")
    assert v["u1"].verdict == "exceeds" and v["u1"].unit == "user"
    assert v["r2"].verdict == "not comparable" and "the claim is add-remove" in v["r2"].reason
    assert v["u2"].verdict == "not comparable" and "per user" in v["u2"].reason
    # one-run-best is recomputed from both counts at the family level: max of Steinke and f-DP at beta / 2.
    from privaudit.attacks.bounds.fdp import best_one_run_epsilon
    assert family_bound(users, 2) == pytest.approx(best_one_run_epsilon(users["counts"], beta=0.025, delta=1e-5))
