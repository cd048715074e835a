"""The headline findings at reduced budgets, in the default run: each sensitivity violation the quickstart documents
is found, DPCL's per-step claim is refuted (SimCLR and Barlow Twins), and the under-noised positive control is
caught by the gate. Full budgets: the quickstart itself (tests/test_quickstart_slow.py) and the slow tests of
tests/test_sensitivity_checks.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from privaudit.audit.sensitivity.check import check_claim
from privaudit.audit.sensitivity.register import CLAIMS, Context

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

QUICKSTART = tomllib.loads((Path(__file__).resolve().parents[1] / "suites" / "quickstart.toml").read_text())
#: Each documented violation and the one register setting searched here (8 pairs): the smallest batch or the
#: temperature at which the violation shows (DPCL's gradients at |B| = 4, chunked grouping at |B| = 4, Lemma 4.5 at
#: tau = 1, a virtual client of one user, ALM's sampled sensitivity).
FAST_SETTING = {"dpcl.simclr-gradient": 1, "dpcl.barlow-gradient": 1, "dpgcl.group[chunk]": 1, "logitdp.infonce": -1,
                "fedemb.virtual-client": 0, "alm.head-weights": 0}


@pytest.fixture(scope="module")
def ctx():
    torch.set_num_threads(1)
    return Context(0)


def test_these_are_the_findings_the_quickstart_documents():
    expect = QUICKSTART["sensitivity"]["expect"]
    assert {c for c, v in expect.items() if v == "violated"} == set(FAST_SETTING)
    assert QUICKSTART["step_audit"]["expect"] == {"dpcl-simclr": "refuted", "dpcl-barlow": "refuted"}
    assert [d["label"] for d in QUICKSTART["defenses"] if d.get("control")] == ["control-undernoised"]


@pytest.mark.parametrize("claim", sorted(FAST_SETTING))
def test_documented_sensitivity_violation_is_found(ctx, claim, tmp_path):
    spec = CLAIMS[claim]
    one = dataclasses.replace(spec, settings=(spec.settings[FAST_SETTING[claim]],), growth=())
    r = check_claim(one, ctx, evaluations=8, witness_dir=tmp_path)
    assert r.verdict == "violated" and r.observed > r.bound, (claim, r.observed, r.bound)
    assert r.witness and Path(r.witness).is_file()


@pytest.mark.parametrize("defense", ["dpcl-simclr", "dpcl-barlow"])
def test_dpcl_step_is_refuted(ctx, defense):
    """The sensitivity search's pair (8 pairs evaluated) through DPCL's own step, 5000 noise draws per side: the
    gradient moves by more than the claimed 4C, and the measured mu_lb exceeds the per-step claim."""
    from privaudit.audit.step.audit import audit_defense

    r = audit_defense(defense, pair="witness", draws=5000, witness_evaluations=8, context=ctx)
    pair = r.pairs[0]
    assert r.verdict == "refuted" and pair["difference_over_sensitivity"] > 1.0
    assert r.mu_lower > 1.5 * r.claim["mu"]


def test_undernoised_control_is_caught_by_the_gate(tmp_path):
    """The quickstart's positive control (DP-GCL claiming epsilon 1 with a tenth of the noise), one epoch from a
    random init (the quickstart fine-tunes a pretrained encoder for three), attacked by 2000 of its gradient canaries
    (the quickstart inserts up to 20000): the gate catches it and passes ("control caught")."""
    from privaudit.audit.run.runner import run_suite
    from privaudit.audit.suite.load import parse_suite

    control = next(d for d in QUICKSTART["defenses"] if d.get("control"))
    raw = {"name": "control", "datasets": ["digits"], "delta": QUICKSTART["delta"],
           "defenses": [{**control, "params": {**control["params"], "epochs": 1, "init": "random"}}],
           "attacks": [{"name": "gradient-canary", "params": {"canaries": 2000}}]}
    result = run_suite(parse_suite(raw), out=tmp_path / "out", progress=False)
    assert result.exit_code == 0 and result.report["gate"]["controls_caught"] == 1
    gate = result.report["cells"][0]["gate"]
    [comparison] = [c for c in gate["comparisons"] if c["attack"] == "gradient-canary"]
    assert "gradient-canary" in gate["caught_by"]
    assert comparison["verdict"] == "caught" and comparison["gate_eps_lower_bound"] > 2 * comparison["epsilon"]
