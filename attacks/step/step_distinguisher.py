"""Step-level mechanism audit: the optimal test on one privatised step, and its sound lower bounds.

One DP step on a fixed neighbouring pair of batches (D, D') with all non-noise randomness shared
(augmentations, group keys, the noise of mechanisms released *before* this one: the coupling the
proofs use) releases, for each quantity q, y_q = f_q(D) + N(0, sigma_q^2 I). Write m0_q = f_q(D),
m1_q = f_q(D'), d_q = m1_q - m0_q. By Neyman-Pearson the most powerful test of D against D' thresholds
the log-likelihood ratio, which for independent Gaussian releases is affine in

    T(y) = sum_q <y_q - m0_q, d_q> / sigma_q^2,     T ~ N(0, mu^2) under D,  N(mu^2, mu^2) under D',
    mu^2 = sum_q ||d_q||^2 / sigma_q^2

(Dong, Roth & Su 2022, "Gaussian Differential Privacy", Thm. 2.7: the pair is exactly mu-GDP). T is
a linear function of the noise, so :func:`gaussian_step_scores` draws it either by projecting full
noise vectors (``noise='full'``, chunked) or directly from its law N(0, mu^2) (``noise='projected'``,
exact in distribution and independent of the parameter count; tests check that both agree).

The accountant assumes a Gaussian step whose sensitivity is the *claimed* Delta and whose noise
std is sigma = z Delta: per step mu_claim = Delta / sigma = 1 / z. From n draws per side the
scores become two sound lower bounds (:func:`step_bounds`):

* **Clopper-Pearson epsilon** at the claim's delta (Kairouz et al. 2015; Jagielski et al. 2020):
  :func:`privaudit.attacks.bounds.multi_run.multi_run_bound` with the threshold chosen on a separate half.
* **GDP mu** (Nasr et al. 2023, "Tight Auditing of DP ML", Sec. 4): thresholds chosen on one half,
  then on the other half mu_lb = max_t Phi^-1(1 - FPR_hi(t)) - Phi^-1(FNR_hi(t)) with one-sided
  Clopper-Pearson bounds at alpha / (2k) for k thresholds (Bonferroni). If the step is mu-GDP every
  test satisfies FNR >= Phi(Phi^-1(1 - FPR) - mu), so mu_lb <= mu with probability >= 1 - alpha:
  a sound lower bound on the tightest mu of *any* mechanism (no Gaussian assumption is needed to
  refute a GDP claim), reported with the trade-off points (FPR, FNR) and their two-sided CIs.

:class:`KnownMechanism` gives mechanisms with exactly known epsilon(delta) and tightest mu (Gaussian,
Laplace, randomized response, Poisson-subsampled Gaussian with the mixture likelihood ratio) for
the soundness tests: the bounds may exceed the truth at most at their stated failure rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import torch
from scipy import optimize, stats

from privaudit.attacks.bounds.multi_run import clopper_pearson_upper, multi_run_bound
from privaudit.attacks.bounds.gdp import gdp_epsilon
from privaudit.core.errors import ConfigError, check_positive, check_probability, one_of

NOISE_MODES = ("projected", "full")
GDP_CANDIDATES = 32  # FPR levels tried on the selection half
GDP_THRESHOLDS = 4  # kept for the evaluation half (Bonferroni k)


# -- scores ----------------------------------------------------------------------------------------
def step_mu(differences: Sequence[torch.Tensor], stds: Sequence[float]) -> float:
    """mu = sqrt(sum_q ||d_q||^2 / sigma_q^2) of Gaussian releases with noiseless differences d_q."""
    if len(differences) != len(stds) or not differences:
        raise ConfigError("step audit: need one noise std per released quantity")
    total = 0.0
    for d, s in zip(differences, stds):
        check_positive("noise std", s)
        total += float(torch.linalg.vector_norm(d.double())) ** 2 / float(s) ** 2
    return math.sqrt(total)


def gaussian_step_scores(differences: Sequence[torch.Tensor], stds: Sequence[float], draws: int,
                         generator: torch.Generator, *, noise: str = "projected", chunk: int = 256
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The optimal statistic T on ``draws`` runs of the step on D (side 0) and on D' (side 1).

    ``noise='full'`` draws every quantity's noise vector N(0, sigma_q^2 I) and projects it on
    d_q / sigma_q^2 (``chunk`` draws at a time); ``'projected'`` draws T's Gaussian law directly.
    """
    if noise not in NOISE_MODES:
        raise one_of("noise", noise, NOISE_MODES)
    check_positive("draws", draws)
    mu = step_mu(differences, stds)
    out = []
    for _side in range(2):
        if noise == "projected":
            t = torch.randn(draws, generator=generator, dtype=torch.float64) * mu
        else:
            t = torch.zeros(draws, dtype=torch.float64)
            for d, s in zip(differences, stds):
                w = d.double().reshape(-1) / float(s) ** 2
                for start in range(0, draws, chunk):
                    k = min(chunk, draws - start)
                    e = torch.randn(k, w.numel(), generator=generator, dtype=torch.float64) * float(s)
                    t[start:start + k] += e @ w
        out.append(t)
    return out[0].numpy(), (out[1] + mu * mu).numpy()


def additive_step_scores(m0: torch.Tensor, m1: torch.Tensor, release: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
                         log_density: Callable[[torch.Tensor], torch.Tensor], scale: float, draws: int,
                         generator: torch.Generator, *, noise: str = "projected", max_elements: int = 1 << 22
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The optimal statistic of an additive mechanism with i.i.d. noise of known density, on D and on D'.

    The release is y = m + s xi, xi_j i.i.d. with unit log-density ``log_density`` (pure-DP mechanisms:
    logistic, Laplace); by Neyman-Pearson the most powerful test of D (mean m0) against D' (mean m1)
    thresholds T(y) = sum_j log p((y_j - m1_j) / s) - log p((y_j - m0_j) / s). ``release(m, gen)`` is the
    defense's own noise code (a leading draw dimension is added here), called on ``draws`` copies of m0
    (side 0) and of m1 (side 1). Only the coordinates where m0 and m1 differ enter T, and the noise is
    independent across coordinates, so ``noise='projected'`` releases those coordinates alone (exact in
    distribution, independent of the parameter count); ``'full'`` releases every coordinate (chunked to
    ``max_elements`` per call); tests check that both agree.
    """
    if noise not in NOISE_MODES:
        raise one_of("noise", noise, NOISE_MODES)
    check_positive("draws", draws)
    check_positive("scale", scale)
    m0, m1 = m0.double().reshape(-1), m1.double().reshape(-1)
    if m0.shape != m1.shape:
        raise ConfigError(f"step audit: the two sides' outputs differ in shape ({tuple(m0.shape)} vs {tuple(m1.shape)})")
    if noise == "projected":
        support = torch.nonzero(m0 != m1).reshape(-1)
        if support.numel() == 0:
            support = torch.zeros(1, dtype=torch.long)  # identical outputs: T = 0 on both sides
        m0, m1 = m0[support], m1[support]
    rows = max(1, int(max_elements) // max(1, m0.numel()))
    out = []
    for mean in (m0, m1):
        t = np.empty(int(draws), dtype=np.float64)
        for start in range(0, int(draws), rows):
            k = min(rows, int(draws) - start)
            y = release(mean.expand(k, -1), generator)
            llr = log_density((y - m1) / scale) - log_density((y - m0) / scale)
            t[start:start + k] = llr.sum(dim=1).numpy()
        out.append(t)
    return out[0], out[1]


# -- bounds ----------------------------------------------------------------------------------------
def _cp_two_sided(k: int, n: int, alpha: float) -> tuple[float, float]:
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def _mu_at(fpr_hi: np.ndarray, fnr_hi: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        mu = stats.norm.isf(fpr_hi) - stats.norm.ppf(fnr_hi)
    return np.where(np.isfinite(mu), mu, np.where(mu > 0, np.inf, 0.0))


def _mu_counts(fp: int, n_out: int, fn: int, n_in: int, level: float) -> float:
    """Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi) with one-sided Clopper-Pearson bounds at ``level`` each."""
    fpr_hi, fnr_hi = clopper_pearson_upper(fp, n_out, level), clopper_pearson_upper(fn, n_in, level)
    return float(_mu_at(np.array([fpr_hi]), np.array([fnr_hi]))[0])


def gdp_bound(out_scores: np.ndarray, in_scores: np.ndarray, *, alpha: float = 0.05, seed: int = 0,
              thresholds: int = GDP_THRESHOLDS) -> dict[str, Any]:
    """Sound mu lower bound: thresholds picked on one half, Bonferroni over ``thresholds`` on the other.

    ``out_scores``: the statistic on D (large means D'); ``in_scores``: on D'. Returns ``mu_lower``,
    the evaluation counts and the trade-off points (FPR, FNR) with two-sided CIs at alpha / k.
    """
    check_probability("alpha", alpha)
    out_scores = np.asarray(out_scores, dtype=np.float64).ravel()
    in_scores = np.asarray(in_scores, dtype=np.float64).ravel()
    if min(out_scores.size, in_scores.size) < 4:
        raise ConfigError("gdp bound: needs at least 4 draws per side")
    rng = np.random.default_rng([int(seed), 0x57E9])
    po, pi = rng.permutation(out_scores.size), rng.permutation(in_scores.size)
    ho, hi = out_scores.size // 2, in_scores.size // 2
    sel_out, sel_in = np.sort(out_scores[po[:ho]]), np.sort(in_scores[pi[:hi]])
    ev_out, ev_in = np.sort(out_scores[po[ho:]]), np.sort(in_scores[pi[hi:]])
    k = int(thresholds)
    level = alpha / (2 * k)
    # candidate thresholds: quantiles of the selection half's D-scores at log-spaced FPRs
    fprs = np.geomspace(0.5, max(5.0 / sel_out.size, 1e-6), GDP_CANDIDATES)
    cand = np.unique(np.quantile(sel_out, 1.0 - fprs))
    fp = sel_out.size - np.searchsorted(sel_out, cand, side="left")
    fn = np.searchsorted(sel_in, cand, side="left")
    f_hi = np.array([clopper_pearson_upper(int(a), sel_out.size, level) for a in fp])
    n_hi = np.array([clopper_pearson_upper(int(b), sel_in.size, level) for b in fn])
    order = np.argsort(-_mu_at(f_hi, n_hi), kind="stable")
    chosen = np.sort(cand[order[:k]])
    points = []
    best = 0.0
    for t in chosen:
        fp_e = int(ev_out.size - np.searchsorted(ev_out, t, side="left"))
        fn_e = int(np.searchsorted(ev_in, t, side="left"))
        mu = _mu_counts(fp_e, ev_out.size, fn_e, ev_in.size, level)
        best = max(best, mu)
        points.append({"threshold": float(t), "fp": fp_e, "fn": fn_e, "fpr": fp_e / ev_out.size,
                       "fnr": fn_e / ev_in.size, "fpr_ci": _cp_two_sided(fp_e, ev_out.size, alpha / k),
                       "fnr_ci": _cp_two_sided(fn_e, ev_in.size, alpha / k), "mu_lower": max(mu, 0.0)})
    return {"mu_lower": max(best, 0.0), "thresholds": len(chosen), "alpha": alpha,
            "selection": [int(ho), int(hi)], "evaluation": [int(ev_out.size), int(ev_in.size)], "tradeoff": points}


def gdp_mu_recomputed(gdp: dict[str, Any], alpha: float) -> float:
    """:func:`gdp_bound`'s mu_lb recomputed from its saved evaluation counts at another ``alpha`` (the same
    thresholds, chosen on the selection half, with the same Bonferroni over them): the gate's family-wise level."""
    check_probability("alpha", alpha)
    n_out, n_in = (int(v) for v in gdp["evaluation"])
    level = alpha / (2 * max(1, int(gdp["thresholds"])))
    return max([0.0] + [_mu_counts(int(p["fp"]), n_out, int(p["fn"]), n_in, level) for p in gdp["tradeoff"]])


@dataclass(frozen=True)
class StepBounds:
    """Both sound per-step lower bounds from one set of scores (each at confidence 1 - alpha)."""

    epsilon_lower: float  # Clopper-Pearson, threshold chosen on a separate half
    mu_lower: float  # GDP, Bonferroni over the evaluated thresholds
    epsilon_from_mu: float  # the epsilon at delta of mu_lower-GDP (a bound on the step only if it is GDP)
    alpha: float
    delta: float
    draws: int
    cp: dict[str, Any]
    gdp: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"epsilon_lower": self.epsilon_lower, "mu_lower": self.mu_lower, "epsilon_from_mu": self.epsilon_from_mu,
                "confidence": 1 - self.alpha, "delta": self.delta, "draws_per_side": self.draws,
                "clopper_pearson": self.cp, "gdp": self.gdp}


def step_bounds(out_scores: np.ndarray, in_scores: np.ndarray, *, alpha: float = 0.05, delta: float = 1e-5,
                seed: int = 0) -> StepBounds:
    """CP epsilon and GDP mu lower bounds, each at confidence 1 - alpha, from the two sides' scores."""
    cp = multi_run_bound(in_scores, out_scores, alpha=alpha, delta=delta, threshold="split", seed=seed)
    g = gdp_bound(out_scores, in_scores, alpha=alpha, seed=seed)
    eps_mu = gdp_epsilon(g["mu_lower"], delta) if delta > 0 else (math.inf if g["mu_lower"] > 0 else 0.0)
    return StepBounds(float(cp.epsilon), float(g["mu_lower"]), float(eps_mu), alpha, delta,
                      int(min(np.size(out_scores), np.size(in_scores))), dict(cp.counts), g)


# -- mechanisms with known privacy (soundness tests) ------------------------------------------------
@lru_cache(maxsize=32)
def _tradeoff_curve(kind: str, param: float, q: float) -> tuple[np.ndarray, ...]:
    """(FPR, FNR) of the likelihood-ratio tests of a :class:`KnownMechanism` on a fine grid (cached)."""
    return KnownMechanism(kind, param, q)._exact_tradeoff()


def _tight_mu(fpr: np.ndarray, fnr: np.ndarray, tnr: np.ndarray, power: np.ndarray) -> float:
    """sup over the trade-off points of Phi^-1(1 - FPR) - Phi^-1(FNR): the smallest mu with f >= G_mu.

    Each quantile is taken from whichever of the rate and its complement is below 1/2 (both are given
    exactly), so the far tails, where the supremum of a subsampled mechanism sits, keep their precision.
    """
    ok = (fpr > 0) & (tnr > 0) & (fnr > 0) & (power > 0)
    a = np.where(fpr[ok] < 0.5, stats.norm.isf(fpr[ok]), stats.norm.ppf(tnr[ok]))
    b = np.where(fnr[ok] < 0.5, stats.norm.ppf(fnr[ok]), stats.norm.isf(power[ok]))
    return float(np.max(a - b, initial=0.0))


@dataclass(frozen=True)
class KnownMechanism:
    """A one-dimensional mechanism on a fixed neighbouring pair with known privacy.

    ``kind``: ``gaussian`` (N(0,1) vs N(mu,1)), ``laplace`` (Lap(0,1) vs Lap(eps,1)), ``logistic``
    (Logistic(0,1) vs Logistic(eps,1): ALM's pair at its claimed sensitivity, pure eps-DP), ``rr``
    (randomized response: the true bit kept with probability e^eps / (1 + e^eps)), ``subsampled-gaussian``
    (Poisson rate q: N(0, 1) vs (1 - q) N(0, 1) + q N(1/sigma, 1), scored by the mixture likelihood ratio,
    monotone in y).
    """

    kind: str
    param: float
    q: float = 1.0

    KINDS = ("gaussian", "laplace", "logistic", "rr", "subsampled-gaussian")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise one_of("kind", self.kind, self.KINDS)
        check_positive("param", self.param)

    def sample(self, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Scores (log-likelihood ratio or a monotone function of it) on D and on D'."""
        n = int(draws)
        if self.kind == "gaussian":
            return rng.standard_normal(n), rng.standard_normal(n) + self.param
        if self.kind == "laplace":
            return rng.laplace(0.0, 1.0, n), rng.laplace(self.param, 1.0, n)
        if self.kind == "logistic":  # the likelihood ratio of a logistic shift is increasing in y
            return rng.logistic(0.0, 1.0, n), rng.logistic(self.param, 1.0, n)
        if self.kind == "rr":
            keep = math.exp(self.param) / (1 + math.exp(self.param))
            return (rng.random(n) >= keep).astype(float), (rng.random(n) < keep).astype(float)
        m = 1.0 / self.param
        y0 = rng.standard_normal(n)
        y1 = rng.standard_normal(n) + m * (rng.random(n) < self.q)
        llr = lambda y: np.log1p(self.q * np.expm1(m * y - m * m / 2))  # noqa: E731
        return llr(y0), llr(y1)

    def _exact_tradeoff(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(FPR, FNR, 1 - FPR, 1 - FNR), each complement computed directly (no cancellation in the tails)."""
        if self.kind == "rr":
            keep = math.exp(self.param) / (1 + math.exp(self.param))
            a = np.linspace(0, 1, 200001)
            b = np.maximum(np.maximum(1 - a * keep / (1 - keep), (1 - keep) / keep * (1 - a)), 0.0)
            return a, b, 1 - a, 1 - b
        t = np.linspace(-40, 40, 400001)
        if self.kind == "gaussian":
            return stats.norm.sf(t), stats.norm.cdf(t - self.param), stats.norm.cdf(t), stats.norm.sf(t - self.param)
        if self.kind in ("laplace", "logistic"):
            d = stats.laplace if self.kind == "laplace" else stats.logistic
            return d.sf(t), d.cdf(t - self.param), d.cdf(t), d.sf(t - self.param)
        m = 1.0 / self.param
        fnr = (1 - self.q) * stats.norm.cdf(t) + self.q * stats.norm.cdf(t - m)
        power = (1 - self.q) * stats.norm.sf(t) + self.q * stats.norm.sf(t - m)
        return stats.norm.sf(t), fnr, stats.norm.cdf(t), power

    def true_mu(self) -> float:
        """The smallest mu such that the D-vs-D' trade-off curve lies above G_mu."""
        if self.kind == "gaussian":
            return float(self.param)
        return _tight_mu(*_tradeoff_curve(self.kind, self.param, self.q))

    def true_delta(self, eps: float) -> float:
        """delta(eps) of the D-vs-D' test: sup_t 1 - FNR(t) - e^eps FPR(t) (over all tests)."""
        fpr, fnr, _, _ = _tradeoff_curve(self.kind, self.param, self.q)
        return float(max(np.max(1 - fnr - math.exp(eps) * fpr), np.max(1 - fpr - math.exp(eps) * fnr), 0.0))

    def true_epsilon(self, delta: float) -> float:
        """The smallest eps with delta(eps) <= delta for this pair (both directions)."""
        if self.kind == "gaussian" and delta > 0:
            return gdp_epsilon(self.param, delta)
        if self.kind in ("laplace", "logistic", "rr") and delta == 0:
            return float(self.param)
        if self.true_delta(0.0) <= delta:
            return 0.0
        hi = 1.0
        while self.true_delta(hi) > delta:
            hi *= 2
        return float(optimize.brentq(lambda e: self.true_delta(e) - delta, 0.0, hi, xtol=1e-7))
