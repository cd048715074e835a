"""Users and virtual clients for user-level DP (DP-FedEmb Sec. 2.3, Algorithm 1 lines 2–3).

* :func:`partition_users` — the privacy unit. A dataset's own user ids when it has them; otherwise a
  seeded partition in which each user holds few classes (the classes act as the user's identities,
  as DigiFace's users hold only their own face): the members are sorted by class, cut into shards
  of ``examples_per_user / classes_per_user`` examples of one class, and each user receives
  ``classes_per_user`` random shards (McMahan et al. 2017's pathological non-IID partition).
* :func:`plan_round` — each round samples ``clients_per_round * users_per_client`` distinct users
  uniformly without replacement (the sampling dp-accounting's replace-one RDP accountant covers,
  and what the paper simulates) and groups them consecutively into virtual clients, so every
  sampled user's data lands in exactly one virtual client and unsampled users in none.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privaudit.core.errors import ConfigError, check_positive


@dataclass(frozen=True)
class Users:
    """``examples[u]``: indices (into the training split) of user u's examples; ``source`` says where users came from."""

    examples: tuple[torch.Tensor, ...]
    source: str  # "dataset" (user ids) or "seeded shards"

    def __len__(self) -> int:
        return len(self.examples)

    def owner(self, n_examples: int) -> torch.Tensor:
        """User index of every example (-1 for examples no user holds)."""
        owner = torch.full((n_examples,), -1, dtype=torch.long)
        for u, idx in enumerate(self.examples):
            owner[idx] = u
        return owner

    def sizes(self) -> torch.Tensor:
        return torch.tensor([len(e) for e in self.examples])


def partition_users(labels: torch.Tensor, user_ids: torch.Tensor | None, gen: torch.Generator, *,
                    examples_per_user: int = 6, classes_per_user: int = 1) -> Users:
    """User-partitioned data: the dataset's user ids, else seeded single-class shards (see module doc)."""
    if user_ids is not None:
        ids, inverse = torch.unique(user_ids, return_inverse=True)
        return Users(tuple(torch.nonzero(inverse == u).flatten() for u in range(len(ids))), "dataset")
    check_positive("examples_per_user", examples_per_user)
    check_positive("classes_per_user", classes_per_user)
    if examples_per_user % classes_per_user:
        raise ConfigError(f"examples_per_user: must be a multiple of classes_per_user ({classes_per_user}), "
                          f"got {examples_per_user}")
    shard = examples_per_user // classes_per_user
    shards: list[torch.Tensor] = []
    for c in torch.unique(labels).tolist():
        idx = torch.nonzero(labels == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=gen)]
        # Cut the class into shards of `shard` examples; a short remainder joins the last shard.
        cuts = list(range(0, max(len(idx) - shard + 1, 1), shard)) or [0]
        for i, start in enumerate(cuts):
            stop = len(idx) if i == len(cuts) - 1 else start + shard
            shards.append(idx[start:stop])
    order = torch.randperm(len(shards), generator=gen).tolist()
    n_users = max(1, len(shards) // classes_per_user)
    groups: list[list[torch.Tensor]] = [[] for _ in range(n_users)]
    for rank, s in enumerate(order):
        groups[min(rank // classes_per_user, n_users - 1)].append(shards[s])
    examples = tuple(torch.sort(torch.cat(g)).values for g in groups)
    if len(examples) < 2:
        raise ConfigError(f"examples_per_user: {examples_per_user} leaves fewer than 2 users among {len(labels)} examples")
    return Users(examples, "seeded shards")


@dataclass(frozen=True)
class RoundPlan:
    """The virtual clients of one round: ``clients[c]`` holds the user indices grouped into client c."""

    clients: tuple[torch.Tensor, ...]

    @property
    def users(self) -> torch.Tensor:
        return torch.cat(self.clients)

    def client_examples(self, users: Users) -> list[torch.Tensor]:
        """Example indices of each virtual client: the union of its users' examples."""
        return [torch.cat([users.examples[int(u)] for u in client]) for client in self.clients]


def plan_round(num_users: int, clients_per_round: int, users_per_client: int, gen: torch.Generator) -> RoundPlan:
    """Sample clients_per_round * users_per_client users without replacement; group them consecutively."""
    per_round = clients_per_round * users_per_client
    if per_round > num_users:
        raise ConfigError(f"clients_per_round x users_per_client: {clients_per_round} x {users_per_client} = "
                          f"{per_round} exceeds the {num_users} users")
    sampled = torch.randperm(num_users, generator=gen)[:per_round]
    return RoundPlan(tuple(sampled.view(clients_per_round, users_per_client)))
