"""Sampled (empirical) sensitivity of a training algorithm: the ALM paper's sampler and Rubinstein–Aldà's.

A training algorithm is given as a *weighted fit*: ``fit(weights) -> outputs`` maps a batch of
datasets, each a row of non-negative record counts over a fixed pool of N records (shape (B, N)), to
the released vectors (shape (B, P)). A remove-one dataset is a row of ones with one zero; a
bootstrap database is a row of multinomial counts. Batching the datasets lets a convex solver or a
``vmap``-ed trainer fit them together; a black-box trainer may simply loop over the rows.

Two samplers estimate the sensitivity sup ||f(D) - f(D')|| from m random neighbouring pairs:

* :func:`sample_sensitivity_alm` — Algorithm 2 of the Additive Logistic Mechanism paper (Yang,
  Gohari & Topcu): draw records d_i, d_j of the training set d, fit d \\ d_i and d \\ d_j (two
  replace-one neighbours of size n-1), take the **maximum** distance over m pairs. Each distinct
  leave-one-out set is fitted once, however many pairs share it. The pairs are always distinct
  (i != j): Algorithm 2 draws both with ``randint`` and may pick i = j, which only wastes a sample.
  What the maximum guarantees is a statement about *pairs inside d*, not a global bound: with
  probability >= 1 - beta over the sampler, at most a fraction 1 - beta^(1/m) ~ ln(1/beta)/m of
  the within-d pairs are farther apart (the max of m i.i.d. draws; see :func:`exceedance_bound`).
  It is a local sensitivity at d, and a noise scale set from it is data-dependent and not DP.
* :func:`sample_sensitivity_rubinstein_alda` — the sensitivity sampler of Rubinstein & Aldà
  (ICML 2017, Algorithm 1), which the ALM paper cites: for i = 1..m draw a database D ~ P^(n-1)
  and two records x, x' ~ P from a distribution P, G_i = ||f(D u {x}) - f(D u {x'})||; return
  the k-th order statistic G_(k). With k = ceil(m (1 - gamma + rho + sqrt(ln(1/rho) / (2m))))
  (their Theorem 4; the one-sided DKW inequality of Massart 1990), any mechanism that is
  (eps, delta)-DP at sensitivity Delta is (eps, delta, gamma)-*random* DP (Hall et al. 2012) at
  Delta = G_(k): the DP inequality holds except with probability gamma over the draw of the
  neighbouring databases from P and the sampler. With m alone, k = m and
  gamma = rho + sqrt(ln(1/rho) / (2m)) minimised by rho = exp(W_{-1}(-1/(4m)) / 2); with gamma
  alone, m = ceil(ln(1/rho) / (2 (gamma - rho)^2)) with rho = exp(W_{-1}(-gamma / (2 sqrt e)) + 1/2)
  (their Table 1 / the ``diffpriv`` package). :func:`rubinstein_alda_parameters` computes these.

The DKW step is conservative: by exchangeability, a fresh pair exceeds G_(k) with probability at
most (m - k + 1) / (m + 1) over the pair and the sampler together (``gamma_exact``), e.g. 0.002
instead of 0.077 at m = k = 500. We state R–A's gamma in claims (it is their theorem) and report
the exact value beside it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

import torch

from privaudit.core.errors import ConfigError, check_positive, check_probability, one_of

WeightedFit = Callable[[torch.Tensor], torch.Tensor]

NORMS = ("l1", "l2")


# -- order statistics and confidence ----------------------------------------------------------------
@dataclass(frozen=True)
class RubinsteinAldaParameters:
    """Sample size m, order-statistic index k (1-based), RDP confidence gamma and DKW parameter rho."""

    m: int
    k: int
    gamma: float
    rho: float


def _gamma_floor(m: int, rho: float) -> float:
    """rho + sqrt(ln(1/rho) / (2m)): the smallest gamma reachable with m samples at this rho."""
    return rho + math.sqrt(math.log(1.0 / rho) / (2.0 * m))


def rubinstein_alda_parameters(m: int | None = None, gamma: float | None = None) -> RubinsteinAldaParameters:
    """Rubinstein & Aldà's settings (Theorem 4, Table 1) for a given m, a given gamma, or both.

    * m only: k = m, rho = exp(W_{-1}(-1/(4m)) / 2), gamma = rho + sqrt(ln(1/rho)/(2m)).
    * gamma only: rho = exp(W_{-1}(-gamma/(2 sqrt e)) + 1/2), m = ceil(ln(1/rho)/(2 (gamma-rho)^2)),
      k = ceil(m (1 - gamma + rho + sqrt(ln(1/rho)/(2m)))).
    * both: rho as for m only, k = ceil(m (1 - gamma + rho + sqrt(ln(1/rho)/(2m)))); gamma must be
      at least the m-only gamma.
    """
    from scipy.special import lambertw

    if m is None and gamma is None:
        raise ConfigError("rubinstein_alda_parameters: give m, gamma or both")
    if gamma is not None:
        check_probability("gamma", gamma)
    if m is not None:
        if int(m) != m or m < 1:
            raise ConfigError(f"m: must be a positive integer, got {m!r}")
        m = int(m)
        rho = math.exp(lambertw(-1.0 / (4.0 * m), k=-1).real / 2.0)
        floor = _gamma_floor(m, rho)
        if gamma is None:
            return RubinsteinAldaParameters(m=m, k=m, gamma=floor, rho=rho)
        if gamma < floor:
            raise ConfigError(f"gamma: {gamma} is below {floor:.4g}, the smallest confidence reachable with "
                              f"m = {m} samples; raise m or gamma")
    else:
        rho = math.exp(lambertw(-gamma / (2.0 * math.sqrt(math.e)), k=-1).real + 0.5)
        m = math.ceil(math.log(1.0 / rho) / (2.0 * (gamma - rho) ** 2))
        floor = _gamma_floor(m, rho)
    k = min(m, math.ceil(m * (1.0 - gamma + floor) - 1e-9))
    return RubinsteinAldaParameters(m=m, k=max(k, 1), gamma=float(gamma), rho=rho)


def exceedance_bound(m: int, k: int, beta: float) -> float:
    """t such that, with probability >= 1 - beta over m i.i.d. distances, P[G > G_(k)] <= t.

    Exact for continuous distributions (1 - F(G_(k)) ~ Beta(m - k + 1, k)) and conservative
    otherwise: t = 1 - BetaPPF(beta; k, m - k + 1). For k = m this is 1 - beta^(1/m).
    """
    from scipy.stats import beta as beta_dist

    check_probability("beta", beta)
    if not 1 <= k <= m:
        raise ConfigError(f"k: must lie in [1, {m}], got {k}")
    return float(1.0 - beta_dist.ppf(beta, k, m - k + 1))


def order_statistic(values: torch.Tensor, k: int) -> float:
    """The k-th smallest value (1-based) of a 1-D tensor."""
    if not 1 <= k <= values.numel():
        raise ConfigError(f"k: must lie in [1, {values.numel()}], got {k}")
    return float(values.flatten().sort().values[k - 1])


# -- result -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SampledSensitivity:
    """A sampled sensitivity estimate with everything needed to state what it guarantees.

    ``method``: ``max`` (ALM Algorithm 2) or ``rubinstein-alda`` (order statistic G_(k)).
    ``pairs``: how neighbours were drawn (``remove-one`` inside the training set, or an oracle
    P: D ~ P^(n-1), x, x' ~ P, described). ``gamma``/``rho``: R–A's random-DP confidence (None for ``max``);
    ``gamma_exact`` = (m - k + 1)/(m + 1), the exact joint exceedance probability bound.
    """

    norm: str
    value: float
    method: str
    pairs: str
    m: int
    k: int
    n: int
    gamma: float | None
    rho: float | None
    gamma_exact: float
    median: float
    minimum: float
    maximum: float
    fits: int
    seconds: float

    def exceedance(self, beta: float = 0.05) -> float:
        """With prob. >= 1 - beta over the sampler, a fresh pair (same design) exceeds ``value`` w.p. <= this."""
        return exceedance_bound(self.m, self.k, beta)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["exceedance_at_beta_0.05"] = self.exceedance(0.05)
        return d

    def describe(self) -> str:
        """One line for a privacy claim's notes."""
        if self.method == "max":
            return (f"{self.norm.upper()} sensitivity {self.value:.4g} is SAMPLED, not a bound: the maximum over "
                    f"m={self.m} random remove-one pairs (d minus d_i, d minus d_j) of the n={self.n + 1} training "
                    f"examples (ALM Algorithm 2). With 95% confidence at most a fraction "
                    f"{self.exceedance(0.05):.3g} of such within-dataset pairs exceed it; neighbours outside "
                    f"the dataset are not covered, so the epsilon is not a DP guarantee")
        return (f"{self.norm.upper()} sensitivity {self.value:.4g} is SAMPLED (Rubinstein-Alda sensitivity "
                f"sampler: order statistic k={self.k} of m={self.m} oracle pairs, databases of size {self.n}): the "
                f"epsilon is (eps, delta, gamma)-random DP with gamma={self.gamma:.4g} (rho={self.rho:.3g}; "
                f"exact order-statistic bound {self.gamma_exact:.3g}) over databases drawn from the {self.pairs}, "
                f"not DP")


# -- neighbouring pairs -----------------------------------------------------------------------------
def remove_one_pairs(n: int, m: int, gen: torch.Generator) -> torch.Tensor:
    """m ordered pairs (i, j), i != j, uniform over [0, n): the removed records of ALM Algorithm 2."""
    if n < 2:
        raise ConfigError(f"n: need at least 2 records to form remove-one pairs, got {n}")
    check_positive("m", m)
    i = torch.randint(n, (m,), generator=gen)
    j = (i + 1 + torch.randint(n - 1, (m,), generator=gen)) % n  # uniform over the n - 1 others
    return torch.stack([i, j], dim=1)


def oracle_pairs(pool_size: int, n: int, m: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """R–A Algorithm 1 pairs with P uniform over a pool: counts of D ~ P^(n-1) plus x, resp. x'.

    Returns two (m, pool_size) count matrices (float64) that differ in one record.
    """
    if pool_size < 1 or n < 1:
        raise ConfigError(f"oracle_pairs: need pool_size >= 1 and n >= 1, got {pool_size}, {n}")
    check_positive("m", m)
    draws = torch.randint(pool_size, (m, n - 1), generator=gen)
    counts = torch.zeros(m, pool_size, dtype=torch.float64)
    counts.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
    x = torch.randint(pool_size, (m,), generator=gen)
    x2 = torch.randint(pool_size, (m,), generator=gen)
    rows = torch.arange(m)
    w1, w2 = counts.clone(), counts
    w1[rows, x] += 1
    w2[rows, x2] += 1
    return w1, w2


# -- distances --------------------------------------------------------------------------------------
def _norm(diff: torch.Tensor, norm: str) -> torch.Tensor:
    if norm == "l1":
        return diff.abs().sum(dim=-1)
    if norm == "l2":
        return diff.pow(2).sum(dim=-1).sqrt()
    raise one_of("norm", norm, NORMS)


def fit_from_trainer(train: Callable[[torch.Tensor], torch.Tensor]) -> WeightedFit:
    """A weighted fit from a black-box trainer ``train(indices) -> released vector``.

    Each row of counts becomes the multiset of pool indices it describes (index i repeated
    count_i times, in increasing order), trained one after another. Batch-capable trainers
    should implement the weighted fit directly instead.
    """

    def fit(weights: torch.Tensor) -> torch.Tensor:
        rows = []
        for w in weights:
            counts = w.round().long()
            if (counts < 0).any() or not torch.allclose(counts.to(w.dtype), w):
                raise ValueError("fit_from_trainer: weights must be non-negative integer counts")
            rows.append(train(torch.repeat_interleave(torch.arange(len(w)), counts)).flatten())
        return torch.stack(rows)

    return fit


def fit_in_chunks(fit: WeightedFit, weights: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """``fit`` on the rows of ``weights`` in chunks of ``chunk`` rows (all at once when None)."""
    if chunk is None or chunk >= weights.shape[0]:
        return fit(weights)
    return torch.cat([fit(weights[s:s + chunk]) for s in range(0, weights.shape[0], chunk)])


def pair_distances(fit: WeightedFit, w1: torch.Tensor, w2: torch.Tensor, norms: Iterable[str] = NORMS,
                   chunk: int | None = None) -> dict[str, torch.Tensor]:
    """Distances ||fit(w1[i]) - fit(w2[i])|| for every row, in each norm."""
    out1 = fit_in_chunks(fit, w1, chunk).double()
    out2 = fit_in_chunks(fit, w2, chunk).double()
    diff = (out1 - out2).reshape(out1.shape[0], -1)
    return {norm: _norm(diff, norm) for norm in norms}


def leave_one_out_fits(fit: WeightedFit, n: int, removed: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """Outputs of ``fit`` on d minus record r for every r in ``removed`` (one fit per distinct r)."""
    weights = torch.ones(len(removed), n, dtype=torch.float64)
    weights[torch.arange(len(removed)), removed] = 0.0
    return fit_in_chunks(fit, weights, chunk).double().reshape(len(removed), -1)


def _summary(norm: str, values: torch.Tensor, value: float, **fields) -> SampledSensitivity:
    return SampledSensitivity(norm=norm, value=value, median=float(values.median()), minimum=float(values.min()),
                              maximum=float(values.max()), **fields)


def sample_sensitivity_alm(fit: WeightedFit, n: int, m: int, gen: torch.Generator, *,
                           norms: Iterable[str] = NORMS, chunk: int | None = None) -> dict[str, SampledSensitivity]:
    """ALM Algorithm 2: the maximum distance over m random remove-one pairs of the n training records.

    Each distinct leave-one-out dataset is fitted once (at most min(n, 2m) fits).
    """
    import time

    start = time.perf_counter()
    pairs = remove_one_pairs(n, m, gen)
    removed, inverse = torch.unique(pairs.flatten(), return_inverse=True)
    outputs = leave_one_out_fits(fit, n, removed, chunk)
    inverse = inverse.view(m, 2)
    diff = outputs[inverse[:, 0]] - outputs[inverse[:, 1]]
    seconds = time.perf_counter() - start
    result = {}
    for norm in norms:
        d = _norm(diff, norm)
        result[norm] = _summary(norm, d, float(d.max()), method="max", pairs="remove-one", m=m, k=m, n=n - 1,
                                gamma=None, rho=None, gamma_exact=1.0 / (m + 1), fits=len(removed), seconds=seconds)
    return result


def exhaustive_remove_one(fit: WeightedFit, n: int, *, norms: Iterable[str] = NORMS,
                          chunk: int | None = None) -> dict[str, float]:
    """The exact maximum over all n(n-1)/2 remove-one pairs of the n records (n fits).

    This is the quantity Algorithm 2 estimates (the local replace-one sensitivity of f at the
    (n-1)-record subsets of d); useful to measure how much m random pairs miss.
    """
    outputs = leave_one_out_fits(fit, n, torch.arange(n), chunk)
    result = {}
    for norm in norms:
        p = 1.0 if norm == "l1" else 2.0
        if norm not in NORMS:
            raise one_of("norm", norm, NORMS)
        result[norm] = float(torch.cdist(outputs, outputs, p=p).max())
    return result


def sample_sensitivity_rubinstein_alda(fit: WeightedFit, pool_size: int, n: int, gen: torch.Generator, *,
                                       m: int | None = None, gamma: float | None = None,
                                       norms: Iterable[str] = NORMS, chunk: int | None = None,
                                       oracle: str = "pool") -> dict[str, SampledSensitivity]:
    """Rubinstein & Aldà's sensitivity sampler with P uniform over a pool of ``pool_size`` records.

    Databases have n records (n - 1 shared draws plus x or x'); the estimate is the k-th order
    statistic of the m distances, with (m, k, gamma, rho) from :func:`rubinstein_alda_parameters`.
    ``oracle`` names the pool in the result (its ``pairs`` field) so claims can say what P was.
    """
    import time

    params = rubinstein_alda_parameters(m=m, gamma=gamma)
    start = time.perf_counter()
    w1, w2 = oracle_pairs(pool_size, n, params.m, gen)
    dist = pair_distances(fit, w1, w2, norms, chunk)
    seconds = time.perf_counter() - start
    pairs = f"oracle P = uniform over the {pool_size} records of the {oracle}"
    return {norm: _summary(norm, d, order_statistic(d, params.k), method="rubinstein-alda", pairs=pairs,
                           m=params.m, k=params.k, n=n, gamma=params.gamma, rho=params.rho,
                           gamma_exact=(params.m - params.k + 1) / (params.m + 1), fits=2 * params.m,
                           seconds=seconds)
            for norm, d in dist.items()}
