"""Contrastive losses as plain functions of embeddings (and of similarity matrices)."""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch

from privaudit.core.errors import one_of
from privaudit.defenses.losses.barlow import (BARLOW_LAMBDA, barlow_twins, cross_correlation, feature_mean, feature_sse,
                                    feature_stats)
from privaudit.defenses.losses.group_infonce import group_info_nce, group_info_nce_dual
from privaudit.defenses.losses.infonce import info_nce, info_nce_from_logits, nt_xent, nt_xent_from_similarity
from privaudit.defenses.losses.reduce import REDUCTIONS, reduce_terms
from privaudit.defenses.losses.similarity import cosine_similarity_matrix
from privaudit.defenses.losses.spreadout import spreadout, spreadout_from_similarity

Objective = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

OBJECTIVES = ("simclr", "infonce", "barlow", "spreadout")


def make_objective(name: str, *, temperature: float = 0.5, barlow_lambda: float = BARLOW_LAMBDA,
                   reduction: str = "mean") -> Objective:
    """The batch objective L(z1, z2) named ``name``, its per-example terms reduced by ``reduction``.

    ``simclr``: NT-Xent (DPCL Eq. 3); ``infonce``: DP-GCL Eq. 4; ``barlow``: DPCL Eq. 5, a sum over the
    D x D cross-correlation terms whatever ``reduction`` says (its terms are not per example);
    ``spreadout``: Logit-DP Def. 2.3. ``mean`` is the batch average training optimises; the DP methods use
    ``sum`` (DP-GCL Eqs. 4-13, Logit-DP Eq. 1): the sum is what the sensitivity analyses bound, and a
    data-independent normaliser is applied after the noise.
    """
    if name == "simclr":
        return partial(nt_xent, temperature=temperature, reduction=reduction)
    if name == "infonce":
        return partial(info_nce, temperature=temperature, reduction=reduction)
    if name == "barlow":
        return partial(barlow_twins, lambd=barlow_lambda, reduction="sum")
    if name == "spreadout":
        return partial(spreadout, reduction=reduction)
    raise one_of("loss", name, OBJECTIVES)


__all__ = [
    "BARLOW_LAMBDA", "OBJECTIVES", "REDUCTIONS", "Objective", "barlow_twins", "cosine_similarity_matrix",
    "cross_correlation", "feature_mean", "feature_sse", "feature_stats", "group_info_nce", "group_info_nce_dual",
    "info_nce", "info_nce_from_logits",
    "make_objective", "nt_xent", "nt_xent_from_similarity", "reduce_terms", "spreadout",
    "spreadout_from_similarity",
]
