"""Constructed pairs for Logit-DP's pair sums (Lemma 4.5): add-remove, n = 1 -> 2.

Derivation. With one pair (x1, y1), the InfoNCE loss is 0 and every tau_ij = dL/dZ_ij vanishes,
so Delta = ||sum_ij tau_ij Clip_B(grad Z_ij)|| over the 2 x 2 logits of D'. Row i has
tau_ii = p_ii - 1 and tau_ij = p_ij = 1 - p_ii. The projection head Linear-ReLU-Linear is set so
that the four rows' hidden features are orthogonal (unit k active, at ``height``, only on row k:
a least-squares hyperplane through the rows' representations) and the last layer puts row k at
angle phi_k of the (u, v) plane at radius ``scale``: x1 at 0, y2 at delta, y1 at pi + epsilon,
x2 at pi + delta - epsilon''. Then grad_W Z_ij = s_ij (t_xi (x) e_xi - t_yj (x) e_yj) / scale
with s_ij = sin(phi_yj - phi_xi) (the other layers get nothing: the head's columns are
parallel to the rows' embeddings, orthogonal to the tangents t). The signs make every c_ij =
tau_ij sgn(s_ij) equal to 1 - p (p = p_ii, the same for both rows), so the clipped sum has norm
C sqrt((1/2) [sum_i (sum_j c_ij)^2 + sum_j (sum_i c_ij)^2]) = 2 sqrt(2) (1 - p) C with
p = 1 / (1 + e^{2 cos(delta) / tau}): 2.49 C at tau = 1 (ratio 1.25 against Lemma 4.5's 2C at
n = 2), 2.78 C at tau = 0.5, 2.83 C at tau = 0.1.
"""

from __future__ import annotations

import math

import torch

from privaudit.audit.sensitivity.domains import ImageDomain, Pair
from privaudit.audit.sensitivity.extremal.heads import affine_fit, blank_head, with_head
from privaudit.audit.sensitivity.extremal.layer_inputs import layer_inputs, shared_seed
from privaudit.audit.sensitivity.evaluator import Target

# (delta, epsilon, epsilon''): the small angles of :func:`logit_seeds`
LOGIT_ANGLES = ((0.1, 0.1, 0.1), (0.3, 0.3, 0.3), (0.03, 0.03, 0.03))


def _logit_head(base: dict[str, torch.Tensor], prefix: str, head: torch.nn.Sequential, sol: torch.Tensor,
                phis: torch.Tensor, scale: float, height: float) -> dict[str, torch.Tensor]:
    """Parameters with hidden unit k active (at ``height``) on row k only (the fitted hyperplanes ``sol``)
    and the last layer putting row k at angle ``phis[k]``, radius ``scale``."""
    w1, b1, w2, b2 = blank_head(head)
    w1[:4] = sol[:-1].T
    b1[:4] = sol[-1]
    w2[0, :4] = scale * torch.cos(phis) / height
    w2[1, :4] = scale * torch.sin(phis) / height
    return with_head(base, prefix, head, w1, b1, w2, b2)


def logit_seeds(target: Target, gen: torch.Generator, scale: float = 1e-3, height: float = 10.0) -> list[Pair]:
    """Add-remove pairs n = 1 -> 2 with constructed parameters for Logit-DP's pair sums (module doc), one
    per angle triple of :data:`LOGIT_ANGLES`."""
    dom = target.domain
    module = target.module
    head = getattr(getattr(module, "projector", None), "net", None)
    if module is None or not isinstance(dom, ImageDomain) or target.relation != "add-remove" or target.units != 1 \
            or "n" not in target.params or head is None or len(head) != 3:
        return []
    first, last = head[0], head[2]
    prefix = [n for n, m in module.named_modules() if m is head][0]
    if first.out_features < 4 or last.out_features < 2:
        return []
    x = {"x": dom.pool_x[:1].clone()}
    new = {"x": 1.0 - x["x"]}
    seed = shared_seed(gen)
    pair = Pair(x, new, 0, seed)
    _, b_rows = pair.neighbours(target.relation, dom.unit_size)
    reps = layer_inputs(target, first, b_rows, seed)  # rows [x1, x2, y1, y2]
    if len(reps) != 4:
        return []
    sol = affine_fit(reps, height * (2 * torch.eye(4, dtype=reps.dtype) - 1))  # +height on row k, -height elsewhere
    base = target.parameters()
    out = []
    for delta, eps, eps2 in LOGIT_ANGLES:
        phis = torch.tensor([0.0, math.pi + delta - eps2, math.pi + eps, delta], dtype=torch.float64)
        out.append(Pair(x, new, 0, seed, _logit_head(base, prefix, head, sol, phis, scale, height)))
    return out
