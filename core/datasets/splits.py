"""Membership-ready, seeded splits of a dataset.

The population is partitioned into four disjoint parts:

* ``public``  – data the defender may use without privacy (pretraining, as the ALM and DP-FedEmb
  papers do);
* ``shadow``  – the attacker's pool for shadow / reference models (disjoint from the target's data);
* ``pool``    – the audit candidates; each is included in the target's training set independently
  with probability 1/2 (``membership``), so members (``train``) and non-members (``holdout``) are
  exchangeable and any attack's guesses give a valid one-run audit (Steinke, Nasr & Jagielski 2023);
  ``inclusion_probability = 1`` makes every pool example a member instead (a utility benchmark on the
  whole training set: no non-members, nothing to audit);
* ``test``    – held-out evaluation queries (the official test split when the dataset has one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import torch

from privaudit.core.datasets.registry import DatasetInfo, RawDataset
from privaudit.core.errors import ConfigError


@dataclass(frozen=True)
class Split:
    """Images as float32 (N, C, H, W) in [0, 1], labels, and each row's index in the raw dataset."""

    x: torch.Tensor
    y: torch.Tensor
    index: torch.Tensor
    users: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def subset(self, rows: torch.Tensor | np.ndarray | Sequence[int]) -> "Split":
        """The rows ``rows`` (integer indices or a boolean mask) of this split."""
        rows = torch.as_tensor(np.asarray(rows))
        if rows.dtype == torch.bool:
            rows = rows.nonzero().flatten()
        return Split(self.x[rows], self.y[rows], self.index[rows],
                     None if self.users is None else self.users[rows])

    def to(self, device: torch.device | str) -> "Split":
        return Split(self.x.to(device), self.y.to(device), self.index.to(device),
                     None if self.users is None else self.users.to(device))

    @staticmethod
    def concat(parts: Sequence["Split"]) -> "Split":
        users = None if any(p.users is None for p in parts) else torch.cat([p.users for p in parts])
        return Split(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]),
                     torch.cat([p.index for p in parts]), users)


#: 0.5: each pool example a member by a fair coin (the audit design); 1: every pool example a member (no audit).
INCLUSION_PROBABILITIES = (0.5, 1.0)


@dataclass(frozen=True)
class SplitConfig:
    """Fractions of the (non-test) population given to each part, and optional size caps."""

    public: float = 0.15
    shadow: float = 0.30
    test: float = 0.15  # used only when the dataset has no official test split
    max_examples: int | None = None  # cap on the non-test population (seeded subsample)
    max_test: int | None = None
    inclusion_probability: float = 0.5

    def validate(self) -> None:
        for name in ("public", "shadow", "test"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ConfigError(f"splits.{name}: must lie in [0, 1), got {value!r}")
        if self.public + self.shadow + self.test >= 0.95:
            raise ConfigError("splits: public + shadow + test must leave at least 5% for the audit pool")
        if self.inclusion_probability not in INCLUSION_PROBABILITIES:
            raise ConfigError(f"splits.inclusion_probability: must be 0.5 or 1, got {self.inclusion_probability!r}: "
                              "the one-run bounds on the audit pool assume each candidate is included by a fair coin "
                              "(Steinke et al. 2023), another probability would make the base rate look like leakage; "
                              "1 trains on the whole pool (a utility benchmark: no non-members, so no attack)")
        for name in ("max_examples", "max_test"):
            value = getattr(self, name)
            if value is not None and value < 10:
                raise ConfigError(f"splits.{name}: must be >= 10 or unset, got {value!r}")


@dataclass(frozen=True)
class MembershipData:
    """A dataset split for training a target model and auditing it."""

    info: DatasetInfo
    seed: int
    public: Split
    shadow: Split
    pool: Split
    membership: torch.Tensor  # bool (len(pool),): True = in the target's training set
    test: Split
    config: SplitConfig = field(default_factory=SplitConfig)

    @property
    def train(self) -> Split:
        """The target's training set (members)."""
        return self.pool.subset(self.membership)

    @property
    def holdout(self) -> Split:
        """Audit candidates left out of training (non-members)."""
        return self.pool.subset(~self.membership)

    def with_membership(self, membership: torch.Tensor) -> "MembershipData":
        """The same splits with another inclusion mask over the pool (for reference models)."""
        membership = torch.as_tensor(membership, dtype=torch.bool)
        if membership.shape != self.membership.shape:
            raise ConfigError(f"membership: expected shape {tuple(self.membership.shape)}, "
                              f"got {tuple(membership.shape)}")
        return replace(self, membership=membership)

    def summary(self) -> dict[str, int]:
        return {"public": len(self.public), "shadow": len(self.shadow), "pool": len(self.pool),
                "members": int(self.membership.sum()), "non_members": int((~self.membership).sum()),
                "test": len(self.test)}


def _to_split(raw: RawDataset, rows: np.ndarray) -> Split:
    rows = np.sort(rows)
    x = torch.from_numpy(raw.images[rows].astype(np.float32) / 255.0)
    users = None if raw.users is None else torch.from_numpy(raw.users[rows].astype(np.int64))
    return Split(x, torch.from_numpy(raw.labels[rows]), torch.from_numpy(rows.astype(np.int64)), users)


def make_splits(raw: RawDataset, seed: int, config: SplitConfig | None = None) -> MembershipData:
    """Partition ``raw`` into public / shadow / pool / test and draw pool membership, all from ``seed``."""
    config = config or SplitConfig()
    public_rows, shadow_rows, pool_rows, test_rows, membership = split_rows(raw, seed, config)
    return MembershipData(
        info=raw.info, seed=seed, public=_to_split(raw, public_rows), shadow=_to_split(raw, shadow_rows),
        pool=_to_split(raw, pool_rows), membership=torch.from_numpy(membership), test=_to_split(raw, test_rows),
        config=config)


def split_rows(raw: RawDataset, seed: int, config: SplitConfig) -> tuple[np.ndarray, ...]:
    """The rows of the public, shadow, pool and test parts, and the pool's membership mask (bool), drawn from
    ``seed`` alone (no image is copied: :func:`training_set_size` needs only these)."""
    config.validate()
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    n = len(raw.labels)
    test_mask = raw.is_test.astype(bool)
    if test_mask.any():
        test_rows = rng.permutation(np.flatnonzero(test_mask))
        rest = rng.permutation(np.flatnonzero(~test_mask))
        fractions = (config.public, config.shadow)
    else:
        rest = rng.permutation(n)
        n_test = int(round(config.test * n))
        test_rows, rest = rest[:n_test], rest[n_test:]
        scale = 1.0 - config.test
        fractions = (config.public / scale, config.shadow / scale)
    if config.max_test is not None:
        test_rows = test_rows[: config.max_test]
    if config.max_examples is not None:
        rest = rest[: config.max_examples]
    n_public = int(round(fractions[0] * len(rest)))
    n_shadow = int(round(fractions[1] * len(rest)))
    public_rows = rest[:n_public]
    shadow_rows = rest[n_public:n_public + n_shadow]
    pool_rows = np.sort(rest[n_public + n_shadow:])
    if len(pool_rows) < 4 or len(test_rows) < 2:
        raise ConfigError(f"dataset {raw.info.name!r}: too few examples ({n}) for the requested splits")
    membership = rng.random(len(pool_rows)) < config.inclusion_probability  # always True at probability 1
    return public_rows, shadow_rows, pool_rows, test_rows, membership


def training_set_size(raw: RawDataset, seed: int, config: SplitConfig | None = None) -> int:
    """How many examples the target model of ``seed`` trains on (the members of :func:`make_splits`' pool)."""
    return int(split_rows(raw, seed, config or SplitConfig())[-1].sum())
