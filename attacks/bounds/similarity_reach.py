"""How much of DPCL's similarity sensitivity any canary can reach on a given batch, and the epsilon it can attain.

DPCL-SimCLR releases S~ = Z Z^T + N(0, (z_S Delta_S)^2) entrywise (Li et al. 2022, Sec. 3.2.2), Delta_S =
4 sqrt(2|B| - 1) (Thm. 1): the largest ||S(Z) - S(Z')||_F when one example (its two unit views a1, a2) is replaced
by another (a1', a2'). Thm. 1's value is attained only when every other row is collinear with the changed views.

On a batch whose other 2|B| - 2 rows are Z_o (unit rows), with G = Z_o^T Z_o and d_i = a_i - a_i':

    ||Delta S||_F^2 = 2 d1^T G d1 + 2 d2^T G d2 + 2 (<a1, a2> - <a1', a2'>)^2      (the unit diagonal is unchanged)
                    <= 16 lambda_max(G) + 8                                         (||d_i|| <= 2, |<.,.>| <= 1)

so the *reach* r = max ||Delta S||_F / Delta_S over every replacement -- crafted inputs, any unit embeddings --
lies in [sqrt(lambda_max / (2|B| - 1)), sqrt((lambda_max + 1/2) / (2|B| - 1))]. The lower end is a witness:
a1 = a2 = v, a1' = a2' = -v with v G's top eigenvector gives ||Delta S||_F^2 = 16 lambda_max exactly.

What it means for an audit. For a canary on this data the similarity release is a Gaussian mechanism of
sensitivity at most r Delta_S, i.e. noise multiplier z_S / r: no instrument, however it observes the release, can
show more than the claim's event with that multiplier (the gradient's kept), whose epsilon
:func:`attainable_epsilon` computes. When it is far below the claim, the claim's epsilon is out of reach on this
data (its noise is calibrated to collinear batches) and a bound's shortfall is the data's; when it is near the
claim, the shortfall is the instrument's (DPCL's gradient canaries do not observe S~).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping

import torch

from privaudit.accountants.claim import PrivacyClaim
from privaudit.attacks.bounds.mechanism import scale_noise
from privaudit.core.errors import ConfigError


@dataclass(frozen=True)
class Reach:
    """A batch's reach: ``witness`` <= the largest ||Delta S||_F / Delta_S <= ``ceiling`` (module docstring)."""

    witness: float
    ceiling: float
    top_eigenvalue: float
    batch_size: int


def similarity_reach(others: torch.Tensor) -> Reach:
    """The reach of one replaced example in a batch whose other 2|B| - 2 rows are ``others`` (unit rows)."""
    if others.ndim != 2 or others.shape[0] < 2 or others.shape[0] % 2:
        raise ConfigError(f"similarity reach: others must be 2|B| - 2 rows (an even count >= 2), got "
                          f"{tuple(others.shape)}")
    rows = others.to(torch.float64)
    norms = rows.norm(dim=1)
    if not torch.allclose(norms, torch.ones_like(norms), atol=1e-4):
        raise ConfigError(f"similarity reach: rows must be L2-normalised (norms {float(norms.min()):.6g} to "
                          f"{float(norms.max()):.6g})")
    lam = float(torch.linalg.eigvalsh(rows.T @ rows)[-1])
    b = rows.shape[0] // 2 + 1
    scale = 2 * b - 1  # Delta_S^2 / 16
    return Reach(math.sqrt(lam / scale), min(1.0, math.sqrt((lam + 0.5) / scale)), lam, b)


def witness_views(others: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The witness pair's two views, (v, v) in one dataset and (-v, -v) in the other, v G's top eigenvector."""
    rows = others.to(torch.float64)
    v = torch.linalg.eigh(rows.T @ rows).eigenvectors[:, -1]
    return torch.stack([v, v]), torch.stack([-v, -v])


def attainable_multiplier(multipliers: Mapping[str, float], reach: Mapping[str, float]) -> float:
    """z_eff of the claim's mechanisms with each reached one's multiplier divided by its reach (others kept).

    z_eff = (sum_k (r_k / z_k)^2)^(-1/2), r_k = 1 for a mechanism not in ``reach``; r_k = 0 drops mechanism k.
    """
    unknown = sorted(set(reach) - set(multipliers))
    if unknown:
        raise ConfigError(f"similarity reach: {unknown} not among the claim's mechanisms {sorted(multipliers)}")
    precision = sum((reach.get(k, 1.0) / z) ** 2 for k, z in multipliers.items())
    return math.inf if precision == 0 else precision ** -0.5


def attainable_epsilon(claim: PrivacyClaim, reach: Mapping[str, float], accountant: str = "pld") -> float:
    """The epsilon of the claim's event at :func:`attainable_multiplier` (its sampling and steps kept)."""
    from privaudit.defenses.dp.accounting import claim_epsilon

    zs = claim.params.get("noise_multipliers")
    z_eff = claim.params.get("effective_noise_multiplier")
    if not zs or not z_eff:
        raise ConfigError("similarity reach: the claim states no noise_multipliers (a DPCL claim does)")
    scaled = dataclasses.replace(claim, event=scale_noise(claim.event, attainable_multiplier(zs, reach) / z_eff))
    eps = claim_epsilon(scaled, accountant)
    if eps is None:
        raise ConfigError(f"similarity reach: accountant {accountant!r} gives no epsilon for {claim.mechanism}")
    return float(eps)
