"""Exact sampling on a grid: ALM's logistic and Gaussian releases without floating-point support holes.

Why. The float64 release x + s (log u - log1p(-u)) (u = k 2^-53) can only produce the doubles that some k maps to,
and which doubles those are depends on x: near an output y, the doubles reachable from x and from a neighbour x'
differ, so most outputs are *impossible* under the neighbour (Mironov 2012, "On significance of the least
significant bits for differential privacy", CCS; measured by :mod:`privaudit.attacks.step.reachability`: 77% of the
digits head's outputs at epsilon 1). No epsilon covers an output that the neighbour cannot produce.

The release here (per coordinate, every value exact)::

    y = Lambda * clamp_N( round_Lambda(clamp_B(x)) / Lambda + K ),     N = B / Lambda

* ``clamp_B`` clamps to [-B, B]; ``round_Lambda`` rounds to the nearest multiple of the grid step Lambda, a power of
  two (exact in float64); the integer ``round_Lambda(clamp_B(x)) / Lambda`` is at most N <= 2^52 in magnitude;
* K is an integer drawn *exactly* (integer arithmetic on uniformly random bits, no floating point) from

  - logistic: P(K = k) proportional to the Logistic(0, s) density at k Lambda (``discrete logistic``), by
    rejection from a discrete Laplace (Canonne, Kamath & Steinke 2020, "The discrete Gaussian for differential
    privacy", Alg. 2) accepted with probability sigma(|k| t)^2 (t = Lambda / s; ratio of the two mass functions,
    at most 1) -- each Bernoulli(1 / (1 + e^{-|k| t})) from Bernoulli(e^{-|k| t}) coins: the parity of the number
    of heads before the first tail is even with probability 1 / (1 + p);
  - Gaussian: the discrete Gaussian N_Z(0, sigma_g^2) (CKS 2020, Alg. 3), sigma_g^2 an integer;

  every Bernoulli(e^{-gamma}) with rational gamma is CKS 2020 Alg. 1, every uniform integer is drawn by rejection
  from a power-of-two range (torch's ``randint`` over 2^62 is exact: 2^62 divides 2^64);
* ``clamp_N`` clamps the integer to [-N, N] (post-processing), so y is an exact double in [-B, B].

The support is therefore every multiple of Lambda in [-B, B], whatever x is: there are no holes, and the release's
distribution is exactly the discrete one its guarantee is about.

Guarantees (per coordinate, then over the d released coordinates):

* Logistic: the Logistic(0, s) log-density is (1/s)-Lipschitz, so P(K = k) / P(K = k + j) <= e^{|j| Lambda / s}:
  inputs whose grid points differ by m Lambda in L1 give a privacy loss at most m Lambda / s. Clamping is
  1-Lipschitz and rounding to the grid moves each coordinate by at most Lambda / 2, so for neighbours with L1
  distance Delta_1 the grid points differ by at most Delta_1 + d Lambda in L1:
  **pure eps = (Delta_1 + d Lambda) / s**, the grid's cost d Lambda / s stated (:func:`grid_overhead`; Lambda
  <= s 2^-40 or B 2^-52, so the cost is below d 2^-40 + d B 2^-52 / s).
* Gaussian: the multivariate discrete Gaussian with shift v (in grid units) is (||v||_2^2 / (2 sigma_g^2))-zCDP
  (CKS 2020, Thm. 14); with ||v||_2 <= (Delta_2 + sqrt(d) Lambda) / Lambda it is rho-zCDP for
  rho = 1 / (2 z^2), z = sigma / (Delta_2 + sqrt(d) Lambda) (sigma = sigma_g Lambda), converted to (eps, delta)
  by the RDP accountant's conversion. The continuous Gaussian's analytic curve is not claimed for it.

Randomness: a seeded ``torch.Generator`` (reproducible, not cryptographic), like every other noise in privaudit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from privaudit.core.errors import ConfigError, check_positive

#: the logistic grid: Lambda <= s 2^-LOGISTIC_BITS (the noise scale in grid units is an integer of ~41 bits)
LOGISTIC_BITS = 40
#: the Gaussian grid: sigma / Lambda in [2^GAUSSIAN_BITS, 2^(GAUSSIAN_BITS+1)) (keeps CKS Alg. 3's integers in int64)
GAUSSIAN_BITS = 12
#: the largest |integer| of a grid point: N = B / Lambda <= 2^INT_BITS, so every output is an exact double
INT_BITS = 52
_WORD = 2 ** 62  # randint's range for raw words (exactly uniform)
GRID_MECHANISMS = ("logistic", "gaussian")


def _pow2_at_least(x: float) -> float:
    """The smallest power of two >= x (x > 0), exactly."""
    mantissa, exponent = math.frexp(x)
    return x if mantissa == 0.5 else math.ldexp(1.0, exponent)


def _pow2_at_most(x: float) -> float:
    """The largest power of two <= x (x > 0), exactly."""
    mantissa, exponent = math.frexp(x)
    return math.ldexp(1.0, exponent - 1)


def check_grid_bound(clamp_bound: float) -> float:
    if isinstance(clamp_bound, bool) or not isinstance(clamp_bound, (int, float)) or not math.isfinite(clamp_bound) \
            or clamp_bound <= 0:
        raise ConfigError(f"clamp_bound: must be a finite number > 0, got {clamp_bound!r}")
    return float(clamp_bound)


def logistic_grid(scale: float, clamp_bound: float) -> float:
    """Lambda of the logistic release: max(the largest power of two <= s 2^-40, the smallest power of two >=
    B 2^-52): fine beside the scale, coarse enough that every grid point in [-B, B] is an exact double."""
    check_positive("scale", scale)
    b = check_grid_bound(clamp_bound)
    return max(_pow2_at_most(scale * 2.0 ** -LOGISTIC_BITS), _pow2_at_least(b * 2.0 ** -INT_BITS))


def gaussian_grid(sigma: float, clamp_bound: float) -> float:
    """Lambda of the Gaussian release: the power of two with sigma / Lambda in [2^12, 2^13), at least B 2^-52."""
    check_positive("sigma", sigma)
    b = check_grid_bound(clamp_bound)
    return max(_pow2_at_most(sigma * 2.0 ** -GAUSSIAN_BITS), _pow2_at_least(b * 2.0 ** -INT_BITS))


def grid_overhead(mechanism: str, grid: float, coordinates: int) -> float:
    """What rounding to the grid adds to the sensitivity: d Lambda (L1, logistic) or sqrt(d) Lambda (L2, Gaussian)."""
    check_positive("coordinates", coordinates)
    return coordinates * grid if mechanism == "logistic" else math.sqrt(coordinates) * grid


@dataclass(frozen=True)
class GridNoise:
    """The integer noise of one grid release: ``mechanism``, the grid step Lambda, the clamp bound B, and the
    scale in grid units as exact integers: logistic s / Lambda = ``num / den``; Gaussian sigma^2 / Lambda^2 = ``num``
    (``den`` = 1). ``scale``: the noise scale in output units (s or sigma) this exactly corresponds to."""

    mechanism: str
    grid: float
    clamp_bound: float
    num: int
    den: int

    @property
    def scale(self) -> float:
        if self.mechanism == "gaussian":
            return math.sqrt(self.num) * self.grid
        return self.num / self.den * self.grid

    @property
    def limit(self) -> int:
        """N = B / Lambda (rounded down): outputs are integers in [-N, N] times Lambda."""
        return int(math.floor(self.clamp_bound / self.grid))


def grid_noise(mechanism: str, scale: float, clamp_bound: float, grid: float | None = None) -> GridNoise:
    """The exact integer parameters of a release with noise scale at least ``scale`` (s or sigma) on ``grid``
    (default: :func:`logistic_grid` / :func:`gaussian_grid`). The scale is rounded *up* to what the integers
    represent exactly (logistic: a 40-bit significand; Gaussian: sigma^2 / Lambda^2 an integer): more noise,
    never less; :attr:`GridNoise.scale` is the one released and accounted."""
    check_positive("scale", scale)
    b = check_grid_bound(clamp_bound)
    if mechanism == "logistic":
        lam = logistic_grid(scale, b) if grid is None else float(grid)
        mantissa, exponent = math.frexp(scale / lam)
        m = math.ceil(mantissa * 2 ** LOGISTIC_BITS)
        f = exponent - LOGISTIC_BITS
        num, den = (m << f, 1) if f >= 0 else (m, 1 << -f)
        if den > 2 ** 62 or num > 2 ** 50:
            raise ConfigError(f"scale: the logistic noise scale {scale:.6g} is out of the grid release's range at "
                              f"clamp bound {b:.6g} (scale / grid = {scale / lam:.6g})")
        g = math.gcd(num, den)
        return GridNoise(mechanism, lam, b, num // g, den // g)
    if mechanism == "gaussian":
        lam = gaussian_grid(scale, b) if grid is None else float(grid)
        num = math.ceil((scale / lam) ** 2)
        if num > 2 ** 28:
            raise ConfigError(f"scale: sigma / grid = {scale / lam:.6g} is beyond the exact sampler's 2^14")
        return GridNoise(mechanism, lam, b, max(num, 1), 1)
    raise ConfigError(f"mechanism: no grid release for {mechanism!r}; accepted: {', '.join(GRID_MECHANISMS)}")


# -- exact integer sampling -------------------------------------------------------------------------------
def uniform_below(n: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Uniform integers in {0, ..., n - 1} per element (n >= 1, int64, n <= 2^62), exactly: the top bits of a
    62-bit word, as many as n - 1 has, rejected while >= n (each try succeeds with probability > 1/2)."""
    n = n.to(torch.int64)
    # bit length of n - 1 (float64 may round n - 1 up to the next power of two: one bit more, still exact)
    shift = 62 - torch.frexp((n - 1).double()).exponent.to(torch.int64)
    out = torch.empty_like(n)
    idx = torch.arange(n.numel())
    while idx.numel():
        value = torch.randint(0, _WORD, (idx.numel(),), generator=gen, dtype=torch.int64) >> shift[idx]
        ok = value < n[idx]
        out[idx[ok]] = value[ok]
        idx = idx[~ok]
    return out


def bernoulli_exp(num: torch.Tensor, den: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Bernoulli(exp(-num / den)) per element, exactly (CKS 2020, Alg. 1; num >= 0, den >= 1, int64, den below
    2^62 / k for the few k the loop reaches: k! grows past any draw count long before).

    gamma = num / den = q + r / den: q Bernoulli(e^-1) coins and one Bernoulli(e^{-r/den}) must all come up 1.
    Bernoulli(e^{-g}), g in [0, 1]: k = 1; while Bernoulli(g / k): k += 1; return k odd.
    """
    num, den = num.to(torch.int64), den.to(torch.int64).expand_as(num)
    q, r = num // den, num % den
    out = _bern_exp_fraction(r, den, gen)
    idx = (out & (q > 0)).nonzero().squeeze(1)
    left = q[idx]
    while idx.numel():
        ones = torch.ones_like(idx)
        coin = _bern_exp_fraction(ones, ones, gen)
        out[idx[~coin]] = False
        left = left - 1
        keep = coin & (left > 0)
        idx, left = idx[keep], left[keep]
    return out


def _bern_exp_fraction(r: torch.Tensor, den: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Bernoulli(exp(-r / den)) for 0 <= r <= den (CKS 2020, Alg. 1): the parity of the first k with a failed
    Bernoulli(r / (den k))."""
    k = torch.ones_like(r)
    idx = (r > 0).nonzero().squeeze(1)
    rr, dd, kk = r[idx], den[idx], k[idx]
    while idx.numel():
        hit = uniform_below(dd * kk, gen) < rr
        k[idx[~hit]] = kk[~hit]
        idx, rr, dd, kk = idx[hit], rr[hit], dd[hit], kk[hit] + 1
    return (k % 2) == 1


def _bern_inverse_one_plus(num: torch.Tensor, den: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Bernoulli(1 / (1 + p)), p = e^{-num/den}, by the two-coin algorithm (Huber): a fair coin; heads: return
    1; tails: a Bernoulli(p) coin, 1: return 0, 0: start again. P(1) = (1/2) / (1/2 + p/2) = 1 / (1 + p); at most 2
    rounds expected."""
    out = torch.zeros_like(num, dtype=torch.bool)
    idx = torch.arange(num.numel())
    while idx.numel():
        heads = torch.randint(0, 2, (idx.numel(),), generator=gen, dtype=torch.int64) == 1
        out[idx[heads]] = True
        tails = idx[~heads]
        coin = bernoulli_exp(num[tails], den[tails], gen)
        idx = tails[~coin]  # coin 1: return 0 (out stays False); coin 0: again
    return out


def _rejection(count: int, propose, gen: torch.Generator, acceptance: float) -> torch.Tensor:
    """``count`` exact draws by rejection: ``propose(n, gen)`` returns (candidates, accepted mask) of n i.i.d.
    tries; the accepted candidates are i.i.d. from the target, and the first ones in draw order fill the slots
    (an order that does not depend on their values). Tries are drawn in batches of about count / acceptance, so a
    few rounds suffice."""
    parts: list[torch.Tensor] = []
    have = 0
    while have < count:
        need = count - have
        tries = int(need / acceptance * 1.1) + 16
        cand, ok = propose(tries, gen)
        kept = cand[ok][:need]
        parts.append(kept)
        have += kept.numel()
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)


def discrete_laplace(count: int, num: int, den: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` draws with P(Z = z) proportional to exp(-|z| den / num) (scale num / den), exactly (CKS 2020,
    Alg. 2)."""
    return _rejection(count, lambda n, g: _laplace_tries(n, int(num), int(den), g), gen, 0.5)


def _laplace_tries(n: int, num: int, den: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n tries of CKS 2020 Alg. 2: U uniform below num kept with probability e^{-U/num}, V ~ Geometric(1 - 1/e),
    Y = (U + num V) // den, a sign; (-0) rejected."""
    t = torch.full((n,), num, dtype=torch.int64)
    u = uniform_below(t, gen)
    keep = bernoulli_exp(u, t, gen)
    v = torch.zeros(n, dtype=torch.int64)  # geometric: Bernoulli(e^-1) successes before the first failure
    g = keep.nonzero().squeeze(1)
    while g.numel():
        ones = torch.ones_like(g)
        coin = bernoulli_exp(ones, ones, gen)
        g = g[coin]
        v[g] += 1
    y = (u + num * v) // den
    sign = torch.randint(0, 2, (n,), generator=gen, dtype=torch.int64)
    keep &= ~((sign == 1) & (y == 0))
    return (1 - 2 * sign) * y, keep


def discrete_logistic(count: int, num: int, den: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` draws with P(K = k) proportional to the Logistic(0, 1) density at k den / num, exactly.

    Rejection from the discrete Laplace of the same scale (t = den / num): the logistic mass e^{-|k| t} /
    (1 + e^{-|k| t})^2 over the Laplace mass e^{-|k| t} is sigma(|k| t)^2 <= 1, so a draw k is kept when two
    independent Bernoulli(1 / (1 + e^{-|k| t})) both come up 1 (acceptance about 1/2).
    """
    def tries(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        k = discrete_laplace(n, num, den, g)
        a = k.abs() * int(den)
        b = torch.full_like(k, int(num))
        keep = _bern_inverse_one_plus(a, b, g)
        second = keep.nonzero().squeeze(1)
        keep[second] = _bern_inverse_one_plus(a[second], b[second], g)
        return k, keep

    return _rejection(count, tries, gen, 0.45)


def discrete_gaussian(count: int, sigma2: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` draws of N_Z(0, sigma2) (P(K = k) proportional to exp(-k^2 / (2 sigma2))), sigma2 a positive
    integer <= 2^28, exactly (CKS 2020, Alg. 3): t = floor(sigma) + 1, Y discrete Laplace of scale t, kept with
    probability exp(-(|Y| - sigma2 / t)^2 / (2 sigma2)) = exp(-(|Y| t - sigma2)^2 / (2 sigma2 t^2))."""
    sigma2 = int(sigma2)
    t = math.isqrt(sigma2) + 1
    c = 2 * sigma2 * t * t

    def tries(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        y = discrete_laplace(n, t, 1, g)
        diff = y.abs() * t - sigma2
        # diff^2 fits int64 while |diff| < 2^31; the far tails beyond (rare) are decided with Python integers
        big = diff.abs() >= 2 ** 31
        keep = torch.zeros_like(y, dtype=torch.bool)
        small = (~big).nonzero().squeeze(1)
        if small.numel():
            keep[small] = bernoulli_exp(diff[small] ** 2, torch.full_like(diff[small], c), g)
        for i in big.nonzero().squeeze(1).tolist():
            keep[i] = _bern_exp_python(int(diff[i]) ** 2, c, g)
        return y, keep

    return _rejection(count, tries, gen, 0.5)


def _bern_exp_python(num: int, den: int, gen: torch.Generator) -> bool:
    """Bernoulli(exp(-num / den)) for one pair of Python integers (q coins e^-1, then e^{-r/den})."""
    q, r = divmod(num, den)
    one = torch.ones(1, dtype=torch.int64)
    for _ in range(q):
        if not bool(bernoulli_exp(one, one, gen)[0]):
            return False
    if r == 0:
        return True
    # r / den with den possibly > 2^62 / k: scale both down exactly is impossible; draw uniforms in Python
    k = 1
    while True:
        bound = den * k
        bits = bound.bit_length()
        while True:
            value = 0
            for _ in range((bits + 61) // 62):
                value = (value << 62) | int(torch.randint(0, _WORD, (1,), generator=gen, dtype=torch.int64))
            value >>= ((bits + 61) // 62) * 62 - bits
            if value < bound:
                break
        if value < r:
            k += 1
        else:
            return k % 2 == 1


def integer_noise(noise: GridNoise, count: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` exact integer draws of the release's noise (in grid units), on one torch thread (the loops run
    many small integer operations, which intra-op threads only slow down; the draws do not depend on it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if noise.mechanism == "logistic":
            return discrete_logistic(count, noise.num, noise.den, gen)
        return discrete_gaussian(count, noise.num, gen)
    finally:
        torch.set_num_threads(threads)


# -- the release -----------------------------------------------------------------------------------------------
def grid_points(values: torch.Tensor, noise: GridNoise) -> torch.Tensor:
    """round_Lambda(clamp_B(values)) / Lambda as int64 (exact: division by a power of two, floor, tie to +inf)."""
    t = values.double().clamp(-noise.clamp_bound, noise.clamp_bound) / noise.grid
    k = torch.floor(t)
    return (k + (t - k >= 0.5).double()).to(torch.int64).clamp(-noise.limit, noise.limit)


def grid_release(values: torch.Tensor, noise: GridNoise, gen: torch.Generator) -> torch.Tensor:
    """The release of every coordinate of ``values`` (float64, same shape): grid point + exact integer noise,
    clamped to [-N, N], times Lambda (see module doc)."""
    base = grid_points(values, noise)
    k = integer_noise(noise, base.numel(), gen).reshape(base.shape)
    return ((base + k).clamp(-noise.limit, noise.limit).double() * noise.grid)


def on_grid(y: torch.Tensor, noise: GridNoise) -> torch.Tensor:
    """Whether each output is in the release's support (for any input): a multiple of Lambda within [-N Lambda,
    N Lambda]. The reachability test of a grid release."""
    y = y.double()
    t = y / noise.grid
    return torch.isfinite(y) & (t == torch.floor(t)) & (t.abs() <= noise.limit)
