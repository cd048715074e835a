"""The claims register: coverage of the papers' claims and the verdicts on a representative subset."""

import pytest

from privaudit.accountants.paper_claims import PAPERS, check_claim, paper_claims

CLAIMS = {c.id: c for c in paper_claims()}


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
    check = check_claim(CLAIMS["fedemb-tab1-ftrl-rho"])
    assert check.verdict == "reproduced" and round(check.value, 2) == 1.28
    assert round(check.epsilons["tree"].epsilon, 2) == 9.67


def test_dpgcl_table9_rows_are_optimistic_or_conservative():
    imagenet = check_claim(CLAIMS["dpgcl-imagenet"])
    assert imagenet.verdict == "conservative" and imagenet.value < 5
    cifar = check_claim(CLAIMS["dpgcl-cifar-10"])
    assert cifar.verdict == "optimistic" and cifar.recipe_verdict == "not reproduced"
    assert 11.0 < cifar.value < 11.4 and cifar.noise_needed["recipe"] > 1.07
    assert cifar.epsilons["pld"].epsilon == pytest.approx(cifar.epsilons["prv"].epsilon, rel=0.01)
    (label, value, _), = cifar.alternatives
    assert "50,000" in label and value <= 10.0


def test_logit_dp_corollary_drops_a_factor_two():
    check = check_claim(CLAIMS["logit-cor44"])
    assert check.recipe_verdict == "not reproduced"
    assert check.recipe_value / float(check.claim.stated) == pytest.approx(2 ** 0.5, rel=1e-4)
    assert check.verdict == "optimistic"  # exact Gaussian epsilon exceeds the corollary's
    assert check.epsilons["gaussian"].epsilon == pytest.approx(check.epsilons["pld"].epsilon, rel=0.01)


def test_tight_verdict_taxonomy_on_fast_rows():
    from privaudit.accountants.paper_claims import VERDICTS

    imagenet = check_claim(CLAIMS["dpgcl-imagenet"]).tight
    assert imagenet.verdict == "conservative" and imagenet.upper < 0.8 * 10
    fmnist = check_claim(CLAIMS["dpgcl-f-mnist"]).tight  # RDP says 10.88 > 10, the PLD bracket ends below 10.05
    assert fmnist.verdict == "holds; paper's method does not show it"
    assert fmnist.paper_accountant == "rdp" and fmnist.paper_value > 10.05 >= fmnist.upper
    logit = check_claim(CLAIMS["logit-cor44"]).tight  # exact Gaussian: a zero-width bracket
    assert logit.verdict == "false" and logit.accountant == "gaussian" and logit.lower == logit.upper
    assert logit.noise_needed > 5 and logit.factor == pytest.approx(0.7255 / 0.6852, rel=1e-3)
    ftrl = check_claim(CLAIMS["fedemb-tab1-ftrl-rho"]).tight
    assert ftrl.verdict == "holds" and ftrl.metric == "rho"
    for t in (imagenet, fmnist, logit, ftrl):
        assert t.verdict in VERDICTS and t.to_dict()["accountant"]


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
def test_every_claim_evaluates():
    from privaudit.accountants.paper_claims import VERDICTS

    for claim in paper_claims():
        check = check_claim(claim)
        assert check.verdict in ("reproduced", "optimistic", "conservative")
        assert check.to_dict()["id"] == claim.id
        assert check.tight.verdict in VERDICTS
        if check.tight.verdict == "false":  # never on the strength of RDP alone
            assert check.tight.lower is not None and check.tight.accountant != "rdp"
