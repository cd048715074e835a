"""The constructed pairs each claim's search starts from, by the name the register gives
(:func:`~privaudit.audit.sensitivity.builders.image_builder`'s ``seeds``): the constructions that reach
the claim's worst case first, then every construction that applies to the target."""

from __future__ import annotations

import torch

from privaudit.audit.sensitivity.domains import Pair
from privaudit.audit.sensitivity.extremal.add_flip import add_flip_seeds
from privaudit.audit.sensitivity.extremal.chunk import chunk_seeds
from privaudit.audit.sensitivity.extremal.flip import flip_seeds
from privaudit.audit.sensitivity.extremal.group_clip import group_clip_seeds
from privaudit.audit.sensitivity.extremal.images import image_seeds
from privaudit.audit.sensitivity.extremal.logit import logit_seeds
from privaudit.audit.sensitivity.extremal.split_flip import split_flip_seeds
from privaudit.audit.sensitivity.extremal.spreadout import spreadout_seeds
from privaudit.audit.sensitivity.evaluator import Target


def gradient_seeds(target: Target, gen: torch.Generator) -> list[Pair]:
    """:func:`~.images.image_seeds` plus the constructed-parameter pairs that apply to the target."""
    return (image_seeds(target, gen) + flip_seeds(target, gen) + add_flip_seeds(target, gen)
            + chunk_seeds(target, gen) + logit_seeds(target, gen))


def plain_simclr_seeds(target: Target, gen: torch.Generator) -> list[Pair]:
    """:func:`~.split_flip.split_flip_seeds` first (they reach the bound), then :func:`gradient_seeds`."""
    return split_flip_seeds(target, gen) + gradient_seeds(target, gen)


def group_clip_pairs(target: Target, gen: torch.Generator) -> list[Pair]:
    """:func:`~.group_clip.group_clip_seeds` first, then :func:`gradient_seeds` (DP-GCL Eq. 8's constructed pairs)."""
    return group_clip_seeds(target, gen) + gradient_seeds(target, gen)


def spreadout_pairs(target: Target, gen: torch.Generator) -> list[Pair]:
    """:func:`~.spreadout.spreadout_seeds` first, then :func:`gradient_seeds` (Logit-DP Lemma 4.6's constructed pairs)."""
    return spreadout_seeds(target, gen) + gradient_seeds(target, gen)
