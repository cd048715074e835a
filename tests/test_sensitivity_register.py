"""Every register entry encodes the bound its paper states (formula, parameters, relation, norm).

The expected values below are written from the papers' text (shared/papers/*.txt), independently of
the register's functions, so a later change that weakens (or strengthens) a claim fails here.
"""

from __future__ import annotations

import math

import pytest

from privaudit.audit.sensitivity.register import CLAIMS, PAPER_CLAIMS, select

E2 = math.e ** 2

# claim id -> (relation, norm, source must mention, [(params, value the paper's formula gives)])
PAPER = {
    # DPCL: "Delta_S is 4 sqrt(2|B| - 1)" (Thm. 1 with |Z| = 2|B|), replace-one (Sec. 3.2 "substitute-one")
    "dpcl.similarity-matrix": ("replace-one", "l2", "Thm. 1",
                               [({"B": 4}, 4 * math.sqrt(7)), ({"B": 1}, 4.0), ({"B": 128}, 4 * math.sqrt(255))]),
    # Thm. 2: "Delta_mu bounded above by 2/N"
    "dpcl.mean": ("replace-one", "l2", "Thm. 2", [({"B": 8}, 0.25), ({"B": 2}, 1.0)]),
    # Thm. 3: "SSE(Z) has L2 sensitivity bounded above by 6"
    "dpcl.sse": ("replace-one", "l2", "Thm. 3", [({"B": 8}, 6.0), ({"B": 1000}, 6.0)]),
    # Sec. 3.2.2: Delta'_g <= 4 C
    "dpcl.simclr-gradient": ("replace-one", "l2", "3.2.2", [({"B": 8, "C": 0.5}, 2.0), ({"B": 2, "C": 50}, 200.0)]),
    # Sec. 3.2.1: Delta_g <= 2 n C = 4 |B| C
    "dpcl.simclr-gradient-plain": ("replace-one", "l2", "3.2.1", [({"B": 128, "C": 1.0}, 512.0),
                                                                  ({"B": 3, "C": 0.5}, 6.0)]),
    # Sec. 3.3.2: "the same gradient sensitivity as SimCLR with DP-similarity, i.e., 4 C"
    "dpcl.barlow-gradient": ("replace-one", "l2", "3.3.2", [({"B": 8, "C": 50.0}, 200.0)]),
    # DP-GCL Sec. 2.3.1: "the sensitivity scales as (2B + 1) C"; add-or-remove (Sec. 3)
    "dpgcl.sample-level": ("add-remove", "l2", "2.3.1", [({"B": 16, "C": 1.0}, 33.0), ({"B": 1, "C": 2.0}, 6.0)]),
    # Eq. 7: "reduces sensitivity to a constant 2C"
    "dpgcl.batch-level": ("add-remove", "l2", "Eq. 7", [({"B": 100, "C": 1.5}, 3.0)]),
    # Thm. 1: (2K + 1) C, K = ceil(B / S)
    "dpgcl.group-clip": ("add-remove", "l2", "Thm. 1", [({"B": 10, "S": 4, "C": 1.0}, 7.0),
                                                        ({"B": 8, "S": 8, "C": 2.0}, 6.0),
                                                        ({"B": 3, "S": 1, "C": 1.0}, 7.0)]),
    # Thms. 2-3: 2C (both grouping implementations are checked against the same claim)
    "dpgcl.group[random]": ("add-remove", "l2", "Thms. 2-3", [({"B": 10, "S": 4, "C": 1.0}, 2.0)]),
    "dpgcl.group[chunk]": ("add-remove", "l2", "Thms. 2-3", [({"B": 10, "S": 4, "C": 0.5}, 1.0)]),
    # Logit-DP Lemma 4.5: 2 (1 + (n - 2) e^2 / (e^2 + n - 1)) B (tau = 1: cosine logits)
    "logitdp.infonce": ("add-remove", "l2", "Lemma 4.5",
                        [({"n": 10, "C": 1.0, "tau": 1.0}, 2 * (1 + 8 * E2 / (E2 + 9))),
                         ({"n": 2, "C": 3.0, "tau": 1.0}, 6.0),
                         ({"n": 5, "C": 1.0}, 2 * (1 + 3 * E2 / (E2 + 4)))]),
    # Lemma 4.6: G1 + G2 + (n - 1) L <= 6
    "logitdp.spreadout": ("add-remove", "l2", "Lemma 4.6", [({"n": 10, "C": 1.0}, 6.0), ({"n": 2, "C": 0.1}, 0.6)]),
    # DP-FedEmb App. C: noise proportional to the clip norm gamma (substitute-one DP)
    "fedemb.virtual-client": ("replace-one", "l2", "App. C", [({"clip_norm": 0.6}, 0.6)]),
    # ALM Algorithm 2 / Prop. 4.1: sampled 1-norm sensitivity
    "alm.head-weights": ("replace-one", "l1", "Algorithm 2", [({"sensitivity_l1": 0.017492}, 0.017492)]),
}

ISSUE_LIST = ("dpcl.similarity-matrix", "dpcl.mean", "dpcl.sse", "dpcl.simclr-gradient", "dpcl.simclr-gradient-plain",
              "dpcl.barlow-gradient", "dpgcl.sample-level", "dpgcl.batch-level", "dpgcl.group-clip", "dpgcl.group",
              "logitdp.infonce", "logitdp.spreadout", "fedemb.virtual-client", "alm.head-weights")


def test_every_claim_of_the_issue_is_registered():
    keys = {CLAIMS[c].key for c in PAPER_CLAIMS}
    assert set(ISSUE_LIST) <= keys
    assert set(PAPER) == set(PAPER_CLAIMS)
    # DP-GCL's Thms. 2-3 are checked for each grouping implementation
    assert [c.variant for c in select(["dpgcl.group"])] == ["random", "chunk"]


@pytest.mark.parametrize("claim", sorted(PAPER))
def test_register_bound_is_the_papers(claim):
    relation, norm, cite, cases = PAPER[claim]
    spec = CLAIMS[claim]
    assert spec.relation == relation
    assert spec.norm == norm
    assert cite in spec.source
    assert not spec.reference
    for params, value in cases:
        assert spec.bound(params) == pytest.approx(value, rel=1e-12), (claim, params)
    assert set(spec.parameters) <= set().union(*(p for p, _ in cases)) | {"t"}


def test_temperature_enters_logit_dp_only_through_the_logit_range():
    spec = CLAIMS["logitdp.infonce"]
    a = math.exp(2 / 0.1)
    assert spec.bound({"n": 4, "C": 1.0, "tau": 0.1}) == pytest.approx(2 * (1 + 2 * a / (a + 3)))
    # the paper's setting
    assert spec.bound({"n": 4, "C": 1.0, "tau": 1.0}) == pytest.approx(2 * (1 + 2 * E2 / (E2 + 3)))


def test_sample_level_terms_per_example_scale_the_bound():
    spec = CLAIMS["dpgcl.sample-level"]
    assert spec.bound({"B": 4, "C": 1.0, "t": 2}) == 18.0
    assert spec.bound({"B": 4, "C": 1.0}) == 9.0  # Eq. 6: one term per pair


def test_only_alm_is_sampled_and_black_box():
    assert [c for c in PAPER_CLAIMS if not CLAIMS[c].closed_form] == ["alm.head-weights"]
    assert [c for c in PAPER_CLAIMS if CLAIMS[c].black_box] == ["alm.head-weights"]


def test_default_budgets_fit_a_few_minutes():
    total = sum(CLAIMS[c].budget_seconds for c in PAPER_CLAIMS)
    assert total <= 240


# claims whose defense deliberately calibrates with something other than the paper's bound
DEFENSE_DIFFERS: dict[str, str] = {}


@pytest.mark.parametrize("claim", [c for c in sorted(PAPER) if c != "alm.head-weights"])
def test_defense_states_the_same_bound_at_the_checked_parameters(claim, digits):
    """The defense's own ``bound`` (what it calibrates with in 'paper' mode) equals the register's at
    every setting's parameters, so the check and the training speak of the same claim."""
    from privaudit.defenses.registry import DEFENSES

    from privaudit.audit.sensitivity.register import Context

    spec = CLAIMS[claim]
    if spec.defense not in DEFENSES:
        pytest.skip(f"defense {spec.defense!r} is not in this installation")
    if claim in DEFENSE_DIFFERS:
        pytest.skip(DEFENSE_DIFFERS[claim])
    ctx = Context(0)
    ctx.__dict__["data"] = digits  # the session's dataset (same seed), loaded once
    for setting in spec.settings:
        if setting.model != "init":
            setting = type(setting)(setting.units, setting.overrides, "init")  # no training needed here
        target = spec.target(setting, ctx)
        assert target.extra["defense_bound"] == pytest.approx(target.bound, rel=1e-9), (claim, setting)
        assert target.bound == spec.bound(target.params)
