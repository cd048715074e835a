"""DPCL's similarity reach (attacks/bounds/similarity_reach.py): the witness is attained, the ceiling is never
exceeded, and the attainable epsilon is the claim's at full reach and the gradient's alone at none."""

from __future__ import annotations

import math

import pytest
import torch

from privaudit.attacks.bounds.similarity_reach import (attainable_epsilon, attainable_multiplier, similarity_reach,
                                                       witness_views)
from privaudit.core.errors import ConfigError
from privaudit.defenses.dp.accounting import Mechanism, build_claim, claim_epsilon, plan_sampling


def unit_rows(n: int, d: int, offset: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64) + offset, dim=1)


def frobenius_change(others: torch.Tensor, changed: torch.Tensor, replaced: torch.Tensor) -> float:
    """||S(Z) - S(Z')||_F / Delta_S with S = Z Z^T (DPCL's similarity) and Delta_S = 4 sqrt(2|B| - 1) (Thm. 1)."""
    return float(frobenius_changes(others, changed[None], replaced[None])[0])


def frobenius_changes(others: torch.Tensor, changed: torch.Tensor, replaced: torch.Tensor) -> torch.Tensor:
    """:func:`frobenius_change` of many replacements at once (leading dimension)."""
    rest = others.expand(len(changed), *others.shape)
    z, zp = torch.cat([changed, rest], dim=1), torch.cat([replaced, rest], dim=1)
    change = z @ z.transpose(1, 2) - zp @ zp.transpose(1, 2)
    return change.flatten(1).norm(dim=1) / (4 * math.sqrt(z.shape[1] - 1))


@pytest.mark.parametrize("offset", [0.0, 1.0, 4.0])
def test_the_witness_is_attained_and_no_replacement_exceeds_the_ceiling(offset):
    others = unit_rows(14, 4, offset, seed=1)
    r = similarity_reach(others)
    assert r.batch_size == 8 and r.witness <= r.ceiling <= 1.0
    a, ap = witness_views(others)
    assert frobenius_change(others, a, ap) == pytest.approx(r.witness, rel=1e-12)
    pairs = torch.nn.functional.normalize(torch.randn(4000, 4, 4, generator=torch.Generator().manual_seed(2),
                                                      dtype=torch.float64), dim=-1)
    seen = float(frobenius_changes(others, pairs[:, :2], pairs[:, 2:]).max())
    assert seen <= r.ceiling + 1e-12


def test_collinear_others_reach_the_theorem():
    others = torch.tensor([[1.0, 0.0]]).repeat(30, 1)
    r = similarity_reach(others)
    # the theorem's 4 sqrt(2|B| - 1) counts the unchanged diagonal: even collinear rows reach sqrt(30.5 / 31) of it
    assert r.witness == pytest.approx(math.sqrt(30 / 31)) and r.ceiling == pytest.approx(math.sqrt(30.5 / 31))


def test_rows_must_be_unit_and_an_even_count():
    with pytest.raises(ConfigError, match="L2-normalised"):
        similarity_reach(2 * unit_rows(4, 3, 0.0, 0))
    with pytest.raises(ConfigError, match="even count"):
        similarity_reach(unit_rows(3, 3, 0.0, 0))


def dpcl_claim():
    plan = plan_sampling("poisson", 6000, 64, 2)
    mechanisms = [Mechanism("gradient", 0.2, 0.5), Mechanism("similarity", 4 * math.sqrt(127), 0.5)]
    return build_claim(plan, mechanisms, 1.5, 1e-5, paper_accountant="pld", source="test")


def test_attainable_epsilon_is_the_claims_at_full_reach_and_the_gradients_alone_at_none():
    claim = dpcl_claim()
    full = claim_epsilon(claim, "pld")
    assert attainable_epsilon(claim, {}) == pytest.approx(full, rel=1e-9)
    assert attainable_epsilon(claim, {"similarity": 1.0}, "rdp") == pytest.approx(claim_epsilon(claim), rel=1e-9)
    gradient_only = build_claim(plan_sampling("poisson", 6000, 64, 2), [Mechanism("gradient", 0.2)], 1.5,
                                1e-5, paper_accountant="pld", source="test")
    assert attainable_epsilon(claim, {"similarity": 0.0}, "rdp") == pytest.approx(claim_epsilon(gradient_only),
                                                                                 rel=1e-6)
    ladder = [attainable_epsilon(claim, {"similarity": r}, "rdp") for r in (0.0, 0.5, 0.9, 1.0)]
    assert ladder == sorted(ladder) and ladder[0] < 0.75 * ladder[-1]
    assert attainable_multiplier({"gradient": 1.5, "similarity": 1.5}, {"similarity": 0.5}) == pytest.approx(
        (1 / 1.5 ** 2 + 0.25 / 1.5 ** 2) ** -0.5)
    with pytest.raises(ConfigError, match="not among the claim's mechanisms"):
        attainable_multiplier({"gradient": 1.5}, {"similarity": 0.5})


def test_each_batch_leaves_the_first_example_out_and_the_page_divides_by_what_is_attainable():
    from privaudit.audit.benchmark.leakage_page import reach_lines
    from privaudit.audit.benchmark.similarity_reach import batch_reaches, summary

    x = torch.rand(40, 1, 3, 3, generator=torch.Generator().manual_seed(3)) + 0.5

    def embed(v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(v.flatten(1), dim=1)

    rows = batch_reaches(embed, x, lambda v, g: v, batch_size=8, batches=3, seed=0)
    idx = torch.randperm(40, generator=torch.Generator().manual_seed(0))[:8]
    z = embed(torch.cat([x[idx], x[idx]]))
    assert rows[0]["ceiling"] == pytest.approx(similarity_reach(torch.cat([z[1:8], z[9:]])).ceiling, rel=1e-12)
    s = summary(rows)
    assert s["ceiling_max"] == max(r["ceiling"] for r in rows) and s["witness_mean"] <= s["ceiling_mean"]
    cell = {"id": "fashion-mnist/dpcl-simclr/eps=1/seed=0", "target_epsilon": 1.0, "batches": 3, "claim": 1.0,
            "gradient_share": 0.3, "init": {"ceiling_max": 0.95, "attainable_epsilon": 0.7}, "trained": {"ceiling_max": 0.9,
                                                                              "attainable_epsilon": 0.8}}
    page = "\n".join(reach_lines({"cells": [cell]}, {("dpcl-simclr", 1.0): {"eps_lower_bound": 0.3}}))
    assert "| dpcl-simclr at 1 | 0.950 | 0.900 | 1.000 | 0.800 | 0.800 | 0.300 | 0.375 |" in page
    assert "attain 0.800 to 0.800 of the claim" in page and "observe the gradient release, not the noised" in page
    whole = {"eps_lower_bound": 0.9, "epsilon": 1.0, "claim": 1.0, "ratio": 0.9, "release_probes": 512}
    page = "\n".join(reach_lines({"cells": [cell]}, {("dpcl-simclr", 1.0): whole}))  # the similarity probes' bound
    assert "| 1.125 |" in page and "on 512 entries" in page and "reaches 0.900 to 0.900 of the claim" in page
