"""The noise's joint law within a step, recorded from the noise as the code drew it: the statistics the trace's
``noise_law`` tests read (:mod:`privaudit.accountants.trace.noise_law`, where the maths and what they cannot see are).

:func:`noise_law` takes one step's noise (flat, in the layout of ``shapes``: the parameter tensors in order) and
returns a small record (no noise value is kept):

* ``repeat``: equal |values| found by sorting their bit patterns (stable, so each group of equal |values| is in index
  order): the pairs consecutive within a group, binned by lag; the lag holding the most (``count``, ``lag`` and the
  tensors of its first pair) and the largest group (``largest``). O(n log n);
* ``lag``: every tensor's autocorrelation at every lag, sum_i x_i x_{i+L}, by FFT (float64: its error, about 1e-13
  of sum x^2, is far below any correlation the test rejects), the (tensor, lag) of the largest tail exponent;
* ``pair``: the Gram matrix of the tensors of each size, the pair of the largest |cosine| (of the smallest p over
  the sizes).

A step of more than :data:`MAX_READ` coordinates reads a window: whole tensors in the layout's cyclic order from one
chosen by the noise's first value (so the window moves from step to step), a tensor larger than the window its
first :data:`MAX_READ` coordinates; ``window`` says which. The statistics take a leading batch dimension
(:func:`laws`: B steps' records at once), so the soundness tests simulate many steps at once.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from privaudit.accountants.trace.noise_law import cosine_tail, tail_exponent

#: The most coordinates one step's record reads (a window beyond it: module docstring).
MAX_READ = 2 ** 20
#: Lags per tensor whose exact tail exponent is computed (those of largest Gaussian approximation).
CANDIDATES = 64
_INT = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
        torch.bfloat16: torch.int16}


def significand_bits(dtype: torch.dtype) -> int:
    """The significand's bits of a float dtype, its implicit bit included (float32: 24)."""
    return 1 - int(round(math.log2(torch.finfo(dtype).eps)))


def longest_true_run(flags: torch.Tensor) -> torch.Tensor:
    """(B,) the longest run of True along the last axis of a (B, m) bool tensor."""
    if flags.shape[-1] == 0:
        return torch.zeros(flags.shape[:-1], dtype=torch.long, device=flags.device)
    c = flags.long().cumsum(-1)
    base = torch.cummax(torch.where(flags, torch.zeros_like(c), c), dim=-1).values
    return (c - base).max(dim=-1).values


def repeat_stats(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """(B, n) noise -> per row the lag with the most repeated-|value| pairs (``lag``, ``count``, ``at``: the first
    pair's first coordinate, n when none; the smallest lag of a tie) and the largest group of equal |values|
    (``largest``). No scatter (deterministic on every device)."""
    b, n = x.shape
    keys = x.abs().contiguous().view(_INT[x.dtype])
    ordered, idx = torch.sort(keys, dim=-1, stable=True)
    same = ordered[:, 1:] == ordered[:, :-1]
    lag = idx[:, 1:] - idx[:, :-1]
    count, best, at = (torch.zeros(b, dtype=torch.long) for _ in range(3))
    at += n
    for row in range(b):
        lags = lag[row][same[row]]
        if lags.numel():
            values, counts = torch.unique(lags, return_counts=True)
            k = int(counts.argmax())
            count[row], best[row] = int(counts[k]), int(values[k])
            at[row] = int(idx[row, :-1][same[row] & (lag[row] == values[k])].min())
    return {"count": count, "lag": best, "at": at, "largest": longest_true_run(same).cpu() + 1}


def lag_extremes(x: torch.Tensor, slack: torch.Tensor | float = 0.0) -> dict[str, torch.Tensor] | None:
    """(B, n) one tensor's noise (float64) -> per row the lag of the largest tail exponent of its autocorrelation
    (``y``, ``lag``, ``corr``); None below two coordinates. ``slack`` (per row) is taken off every |rho|. The exponent
    is computed on the :data:`CANDIDATES` lags of largest rho^2 / (n - L) (its Gaussian approximation): whichever
    lag is kept, its p times every lag tested bounds the chance of the step's rejection."""
    n = x.shape[-1]
    if n < 2:
        return None
    f = torch.fft.rfft(x, n=2 * n)
    ac = torch.fft.irfft(f.real ** 2 + f.imag ** 2, n=2 * n)[..., :n]
    corr = ac[..., 1:] / ac[..., :1]
    lags = torch.arange(1, n, dtype=x.dtype, device=x.device)
    less = torch.as_tensor(slack, dtype=x.dtype, device=x.device).reshape(-1, 1)
    c = torch.nan_to_num((corr.abs() - less).clamp(min=0))
    top = (c * c / (n - lags)).topk(min(CANDIDATES, n - 1), dim=-1).indices
    y = tail_exponent(c.gather(-1, top), n, (n - lags[top]) / 2, 1.0)
    best = top.gather(-1, y.argmax(dim=-1, keepdim=True))
    return {"y": y.max(dim=-1).values, "lag": best[:, 0] + 1, "corr": corr.gather(-1, best)[:, 0]}


def pair_extremes(x: torch.Tensor, slack: torch.Tensor | float = 0.0) -> dict[str, torch.Tensor] | None:
    """(B, k, m) k tensors of m coordinates (float64) -> per row the pair (i < j) of the largest |cos| less ``slack``
    ((B, k, k) or a float): ``c`` (that value, the cosine test's statistic), ``i``, ``j``, ``corr`` (the cosine);
    None below two tensors."""
    b, k, m = x.shape
    if k < 2:
        return None
    gram = x @ x.transpose(1, 2)
    norms = gram.diagonal(dim1=1, dim2=2).sqrt()
    corr = gram / (norms[:, :, None] * norms[:, None, :])
    upper = torch.ones(k, k, dtype=torch.bool, device=x.device).triu(1)
    c = (torch.nan_to_num((corr.abs() - slack).clamp(min=0)) * upper).reshape(b, -1)
    best = c.argmax(dim=-1)
    return {"c": c.gather(-1, best[:, None])[:, 0], "i": best // k, "j": best % k,
            "corr": corr.reshape(b, -1).gather(-1, best[:, None])[:, 0]}


def window(numels: Sequence[int], start: int, cap: int | None = None) -> list[tuple[int, int]]:
    """(tensor, coordinates read) in the cyclic order from ``start`` while their total stays within ``cap``
    (:data:`MAX_READ` by default; every tensor when they all fit; the first one's first ``cap`` coordinates when it
    alone does not)."""
    cap = MAX_READ if cap is None else cap
    if sum(numels) <= cap:
        return [(j, int(k)) for j, k in enumerate(numels)]
    out, total = [], 0
    for step in range(len(numels)):
        j = (start + step) % len(numels)
        k = int(numels[j])
        if total + k > cap:
            if not out:
                out.append((j, cap))
            break
        out.append((j, k))
        total += k
    return out


def _lag_entries(parts: list[torch.Tensor], slack: torch.Tensor) -> list[dict[str, Any]] | None:
    """Per row, the (tensor, lag) of the largest tail exponent over the tensors ``parts`` (each (B, n_j)), with the
    step's count of (tensor, lag) tests; ``slack`` (B, L)."""
    found = [(j, lag_extremes(p.double(), slack[:, j])) for j, p in enumerate(parts)]
    found = [(j, f) for j, f in found if f is not None]
    if not found:
        return None
    y = torch.stack([f["y"] for _, f in found], dim=1)
    best = y.argmax(dim=1).tolist()
    tests = sum(max(0, p.shape[1] - 1) for p in parts)
    out = []
    for row, k in enumerate(best):
        j, f = found[k]
        out.append({"tensor": j, "n": parts[j].shape[1], "lag": int(f["lag"][row]), "corr": float(f["corr"][row]),
                    "tests": tests, "slack": float(slack[row, j])})
    return out


def _pair_entries(parts: list[torch.Tensor], rounding: torch.Tensor) -> list[dict[str, Any]] | None:
    """Per row, the pair of tensors of one size of the smallest cosine p (:func:`cosine_tail`), with the step's pair
    count; ``rounding`` (B, L): each tensor's rounding bound (slack 2 eps_a / |x_a| + 2 eps_b / |x_b|)."""
    groups: dict[int, list[int]] = {}
    for j, p in enumerate(parts):
        groups.setdefault(p.shape[1], []).append(j)
    found, tests = [], 0
    for m, members in groups.items():
        tests += len(members) * (len(members) - 1) // 2
        if len(members) < 2 or m < 2:
            continue
        x = torch.stack([parts[j].double() for j in members], dim=1)
        rel = torch.nan_to_num(2 * rounding[:, members].to(x) / (x * x).sum(-1).sqrt())
        f = pair_extremes(x, rel[:, :, None] + rel[:, None, :])
        f["slack"] = rel.gather(1, f["i"][:, None])[:, 0] + rel.gather(1, f["j"][:, None])[:, 0]
        f["logp"] = torch.as_tensor(np.log(cosine_tail(f["c"].cpu().numpy(), m) + 1e-320))
        found.append((members, m, f))
    if not found:
        return None
    logp = torch.stack([f["logp"] for _, _, f in found], dim=1)
    out = []
    for row, k in enumerate(logp.argmin(dim=1).tolist()):
        members, m, f = found[k]
        out.append({"tensors": [members[int(f["i"][row])], members[int(f["j"][row])]], "n": m,
                    "corr": float(f["corr"][row]), "tests": tests, "slack": float(f["slack"][row])})
    return out


def _repeat_entries(flat: torch.Tensor, numels: Sequence[int]) -> list[dict[str, Any]]:
    """Per row, the lag of the most repeated pairs (the tensors of its first pair) and the largest repeat."""
    found = repeat_stats(flat)
    ends = torch.tensor(list(numels)).cumsum(0)
    out = []
    for row in range(flat.shape[0]):
        count, lag, at = int(found["count"][row]), int(found["lag"][row]), int(found["at"][row])
        where = [int(torch.searchsorted(ends, i, right=True)) for i in (at, at + lag)] if count else []
        out.append({"count": count, "lag": lag, "largest": int(found["largest"][row]), "tensors": where})
    return out


def laws(noise: torch.Tensor, shapes: Sequence[Sequence[int]], rounding: torch.Tensor | None = None, *,
         correlations: bool = True) -> list[dict[str, Any]]:
    """The records of B steps' noise (B, n), every tensor of ``shapes`` read (no window; :func:`noise_law` for one
    step). ``rounding`` (B, L): for noise measured as a difference, each tensor's rounding bound (module docstring);
    then no repeat test. ``correlations=False``: the repeat test alone."""
    numels = [int(math.prod(s)) for s in shapes]
    b = noise.shape[0]
    parts = list(torch.split(noise, numels, dim=1))
    eps = torch.zeros(b, len(numels), dtype=torch.float64) if rounding is None else rounding.double()
    norms = torch.stack([p.double().norm(dim=1) for p in parts], dim=1).cpu()
    lags = _lag_entries(parts, torch.nan_to_num(4 * eps / norms).to(noise.device)) if correlations else None
    pairs = _pair_entries(parts, eps.to(noise.device)) if correlations else None
    repeats = _repeat_entries(noise, numels) if rounding is None else None
    out = []
    for row in range(b):
        record = {"read": sum(numels), "dim": sum(numels),
                  "bits": None if rounding is not None else significand_bits(noise.dtype),
                  "lag": None if lags is None else lags[row], "pair": None if pairs is None else pairs[row]}
        if repeats is not None:
            record["repeat"] = repeats[row]
        out.append(record)
    return out


def _renumbered(record: dict[str, Any], read: list[tuple[int, int]], dim: int) -> dict[str, Any]:
    """A window's record in the layout's tensor numbers, with the window (first tensor, tensors read)."""
    index = [j for j, _ in read]
    record["dim"], record["window"] = dim, [index[0], len(index)]
    for key, field in (("lag", "tensor"), ("pair", "tensors"), ("repeat", "tensors")):
        entry = record.get(key)
        if entry:
            entry[field] = [index[j] for j in entry[field]] if isinstance(entry[field], list) else index[entry[field]]
    return record


def noise_law(noise: torch.Tensor, shapes: Sequence[Sequence[int]], rounding: Sequence[float] | None = None, *,
              correlations: bool = True) -> dict[str, Any] | None:
    """The record of one step's noise (module docstring); None when it is all 0 (no noise drawn).

    ``noise``: the step's noise as drawn, flat in the layout of ``shapes``. ``rounding``: for noise *measured* as a
    difference (a declared release), a bound on the norm of the rounding in each tensor's noise: the correlations are
    then tested less a slack of 4 rounding / norm, and no repeat test is run (``bits`` None). ``correlations=False``:
    the repeat test alone."""
    flat = noise.detach().reshape(-1)
    if flat.numel() == 0 or not bool(flat.any()):
        return None
    numels = [int(math.prod(s)) for s in shapes]
    if sum(numels) != flat.numel():
        raise ValueError(f"noise_law: {flat.numel()} noise values for tensors of {sum(numels)} coordinates")
    if sum(numels) <= MAX_READ:
        eps = None if rounding is None else torch.tensor([list(rounding)], dtype=torch.float64)
        return laws(flat[None], shapes, eps, correlations=correlations)[0]
    offsets = [0] + torch.tensor(numels).cumsum(0).tolist()
    key = int(flat[:1].abs().contiguous().view(_INT[flat.dtype]).item())
    read = window(numels, key % len(numels))
    part = torch.cat([flat[offsets[j]:offsets[j] + k] for j, k in read])
    eps = None if rounding is None else torch.tensor([[float(rounding[j]) for j, _ in read]], dtype=torch.float64)
    shapes_read = [tuple(shapes[j]) if k == numels[j] else (k,) for j, k in read]
    return _renumbered(laws(part[None], shapes_read, eps, correlations=correlations)[0], read, flat.numel())


def released_law(after: torch.Tensor, base: torch.Tensor, shapes: Sequence[Sequence[int]],
                 draws: Sequence[torch.Tensor] | None = None) -> dict[str, Any] | None:
    """The record of noise a release *added*, measured as ``after - base`` (the released tensors, flat, after the noise
    and before it) in float64: the correlation tests less the addition's rounding (each tensor's bounded by eps, 2u
    of its dtype, times its norm after: the addition rounded once or twice); with the noise ``draws`` the code drew
    (intercepted as drawn), their repeat test, whose values are the drawn ones (``repeat``'s ``n``: the values
    drawn)."""
    eps, rounding, start = float(torch.finfo(after.dtype).eps), [], 0
    for shape in shapes:
        k = int(math.prod(shape))
        rounding.append(eps * float(after[start:start + k].double().norm()))
        start += k
    law = noise_law(after.double() - base.double(), shapes, rounding)
    drawn = None if law is None or not draws else noise_law(torch.cat([d.reshape(-1) for d in draws]),
                                                            [d.shape for d in draws], correlations=False)
    if drawn is not None:
        law["bits"], law["repeat"] = drawn["bits"], {**drawn["repeat"], "n": drawn["read"]}
    return law
