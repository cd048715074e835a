"""Input domains of the checked quantities and neighbouring pairs under a relation.

A batch is a set of *rows* (``Rows``: field name -> tensor, all with the same leading length),
grouped into privacy *units* of ``unit_size`` consecutive rows (one example, or one user's
examples). A neighbouring pair is a :class:`Pair`: a ``base`` batch, the ``new`` unit and, for
replace-one, the ``position`` of the unit it replaces:

* ``replace-one``: D = base, D' = base with unit ``position`` replaced by ``new`` (same size);
* ``add-remove``:  D = base, D' = base + ``new`` **appended last**.

Appending last is the coupling the proofs assume: every example of D keeps its position, hence its
share of the randomness (augmentations, group keys, noise are drawn per batch position from the
shared seed), and only the added example's randomness is new. Inserting it elsewhere would shift
the randomness of later examples, a difference no proof promises to control. The shared
``randomness`` (an int seed) is passed to the quantity for both neighbours.

Domains draw rows from a mixture of *sources* (random search over data-distribution pairs and over
extremes) and map continuous fields to unconstrained coordinates for the ascent (images through a
logit so they stay in [0, 1]; free vectors as they are).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any

import torch

from privaudit.core.errors import ConfigError, one_of

Rows = dict[str, torch.Tensor]
RELATIONS = ("replace-one", "add-remove")


def n_rows(rows: Rows) -> int:
    return int(next(iter(rows.values())).shape[0])


def cat_rows(*parts: Rows) -> Rows:
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def slice_rows(rows: Rows, start: int, stop: int) -> Rows:
    return {k: v[start:stop] for k, v in rows.items()}


@dataclass(frozen=True)
class Pair:
    """A neighbouring pair under ``relation`` (see module doc) with its shared randomness.

    ``params``: the model parameters both neighbours are evaluated at (None: the target's model as
    built). Every claim bounds the quantity at every parameter value, so the search may move them.
    """

    base: Rows
    new: Rows
    position: int
    randomness: int
    params: Any = None

    def neighbours(self, relation: str, unit_size: int) -> tuple[Rows, Rows]:
        """(D, D') as row sets."""
        if relation == "add-remove":
            return self.base, cat_rows(self.base, self.new)
        if relation == "replace-one":
            start = self.position * unit_size
            stop = start + unit_size
            total = n_rows(self.base)
            if not 0 <= start < stop <= total:
                raise ValueError(f"position {self.position} is outside a batch of {total // unit_size} units")
            return self.base, cat_rows(slice_rows(self.base, 0, start), self.new, slice_rows(self.base, stop, total))
        raise one_of("relation", relation, RELATIONS)


class Domain(abc.ABC):
    """Where a quantity's inputs live: how to draw rows, perturb them and hand them to ``fn``."""

    fields: tuple[str, ...] = ("x",)
    continuous: tuple[str, ...] = ("x",)
    unit_size: int = 1
    sources: tuple[str, ...] = ()

    @abc.abstractmethod
    def draw(self, n_units: int, gen: torch.Generator, source: str | None = None) -> Rows:
        """``n_units`` units of rows from ``source`` (one of :attr:`sources`; None: the default)."""

    @abc.abstractmethod
    def opposite(self, unit: Rows, gen: torch.Generator) -> Rows:
        """An extreme counterpart of ``unit`` (negated vector, inverted image)."""

    def to_free(self, field: str, value: torch.Tensor) -> torch.Tensor:
        return value

    def from_free(self, field: str, free: torch.Tensor) -> torch.Tensor:
        return free

    def perturb(self, rows: Rows, scale: float, gen: torch.Generator) -> Rows:
        """Gaussian step of relative size ``scale`` in the free coordinates of the continuous fields."""
        out = dict(rows)
        for f in self.continuous:
            free = self.to_free(f, rows[f])
            step = torch.randn(free.shape, generator=gen, dtype=free.dtype) * scale * self.free_scale(free)
            out[f] = self.from_free(f, free + step)
        return out

    def free_scale(self, free: torch.Tensor) -> float:
        return 1.0

    def mutate_discrete(self, unit: Rows, gen: torch.Generator) -> Rows:
        """A random change of the unit's discrete fields (labels); identity when there are none."""
        return unit

    def conform(self, new: Rows, old: Rows) -> Rows:
        """``new`` made admissible as a replacement of ``old`` (identity unless the domain fixes fields)."""
        return new

    def batch(self, rows: Rows) -> Any:
        """What the quantity's ``fn`` receives."""
        return rows["x"]

    def describe(self) -> dict[str, Any]:
        return {"domain": type(self).__name__, "unit_size": self.unit_size, "sources": list(self.sources)}


class VectorDomain(Domain):
    """Free vectors in R^d (float64), for the reference functions. ``scale`` is a typical norm (the clip)."""

    sources = ("gaussian", "axis", "tiny", "huge", "repeat")

    def __init__(self, dim: int, scale: float = 1.0):
        if dim < 1:
            raise ConfigError(f"dim: must be >= 1, got {dim}")
        self.dim = int(dim)
        self.scale = float(scale)

    def draw(self, n_units: int, gen: torch.Generator, source: str | None = None) -> Rows:
        if source is None:
            source = self.sources[int(torch.randint(len(self.sources), (1,), generator=gen))]
        d = self.dim
        # norms log-uniform over four decades around the scale, directions uniform
        log_norm = (torch.rand(n_units, 1, generator=gen, dtype=torch.float64) * 4 - 2) * math.log(10)
        norms = self.scale * torch.exp(log_norm)
        if source == "gaussian":
            v = torch.randn(n_units, d, generator=gen, dtype=torch.float64)
            x = v / v.norm(dim=1, keepdim=True).clamp_min(1e-300) * norms
        elif source == "axis":
            idx = torch.randint(d, (n_units,), generator=gen)
            sign = torch.randint(2, (n_units,), generator=gen).double() * 2 - 1
            x = torch.zeros(n_units, d, dtype=torch.float64)
            x[torch.arange(n_units), idx] = sign
            x = x * norms
        elif source == "tiny":
            x = torch.randn(n_units, d, generator=gen, dtype=torch.float64) * self.scale * 1e-3 / math.sqrt(d)
        elif source == "huge":
            x = torch.randn(n_units, d, generator=gen, dtype=torch.float64) * self.scale * 1e3 / math.sqrt(d)
        elif source == "repeat":
            v = torch.randn(1, d, generator=gen, dtype=torch.float64) * self.scale / math.sqrt(d)
            x = v.expand(n_units, d).clone()
        else:
            raise one_of("source", source, self.sources)
        return {"x": x}

    def opposite(self, unit: Rows, gen: torch.Generator) -> Rows:
        factor = math.exp(float(torch.rand((), generator=gen, dtype=torch.float64)) * 2 * math.log(10) - math.log(10))
        return {"x": -unit["x"] * factor}

    def free_scale(self, free: torch.Tensor) -> float:
        return float(free.norm(dim=-1).mean()) / math.sqrt(self.dim) + 1e-12

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dim": self.dim, "scale": self.scale}


class ImageDomain(Domain):
    """Images in [0, 1]^(C, H, W), optionally with labels and a client structure.

    Sources: rows of a data ``pool`` (the data distribution), uniform noise, binary noise, constant
    images, one pool image repeated (all rows identical), pure black / white images. Labels (when
    ``labels``) come with pool rows and are uniform otherwise. ``unit_size`` rows form one privacy
    unit; ``users_per_client`` > 0 adds the field ``client`` (row -> virtual client, consecutive
    blocks of that many units), which is structure, not data: it is never changed. With
    ``fixed_labels`` a replacement unit keeps the labels of the unit it replaces (used where a
    label change would only re-draw other units' randomness, see the FedEmb register entry).
    """

    sources = ("data", "noise", "binary", "constant", "repeat", "extreme")

    def __init__(self, pool_x: torch.Tensor, pool_y: torch.Tensor | None = None, *, num_classes: int | None = None,
                 labels: bool = False, unit_size: int = 1, users_per_client: int = 0, fixed_labels: bool = False):
        if pool_x.dim() != 4 or len(pool_x) == 0:
            raise ConfigError("pool_x: expected a non-empty (N, C, H, W) tensor of images")
        self.pool_x = pool_x.float()
        self.pool_y = pool_y
        self.shape = tuple(pool_x.shape[1:])
        self.labels = labels
        self.num_classes = int(num_classes or (int(pool_y.max()) + 1 if pool_y is not None else 1))
        self.unit_size = int(unit_size)
        self.users_per_client = int(users_per_client)
        self.fixed_labels = fixed_labels
        self.fields = ("x", "y") if labels else ("x",)
        self.continuous = ("x",)

    def draw(self, n_units: int, gen: torch.Generator, source: str | None = None) -> Rows:
        if source is None:
            source = self.sources[int(torch.randint(len(self.sources), (1,), generator=gen))]
        n = n_units * self.unit_size
        shape = (n, *self.shape)
        y = torch.randint(self.num_classes, (n,), generator=gen)
        if source == "data":
            idx = torch.randint(len(self.pool_x), (n,), generator=gen)
            x = self.pool_x[idx].clone()
            if self.pool_y is not None:
                y = self.pool_y[idx].clone().long()
        elif source == "noise":
            x = torch.rand(shape, generator=gen)
        elif source == "binary":
            x = (torch.rand(shape, generator=gen) < 0.5).float()
        elif source == "constant":
            x = torch.rand(n, *([1] * len(self.shape)), generator=gen).expand(shape).clone()
        elif source == "repeat":
            i = int(torch.randint(len(self.pool_x), (1,), generator=gen))
            x = self.pool_x[i:i + 1].expand(shape).clone()
            if self.pool_y is not None:
                y = self.pool_y[i:i + 1].long().expand(n).clone()
        elif source == "extreme":
            x = (torch.rand(n, *([1] * len(self.shape)), generator=gen) < 0.5).float().expand(shape).clone()
        else:
            raise one_of("source", source, self.sources)
        rows = {"x": x}
        if self.labels:
            rows["y"] = y
        return rows

    def opposite(self, unit: Rows, gen: torch.Generator) -> Rows:
        out = dict(unit)
        out["x"] = 1.0 - unit["x"]
        if self.labels and not self.fixed_labels:
            out["y"] = (unit["y"] + 1 + torch.randint(max(self.num_classes - 1, 1), unit["y"].shape, generator=gen)) \
                % self.num_classes
        return out

    _EPS = 1e-4

    def to_free(self, field: str, value: torch.Tensor) -> torch.Tensor:
        v = value.double().clamp(self._EPS, 1 - self._EPS)
        return torch.log(v) - torch.log1p(-v)

    def from_free(self, field: str, free: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(free).to(self.pool_x.dtype)

    def free_scale(self, free: torch.Tensor) -> float:
        return 2.0

    def mutate_discrete(self, unit: Rows, gen: torch.Generator) -> Rows:
        if not self.labels or self.fixed_labels:
            return unit
        out = dict(unit)
        out["y"] = torch.randint(self.num_classes, unit["y"].shape, generator=gen)
        return out

    def conform(self, new: Rows, old: Rows) -> Rows:
        if self.labels and self.fixed_labels:
            return {**new, "y": old["y"].clone()}
        return new

    def clients(self, rows: int) -> torch.Tensor:
        per_client = self.users_per_client * self.unit_size
        return torch.arange(rows) // per_client

    def batch(self, rows: Rows) -> Any:
        out: tuple = (rows["x"],)
        if self.labels:
            out = out + (rows["y"],)
        if self.users_per_client:
            out = out + (self.clients(n_rows(rows)),)
        return out if len(out) > 1 else out[0]

    def describe(self) -> dict[str, Any]:
        d = {**super().describe(), "shape": list(self.shape), "pool": len(self.pool_x), "labels": self.labels}
        if self.users_per_client:
            d["users_per_client"] = self.users_per_client
        return d
