"""The claims register: coverage of the papers' claims and the verdicts on a representative subset."""

import functools
import re

import pytest

from privaudit.accountants.paper_claims import PAPERS, check_claim, paper_claims

CLAIMS = {c.id: c for c in paper_claims()}
NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"


@functools.cache
def checked(claim_id: str):
    """Each claim checked once per test session (the accountants take seconds per claim)."""
    return check_claim(CLAIMS[claim_id])


def assert_text_is_true(verdict: dict) -> None:
    """Every comparison a verdict's reason prints ("a <= b", "a > b", "a < b") holds for the printed numbers, and the
    numbers it names are the verdict's own: "gives U" is the bracket's upper end, "lower end ... L" its lower end,
    "above the claimed C" is a claim the upper end exceeds, "up to S" the tolerance the upper end stays within."""
    reason, (lower, upper), claimed = verdict["reason"], verdict["bracket"], verdict["claimed"]
    ops = {"<=": float.__le__, "<": float.__lt__, ">": float.__gt__}
    found = re.findall(rf"({NUMBER}) (<=|<|>) ({NUMBER})", reason)
    for a, op, b in found:
        assert ops[op](float(a), float(b)), (verdict["verdict"], reason)
    gives = re.search(rf" gives ({NUMBER})", reason)
    if gives:
        assert float(gives.group(1)) == pytest.approx(upper, rel=1e-3), reason
    if "above the claimed" in reason:
        assert upper > claimed and f"up to {float(re.search(rf'up to ({NUMBER})', reason).group(1)):.4g}" in reason
        assert upper <= float(re.search(rf"up to ({NUMBER})", reason).group(1)) * (1 + 1e-3), reason
    if verdict["verdict"] == "false":
        assert lower is not None and float(found[0][0]) == pytest.approx(lower, rel=1e-3), reason
    if verdict["verdict"].startswith("holds"):
        assert found or "within its printed precision" in reason, reason


def test_register_covers_the_issue_list():
    ids = set(CLAIMS)
    # DPCL Sec. 5.2-5.3: every published noise multiplier
    assert {"dpcl-simclr-dpsgd", "dpcl-simclr-dpsim", "dpcl-barlow-dpsgd", "dpcl-barlow-dpmv"} <= ids
    # DP-GCL Table 9: all nine datasets
    assert {c.source for c in CLAIMS.values() if c.paper == "DP-GCL"} == {
        f"Table 9 ({d})" for d in ("F-MNIST", "CIFAR-10", "EuroSAT", "Camelyon", "ImageNet", "PEDES", "RSTPReid",
                                   "Fashion", "ROCO")}
    # DP-FedEmb Sec. 3.1-3.4 and App. D
    sources = " ".join(c.source for c in CLAIMS.values() if c.paper == "DP-FedEmb")
    for section in ("Sec. 3.1", "Sec. 3.2", "Sec. 3.4", "App. D.2", "App. D.6"):
        assert section in sources
    # Logit-DP Cor. 4.4
    assert any(c.paper == "Logit-DP" and c.source == "Cor. 4.4" for c in CLAIMS.values())
    assert {c.paper for c in CLAIMS.values()} == set(PAPERS)
    assert all(c.kind in ("epsilon", "noise", "bound") for c in CLAIMS.values())


def test_fedemb_recipe_reproduces_but_substitute_one_sensitivity_is_twice_the_clip():
    check = check_claim(CLAIMS["fedemb-tab1-fedemb"])
    assert check.recipe_verdict == "reproduced" and round(check.recipe_value, 2) == 3.90
    assert check.verdict == "optimistic" and check.value > 10
    # the tight accountant (PLD of the without-replacement dominating pair) applies and shows the number false
    assert check.tight.verdict == "false" and check.tight.accountant.startswith("pld")
    assert 9.0 < check.tight.lower <= check.tight.upper < check.value and check.tight.noise_needed > 1.28


def test_fedemb_emnist_is_not_reproduced_by_its_stated_accountant_but_by_the_superseded_one():
    check = check_claim(CLAIMS["fedemb-emnist"])
    assert check.recipe_verdict == "not reproduced"
    assert check.recipe_gap == pytest.approx(0.65, abs=0.01)  # 15.3 vs 9.28
    (label, value, _), = check.alternatives
    assert "PLD" in label and value == pytest.approx(9.28, rel=0.005)


def test_dp_ftrl_numbers_reproduce():
    check = checked("fedemb-tab1-ftrl-rho")
    assert check.verdict == "reproduced" and round(check.value, 2) == 1.28
    assert round(check.epsilons["tree"].epsilon, 2) == 9.67


def test_dpgcl_table9_rows_are_optimistic_or_conservative():
    imagenet = checked("dpgcl-imagenet")
    assert imagenet.verdict == "conservative" and imagenet.value < 5
    cifar = check_claim(CLAIMS["dpgcl-cifar-10"])
    assert cifar.verdict == "optimistic" and cifar.recipe_verdict == "not reproduced"
    assert 11.0 < cifar.value < 11.4 and cifar.noise_needed["recipe"] > 1.07
    assert cifar.epsilons["pld"].epsilon == pytest.approx(cifar.epsilons["prv"].epsilon, rel=0.01)
    (label, value, _), = cifar.alternatives
    assert "50,000" in label and value <= 10.0


def test_logit_dp_corollary_drops_a_factor_two():
    check = checked("logit-cor44")
    assert check.recipe_verdict == "not reproduced"
    assert check.recipe_value / float(check.claim.stated) == pytest.approx(2 ** 0.5, rel=1e-4)
    assert check.verdict == "optimistic"  # exact Gaussian epsilon exceeds the corollary's
    assert check.epsilons["gaussian"].epsilon == pytest.approx(check.epsilons["pld"].epsilon, rel=0.01)


def test_tight_verdict_taxonomy_on_fast_rows():
    from privaudit.accountants.paper_claims import VERDICTS

    imagenet = checked("dpgcl-imagenet").tight
    assert imagenet.verdict == "conservative" and imagenet.upper < 0.8 * 10
    fmnist = checked("dpgcl-f-mnist").tight  # RDP says 10.88 > 10, the PLD bracket ends below 10.05
    assert fmnist.verdict == "holds; paper's method does not show it"
    assert fmnist.paper_accountant == "rdp" and fmnist.paper_value > 10.05 >= fmnist.upper
    logit = checked("logit-cor44").tight  # exact Gaussian: a zero-width bracket
    assert logit.verdict == "false" and logit.accountant == "gaussian" and logit.lower == logit.upper
    assert logit.noise_needed > 5 and logit.factor == pytest.approx(0.7255 / 0.6852, rel=1e-3)
    ftrl = checked("fedemb-tab1-ftrl-rho").tight
    assert ftrl.verdict == "holds" and ftrl.metric == "rho"
    for t in (imagenet, fmnist, logit, ftrl):
        assert t.verdict in VERDICTS and t.to_dict()["accountant"]


@pytest.mark.parametrize("claim_id", ["dpgcl-f-mnist", "dpgcl-camelyon", "dpgcl-imagenet", "fedemb-tab1-ftrl-rho",
                                      "logit-cor44"])
def test_verdict_text_states_the_tolerance_and_no_false_comparison(claim_id):
    """Every verdict kind on rows that check fast; ``test_every_claim_evaluates`` (slow) checks every row."""
    verdict = checked(claim_id).tight.to_dict()
    assert_text_is_true(verdict)
    if claim_id == "dpgcl-f-mnist":  # the tight upper end 10.04 is above the claimed 10: the text says why it holds
        assert "gives 10.04, above the claimed 10 but within its printed precision (up to 10.05: 0.5% relative)" \
            in verdict["reason"]
        assert "<= 10," not in verdict["reason"]


def test_printed_comparisons_get_the_digits_they_need():
    from privaudit.accountants.paper_claims.verdict import comparison

    assert comparison(10.04, "<=", 10.05) == "10.04 <= 10.05"
    assert comparison(10.00004, ">", 10.0) == "10.00004 > 10"  # 4 digits would print the false "10 > 10"
    assert comparison(0.38125, "<=", 0.381251) == "0.3812 <= 0.3813"  # true as printed at 4 digits
    for a, op, b in ((1.00000001, ">", 1.0), (2.0, "<", 2.0000000001)):
        left, _, right = comparison(a, op, b).partition(f" {op} ")
        assert {">": float.__gt__, "<": float.__lt__}[op](float(left), float(right))


def test_only_an_upper_bound_is_undecided_never_false():
    from privaudit.accountants.paper_claims import PaperClaim, Reading, _sgd, tight_verdict
    from privaudit.accountants import all_epsilons

    build = _sgd(steps=50, delta=1e-5, sampling="poisson", relation="add-remove", dataset_size=1000, batch_size=100)
    claim = PaperClaim("t", "DP-GCL", "test", "test", "epsilon", "0.5", ("1.0",), Reading("r", build, "rdp"))
    results = {k: v for k, v in all_epsilons(build([1.0])).items() if k == "rdp"}
    results["pld"] = all_epsilons(build([1.0]))["pld"]
    with_pld = tight_verdict(claim, results)
    assert with_pld.verdict == "false" and with_pld.accountant.startswith("pld")
    only_rdp = tight_verdict(claim, {"rdp": results["rdp"], "pld": results["pld"].__class__(
        "pld", None, 1e-5, "add-remove", "example", reason="not applicable")})
    assert only_rdp.verdict != "false"  # RDP is an upper bound: it cannot show a claim false


@pytest.mark.slow
def test_every_claim_evaluates(capsys):
    """Every row of ``privaudit claims``: a verdict of the taxonomy, never false on RDP alone, and a reason whose
    printed comparisons and numbers are true (:func:`assert_text_is_true`)."""
    import json

    from privaudit.accountants.paper_claims import VERDICTS
    from privaudit.audit.cli import main

    assert main(["claims", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [c.id for c in paper_claims()]
    for row in rows:
        assert row["checked"]["verdict"] in ("reproduced", "optimistic", "conservative")
        verdict = row["verdict"]
        assert verdict["verdict"] in VERDICTS
        if verdict["verdict"] == "false":  # never on the strength of RDP alone
            assert verdict["bracket"][0] is not None and verdict["accountant"] != "rdp"
        assert_text_is_true(verdict)
