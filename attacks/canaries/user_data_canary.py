"""Black-box canary users for the user-level federated defenses (DP-FedEmb, DP-FedAvg): whole users of
inserted images, scored from the released model alone.

The white-box audit (:mod:`privaudit.attacks.canaries.user_canary`) plants Dirac updates in the aggregation; this one
touches nothing inside the defense. The auditor adds canary **users** to the population -- each holding
``examples_per_user`` distinct uniform-noise images under one label (its identity; the images come from
the attacker's own stream and never overlap the target's data) -- trains the defense once, and scores a
canary user by the **cohesion of its embeddings**: the mean pairwise cosine similarity of the released
encoder's features h of the user's images. DP-FedEmb's local objective (Sec. 2.3, Algorithm 1: a softmax
over the virtual client's own identities) pulls one user's examples together, so the users the model
trained on are the ones whose images it maps close to each other; noise images share nothing else.

Two games, chosen by the relation the bound is stated at (``relation``; default the claim's, replace-one
per user for DP-FedEmb and DP-FedAvg, App. C):

* ``replace-one``: m paired slots. Slot i holds two candidate canary users A_i and B_i; a fair coin puts
  exactly one of them in the population, so the number of users never depends on the coins. The slot's
  score is s(A_i) - s(B_i); fixing every other coin, the populations with A_i and with B_i are replace-one
  neighbours at the user level, which is all the one-run argument needs
  (:func:`privaudit.attacks.bounds.one_run.paired_one_run_bound`'s proof sketch, with a user as the unit).
* ``add-remove``: m canary users, each in the population with probability 1/2; score s(user).

The bound is the larger of Steinke et al.'s and the f-DP one-run bound at beta / 2 each
(:func:`privaudit.attacks.bounds.fdp.best_one_run_bound`) with ``unit = "user"``, guesses fixed by the configuration.
The real users keep the partition the defense gives them (the canary users get fresh user ids), and the
canary run calibrates its noise to the same target epsilon for its own population, as a user would.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from privaudit.attacks.base import Attack, AttackConfig, Target
from privaudit.attacks.bounds.fdp import best_one_run_bound
from privaudit.attacks.bounds.lower_bound import check_relation_unit
from privaudit.attacks.bounds.one_run import default_guesses
from privaudit.attacks.executor import Executor
from privaudit.attacks.result import AttackResult
from privaudit.attacks.membership.shadow_models import TrainJob, train_models, with_pool
from privaudit.core.datasets import Split
from privaudit.core.errors import ConfigError, check_probability
from privaudit.defenses.training.seeding import numpy_rng, torch_generator

SUPPORTED = (("replace-one", "user"), ("add-remove", "user"))


@dataclass(frozen=True)
class UserDataCanaryConfig(AttackConfig):
    """``slots``: canary-user slots (paired: 2 candidate users each); ``examples_per_user``: images per canary
    user (None: the defense's ``examples_per_user``); ``relation``: None = the claim's;
    ``k_fdp_fraction``: the f-DP bound's guesses as a fraction of the slots."""

    slots: int = 200
    examples_per_user: int | None = None
    relation: str | None = None
    k_fdp_fraction: float = 0.1

    def validate(self) -> None:
        super().validate()
        if self.slots < 2:
            raise ConfigError(f"slots: must be >= 2, got {self.slots!r}")
        if self.examples_per_user is not None and self.examples_per_user < 1:
            raise ConfigError(f"examples_per_user: must be >= 1, got {self.examples_per_user!r}")
        check_probability("k_fdp_fraction", self.k_fdp_fraction)
        if self.relation is not None:
            check_relation_unit(self.relation, "user", SUPPORTED, what="attack 'user-data-canary'")


def canary_users(n_users: int, copies: int, shape: tuple[int, ...], num_classes: int, seed: int,
                 first_user: int) -> Split:
    """``n_users`` canary users, each ``copies`` distinct uniform-noise images under one random label: rows
    grouped by user, ``users`` = first_user, first_user + 1, ...; ``index`` -1, -2, ... (never a raw-dataset
    index)."""
    gen = torch_generator(seed, "user-data-canaries")
    m = n_users * copies
    images = torch.rand((m, *shape), generator=gen)
    labels = torch.randint(0, num_classes, (n_users,), generator=gen)
    return Split(images, labels.repeat_interleave(copies), -1 - torch.arange(m, dtype=torch.int64),
                 first_user + torch.arange(n_users, dtype=torch.int64).repeat_interleave(copies))


@dataclass(frozen=True)
class UserCohesion:
    """Per user: the mean pairwise cosine similarity of the features h of its ``copies`` images (rows grouped
    by user, ``copies`` each): (n_users,)."""

    copies: int

    def __call__(self, trained, split: Split, info) -> np.ndarray:
        feats = torch.nn.functional.normalize(trained.features(split.x).double(), dim=1)
        feats = feats.view(-1, self.copies, feats.shape[1])
        gram = feats @ feats.transpose(1, 2)
        off = gram.sum(dim=(1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(dim=1)
        return (off / (self.copies * (self.copies - 1))).numpy()


class UserDataCanaryAudit(Attack):
    """Black-box canary users (whole users of inserted images), paired for replace-one user-level claims."""

    name = "user-data-canary"
    Config = UserDataCanaryConfig
    needs_model = False

    def run(self, target: Target, *, executor: Executor | None = None, progress: bool = False) -> AttackResult:
        from privaudit.defenses.fedemb.defense import _Federated

        cfg = self.config
        defense = self.audited_defense(target, _Federated, "users to add canary users to; use it with dp-fedemb or "
                                                           "dp-fedavg")
        # the federated defenses' claim (round_claim): replace-one, per user
        relation = self.audited_relation(target, "replace-one", "user", SUPPORTED, name_the_defense=True)
        paired = relation == "replace-one"
        members = target.data.train
        owner = defense.users(target.data, target.seed).owner(len(members))
        if bool((owner < 0).any()):
            raise ConfigError("attack 'user-data-canary': some members belong to no user")
        members = dataclasses.replace(members, users=owner.to(torch.int64))
        copies = cfg.examples_per_user or int(defense.config.examples_per_user)
        if copies < 2:
            raise ConfigError(f"examples_per_user: a canary user's cohesion needs >= 2 images, got {copies}")
        n_candidates = 2 * cfg.slots if paired else cfg.slots
        seed = target.derive_seed("user-data-canary")
        cands = canary_users(n_candidates, copies, tuple(members.x.shape[1:]), target.data.info.num_classes,
                             seed, first_user=int(owner.max()) + 1)
        coin = numpy_rng(seed, "coins").random(cfg.slots) < 0.5
        user_in = np.concatenate([coin, ~coin]) if paired else coin  # candidates A_0..A_m-1, then B_0..B_m-1
        rows_in = np.repeat(user_in, copies)
        pool = Split.concat([members, cands])
        n = len(members)
        data = with_pool(target.data, pool, np.concatenate([np.ones(n, bool), rows_in]))
        probe_rows = n + np.arange(n_candidates * copies)
        probe = UserCohesion(copies)
        job = TrainJob(target.defense_ref, target.budget, data, target.derive_seed("user-data-canary", "run"),
                       data.membership.numpy(), probe=probe, probe_rows=probe_rows, device=target.device)
        user_scores = np.asarray(train_models([job], executor)[0], dtype=np.float64)
        scores = user_scores[:cfg.slots] - user_scores[cfg.slots:] if paired else user_scores
        k_pos, k_neg = default_guesses(cfg.slots, cfg.k_fraction)
        k_pos = k_pos if cfg.k_pos is None else cfg.k_pos
        k_neg = k_neg if cfg.k_neg is None else cfg.k_neg
        k_fdp = max(1, int(round(cfg.k_fdp_fraction * cfg.slots)))
        delta = cfg.delta if cfg.delta is not None else target.claim_delta
        bound = best_one_run_bound(scores, coin, k_pos=k_pos, k_neg=k_neg, k_fdp=k_fdp, beta=cfg.beta, delta=delta,
                                   relation=relation, unit="user")
        note = (f"black-box: {cfg.slots} " + ("paired canary-user slots (a fair coin picks which of two users "
                                              "exists)" if paired else "canary users (each in with probability 1/2)")
                + f", each user {copies} noise images under one label, scored by the cohesion of their embeddings")
        return AttackResult(
            attack=self.name, variant="paired" if paired else "add-remove", scores=scores, membership=coin,
            index=np.arange(cfg.slots), config={**self.config_dict(), "examples_per_user": copies,
                                                "defense": target.defense},
            counts={"n_slots": cfg.slots, "n_candidate_users": n_candidates, "n_real_users": int(owner.max()) + 1,
                    "examples_per_user": copies, "n_training_runs": 1},
            bound=dataclasses.replace(bound, notes=bound.notes + (note,)),
            extras={"user_scores": user_scores.tolist()})
