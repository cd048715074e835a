"""The utility claims register and its verdicts (privaudit.audit.benchmark): the statistics against SciPy, the
verdicts on planted references (a claim made true, false or undecidable by construction), and the family-wise
level: a register of true ties never reads "contradicted" more often than alpha, which the same judge without the
Bonferroni correction (a planted unsound variant) does."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privaudit.audit.benchmark.claims import KNN, LINEAR, Comparison, LossClaim, UtilityClaim, utility_claims
from privaudit.audit.benchmark.stats import accuracy_interval, paired_difference
from privaudit.audit.benchmark.verdict import (CONTRADICTED, MISSING, REPRODUCED, UNDECIDED, combine, decide, judge)
from privaudit.defenses.evaluation.utility import pack_correct, unpack_correct

N = 10_000


def test_packed_correctness_round_trips_and_refuses_another_length():
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 9, 10_000):
        bits = rng.random(n) < 0.7
        assert np.array_equal(unpack_correct(pack_correct(bits), n), bits)
    with pytest.raises(ValueError, match="holds 16 bits, not 3"):
        unpack_correct(pack_correct(np.ones(9, dtype=bool)), 3)


@pytest.mark.parametrize("k,n", [(7000, N), (0, 50), (50, 50), (3, 17), (9990, N)])
def test_accuracy_interval_is_scipys_clopper_pearson(k, n):
    low, high = accuracy_interval(k, n)
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    assert low == pytest.approx(ci.low, abs=1e-9) and high == pytest.approx(ci.high, abs=1e-9)


def test_accuracy_interval_brackets_the_accuracy():
    low, high = accuracy_interval(7000, N)
    assert low < 0.7 < high and high - low == pytest.approx(0.018, abs=1e-3)
    with pytest.raises(ValueError, match="need 0 <= correct <= n"):
        accuracy_interval(11, 10)


def test_paired_difference_counts_discordant_examples_and_maps_their_exact_interval():
    a = np.array([1, 1, 1, 0, 0, 1] * 100, dtype=bool)
    b = np.array([1, 0, 0, 1, 0, 1] * 100, dtype=bool)
    d = paired_difference(a, b)
    assert (d.gained, d.lost, d.n) == (200, 100, 600) and d.delta == pytest.approx(100 / 600)
    pi = stats.binomtest(200, 300).proportion_ci(0.95, method="exact")
    assert d.low == pytest.approx(300 * (2 * pi.low - 1) / 600) and d.high == pytest.approx(300 * (2 * pi.high - 1) / 600)
    assert d.p_greater == pytest.approx(stats.binomtest(200, 300, alternative="greater").pvalue)
    assert d.low < d.delta < d.high
    same = paired_difference(a, a)
    assert (same.delta, same.low, same.high, same.p_greater) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("relation,low,high,expected", [
    ("above", 0.001, 0.02, REPRODUCED), ("above", -0.02, -0.001, CONTRADICTED), ("above", -0.01, 0.01, UNDECIDED),
    ("below", -0.02, -0.001, REPRODUCED), ("below", 0.001, 0.02, CONTRADICTED),
    ("tie", -0.005, 0.008, REPRODUCED), ("tie", 0.011, 0.03, CONTRADICTED), ("tie", -0.005, 0.02, UNDECIDED),
])
def test_decide_reads_the_interval(relation, low, high, expected):
    assert decide(relation, low, high, margin=0.01) == expected


def test_a_claim_combines_its_comparisons():
    assert combine([REPRODUCED, REPRODUCED]) == REPRODUCED
    assert combine([REPRODUCED, UNDECIDED]) == UNDECIDED
    assert combine([REPRODUCED, CONTRADICTED, UNDECIDED]) == CONTRADICTED
    assert combine([CONTRADICTED, MISSING]) == MISSING


def cell(label, eps, trained, init):
    """A reference cell holding per-example correctness (``trained``, ``init``: boolean vectors)."""
    return {"label": label, "target_epsilon": eps, "error": None,
            "vs_init": {m: {"n": len(trained)} for m in (LINEAR, KNN)},
            "correct": {"trained": {m: pack_correct(trained) for m in (LINEAR, KNN)},
                        "init": {m: pack_correct(init) for m in (LINEAR, KNN)}}}


def planted(acc_a, acc_b, rng, n=N):
    """Two cells 'a' and 'b' at epsilon 1 right on each test example with the given accuracies, as encoders are:
    mostly on the same examples (an example's difficulty u, jittered by 0.06 per encoder)."""
    u = rng.random(n)
    init = u + 0.06 * rng.random(n) < 0.75
    a, b = u + 0.06 * rng.random(n) < acc_a + 0.03, u + 0.06 * rng.random(n) < acc_b + 0.03
    return {"cells": [cell("a", 1.0, a, init), cell("b", 1.0, b, init)]}


ABOVE = UtilityClaim("a-above-b", "P", "T1", "a above b", "above", (Comparison("a", 1.0, "b", 1.0, LINEAR),), "")
TIE = UtilityClaim("a-ties-b", "P", "T1", "a ties b", "tie", (Comparison("a", 1.0, "b", 1.0, KNN),), "")
OVER_INIT = UtilityClaim("a-over-init", "P", "T1", "a above its init", "above",
                         (Comparison("a", 1.0, "init", 1.0, LINEAR),), "")


def test_planted_orderings_get_their_verdicts():
    rng = np.random.default_rng(1)
    claims = [ABOVE, TIE, OVER_INIT]
    better = {v.claim.id: v.verdict for v in judge(planted(0.85, 0.80, rng), claims)}
    assert better == {"a-above-b": REPRODUCED, "a-ties-b": CONTRADICTED, "a-over-init": REPRODUCED}
    worse = {v.claim.id: v.verdict for v in judge(planted(0.70, 0.80, rng), claims)}
    assert worse == {"a-above-b": CONTRADICTED, "a-ties-b": CONTRADICTED, "a-over-init": CONTRADICTED}
    equal = {v.claim.id: v.verdict for v in judge(planted(0.80, 0.80, rng), claims)}
    assert equal["a-above-b"] == UNDECIDED and equal["a-ties-b"] == REPRODUCED
    small = {v.claim.id: v.verdict for v in judge(planted(0.80, 0.80, rng, n=200), claims)}
    assert small["a-ties-b"] == UNDECIDED  # 200 test examples cannot bound a difference within 1 point
    assert judge({"cells": []}, claims)[0].verdict == MISSING


def false_contradictions(rng, reps: int, alpha: float) -> float:
    """How often a register of 40 true claims 'a_i above b_i' at the boundary (equal accuracies, independent pairs)
    reads 'contradicted' anywhere, judged at family-wise ``alpha``."""
    claims = [UtilityClaim(f"c{i}", "P", "T", "a above b", "above", (Comparison(f"a{i}", 1.0, f"b{i}", 1.0, LINEAR),),
                           "") for i in range(40)]
    hits = 0
    for _ in range(reps):
        cells = []
        for i in range(40):
            pair = planted(0.8, 0.8, rng, n=2000)["cells"]
            cells += [{**pair[0], "label": f"a{i}"}, {**pair[1], "label": f"b{i}"}]
        hits += any(v.verdict == CONTRADICTED for v in judge({"cells": cells}, claims, alpha=alpha))
    return hits / reps


def test_true_claims_are_contradicted_at_most_at_the_family_level_and_an_uncorrected_judge_is_caught():
    """The register's judge (alpha 5% over its M comparisons, Bonferroni) contradicts a register of true claims in
    about 2.5% of replicates (one side of each interval); the planted judge without the correction (5% per
    comparison: alpha x M) in about 1 - 0.975^40 = 64%."""
    sound = false_contradictions(np.random.default_rng(2), 80, 0.05)
    assert sound <= 0.08  # P(Binomial(80, 0.025) > 6) < 0.01
    uncorrected = false_contradictions(np.random.default_rng(3), 80, 0.05 * 40)
    assert uncorrected >= 0.4


def test_loss_claims_read_the_alm_curve():
    def row(mech, loss, std=0.002):
        return {"mechanism": mech, "epsilon": 1.0, "utility_loss_mean": loss, "utility_loss_std": std, "draws": 20}

    reference = {"cells": [{"label": "alm", "target_epsilon": 1.0, "error": None,
                            "curve": [row("logistic", 0.010), row("laplace", 0.011), row("gaussian-zcdp", 0.05)]}]}
    claims = [LossClaim("t", "ALM", "S6", "", "logistic", "tie", (1.0,), "", other="laplace"),
              LossClaim("b", "ALM", "S6", "", "logistic", "below", (1.0,), "", other="gaussian-zcdp"),
              LossClaim("f", "ALM", "A", "", "logistic", "below", (1.0,), "", threshold=0.05),
              LossClaim("g", "ALM", "A", "", "gaussian-zcdp", "below", (1.0,), "", threshold=0.01),
              LossClaim("m", "ALM", "A", "", "logistic", "below", (10.0,), "", threshold=0.05)]
    verdicts = {v.claim.id: v.verdict for v in judge(reference, claims)}
    assert verdicts == {"t": REPRODUCED, "b": REPRODUCED, "f": REPRODUCED, "g": CONTRADICTED, "m": MISSING}


def test_the_register_names_known_cells_and_unique_ids():
    """Every comparison names a label of the shipped suite (or 'init'), an epsilon the suite runs it at, and a
    metric the cells keep; ids are unique."""
    from privaudit.audit.suite.load import load_suite

    suite = load_suite("suites/benchmark-fashion-mnist.toml")
    cells = {(c.defense.label, c.target_epsilon) for c in suite.cells()}
    claims = utility_claims()
    assert len({c.id for c in claims}) == len(claims)
    for claim in claims:
        if isinstance(claim, UtilityClaim):
            for comp in claim.comparisons:
                assert (comp.a, comp.eps_a) in cells, (claim.id, comp)
                assert comp.b == "init" or (comp.b, comp.eps_b) in cells, (claim.id, comp)
                assert comp.metric in (LINEAR, KNN)
        else:
            assert all((claim.cell, eps) in cells for eps in claim.epsilons), claim.id


def test_privaudit_claims_lists_the_utility_claims_with_the_committed_references_verdicts(monkeypatch):
    """The listing judges the committed reference (the same verdicts as the page), and says so when there is none."""
    import privaudit.audit.benchmark.listing as listing

    reference = listing.load_committed()
    assert reference is not None, "the benchmark's reference is committed with the page"
    rows = listing.utility_rows()
    assert [r[0] for r in rows] == [c.id for c in utility_claims()]
    assert [r[3] for r in rows] == [v.verdict for v in judge(reference)]
    assert {r[0] for r in listing.utility_rows("ALM")} == {c.id for c in utility_claims() if c.paper == "ALM"}
    monkeypatch.setattr(listing, "reference_path", lambda: None)
    assert {r[3] for r in listing.utility_rows()} == {"no benchmark reference here"}
