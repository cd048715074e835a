"""Deterministic fine-tuning of the classification head on frozen features, many datasets at once.

The ALM paper fine-tunes the head with Keras (random initialisation, minibatches), which makes
Algorithm 2's "sensitivity" a property of two random training runs rather than of the data. We
fine-tune a head whose result is a *function of the dataset*: the unique minimiser of the
L2-regularised multinomial logistic loss (strictly convex)

    F_w(W) = (1 / sum_i w_i) sum_i w_i CE(W x_i, y_i) + (lambda / 2) ||W||_F^2,

where x_i are the standardised features with a constant 1 appended (the bias is the last column of
W and is regularised like the rest), and w_i are record counts (a remove-one dataset has one zero,
a bootstrap database multinomial counts). The solution does not depend on initialisation, batch
order or seed, so remove-one neighbours differ only through their data.

:func:`fit_heads` solves a batch of datasets together: damped Newton from the full training set's
solution, every Newton system solved by conjugate gradients preconditioned with the reference
Hessian (a remove-one dataset's Hessian differs from it by a rank <= K term, so CG needs about K
steps). It stops when every gradient norm is below ``tol``; strong convexity then bounds the distance
to the exact minimiser by ||grad|| / lambda, which is reported. float64 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from privaudit.core.errors import check_positive


@dataclass(frozen=True)
class HeadProblem:
    """Features (with the bias column appended), integer labels, number of classes, L2 weight."""

    x: torch.Tensor  # (N, D) float64
    y: torch.Tensor  # (N,) int64
    num_classes: int
    l2: float

    @classmethod
    def from_features(cls, features: torch.Tensor, labels: torch.Tensor, num_classes: int, l2: float) -> "HeadProblem":
        check_positive("head_l2", l2)
        x = features.double()
        x = torch.cat([x, torch.ones(x.shape[0], 1, dtype=torch.float64)], dim=1)
        return cls(x, labels.long(), int(num_classes), float(l2))

    @property
    def size(self) -> int:
        return int(self.x.shape[0])

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])

    def one_hot(self) -> torch.Tensor:
        return torch.nn.functional.one_hot(self.y, self.num_classes).double()


@dataclass(frozen=True)
class HeadFit:
    """Solutions W (B, K, D), the largest final gradient norm and the error bound it implies."""

    weights: torch.Tensor
    max_grad_norm: float
    error_bound: float  # max_b ||W_b - W_b*||_F <= max_grad_norm / lambda
    iterations: int


def objective(problem: HeadProblem, w: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """F_w(W) for a batch: ``w`` (B, K, D), ``weights`` (B, N); returns (B,)."""
    logits = torch.einsum("nd,bkd->bnk", problem.x, w)
    nll = torch.logsumexp(logits, dim=2) - logits.gather(2, problem.y.view(1, -1, 1).expand(w.shape[0], -1, 1))[..., 0]
    mass = weights.sum(dim=1)
    return (weights * nll).sum(dim=1) / mass + 0.5 * problem.l2 * w.pow(2).sum(dim=(1, 2))


def gradient(problem: HeadProblem, w: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """grad F_w(W) = (1/sum w) sum_i w_i (softmax(W x_i) - e_{y_i}) x_i^T + lambda W, batched (B, K, D)."""
    logits = torch.einsum("nd,bkd->bnk", problem.x, w)
    residual = torch.softmax(logits, dim=2) - problem.one_hot().unsqueeze(0)
    coef = weights / weights.sum(dim=1, keepdim=True)
    return torch.einsum("bn,bnk,nd->bkd", coef, residual, problem.x) + problem.l2 * w


def hessian(problem: HeadProblem, w: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Hessian of F_w at one W (K, D) as a (K D, K D) matrix (row-major vec of W).

    H = sum_i c_i (diag(p_i) - p_i p_i^T) kron x_i x_i^T + lambda I, c = w / sum w, computed as a
    block-diagonal part (block k: X^T diag(c p_:k) X) minus the Gram matrix of the rows c_i^(1/2) p_i kron x_i.
    """
    k, d = w.shape
    p = torch.softmax(problem.x @ w.T, dim=1)  # (N, K)
    coef = weights / weights.sum()
    x = problem.x
    blocks = torch.einsum("nk,na->kan", coef.unsqueeze(1) * p, x) @ x  # (K, D, D)
    h = torch.block_diag(*blocks)
    v = (coef.sqrt().unsqueeze(1) * p).unsqueeze(2) * x.unsqueeze(1)  # (N, K, D)
    v = v.reshape(x.shape[0], k * d)
    h = h - v.T @ v
    return h + problem.l2 * torch.eye(k * d, dtype=h.dtype)


def newton_solve(problem: HeadProblem, weights: torch.Tensor, *, tol: float = 1e-9,
                 max_iter: int = 100) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Damped Newton (Armijo backtracking) from W = 0 for one dataset; returns (W, Hessian at W, iterations)."""
    weights = weights.double().view(1, -1)
    w = torch.zeros(1, problem.num_classes, problem.dim, dtype=torch.float64)
    for it in range(1, max_iter + 1):
        g = gradient(problem, w, weights)
        h = hessian(problem, w[0], weights[0])
        if float(g.norm()) <= tol:
            return w[0], h, it - 1  # the Hessian at the solution, for fit_heads' preconditioner
        step = torch.linalg.solve(h, g.reshape(-1)).view_as(w)
        f0, slope, t = objective(problem, w, weights), float((g * step).sum()), 1.0
        while float(objective(problem, w - t * step, weights)) > float(f0) - 1e-4 * t * slope and t > 1e-10:
            t *= 0.5
        w = w - t * step
    g = gradient(problem, w, weights)
    if float(g.norm()) > tol:
        raise RuntimeError(f"head fine-tuning did not converge: gradient norm {float(g.norm()):.3g} > {tol}")
    return w[0], hessian(problem, w[0], weights[0]), max_iter


def hessian_vector(problem: HeadProblem, probs: torch.Tensor, coef: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Batched Hessian-vector products H_b(W_b) v_b, with softmax outputs ``probs`` (B, N, K) at W_b."""
    u = torch.einsum("nd,bkd->bnk", problem.x, v)
    t = probs * u - probs * (probs * u).sum(dim=2, keepdim=True)
    return torch.einsum("bn,bnk,nd->bkd", coef, t, problem.x) + problem.l2 * v


def _pcg(matvec, rhs: torch.Tensor, precond, iters: int, rel_tol: float) -> torch.Tensor:
    """Batched preconditioned conjugate gradients for H_b s_b = rhs_b (each b has its own step sizes)."""
    tiny = torch.finfo(rhs.dtype).tiny
    s = torch.zeros_like(rhs)
    r = rhs.clone()
    z = precond(r)
    d = z.clone()
    rz = (r * z).flatten(1).sum(1)
    stop = rel_tol * rhs.flatten(1).norm(dim=1)
    for _ in range(iters):
        if bool((r.flatten(1).norm(dim=1) <= stop).all()):
            break
        hd = matvec(d)
        dhd = (d * hd).flatten(1).sum(1)
        alpha = torch.where(dhd > tiny, rz / dhd.clamp_min(tiny), torch.zeros_like(rz)).view(-1, 1, 1)
        s = s + alpha * d
        r = r - alpha * hd
        z = precond(r)
        rz_new = (r * z).flatten(1).sum(1)
        beta = torch.where(rz > tiny, rz_new / rz.clamp_min(tiny), torch.zeros_like(rz)).view(-1, 1, 1)
        d = z + beta * d
        rz = rz_new
    return s


def fit_heads(problem: HeadProblem, weights: torch.Tensor, *, reference: tuple[torch.Tensor, torch.Tensor] | None = None,
              tol: float = 1e-9, max_iter: int = 50, cg_iters: int = 100) -> HeadFit:
    """Exact minimisers of F_w for every row of ``weights`` (B, N), solved together.

    Batched damped Newton from ``reference`` = (W_ref, H_ref) (by default the full training set's
    solution and Hessian from :func:`newton_solve`); each Newton system H_b(W_b) s = grad_b is
    solved by conjugate gradients preconditioned with H_ref (a Cholesky solve). For remove-one
    neighbours H_b differs from H_ref by a rank <= K update, so CG converges in about K steps.
    """
    weights = weights.double()
    if reference is None:
        reference = newton_solve(problem, torch.ones(problem.size, dtype=torch.float64), tol=tol)[:2]
    w_ref, h_ref = reference
    chol = torch.linalg.cholesky(h_ref)
    kd = w_ref.numel()
    shape = (-1, *w_ref.shape)

    def precond(r: torch.Tensor) -> torch.Tensor:
        return torch.cholesky_solve(r.reshape(-1, kd).T, chol).T.reshape(shape)

    coef = weights / weights.sum(dim=1, keepdim=True)
    w = w_ref.unsqueeze(0).expand(weights.shape[0], -1, -1).clone()
    for it in range(max_iter + 1):
        g = gradient(problem, w, weights)
        worst = float(g.flatten(1).norm(dim=1).max()) if g.numel() else 0.0
        if worst <= tol:
            return HeadFit(w, worst, worst / problem.l2, it)
        if it == max_iter:
            break
        probs = torch.softmax(torch.einsum("nd,bkd->bnk", problem.x, w), dim=2)
        # Inexact Newton (Eisenstat-Walker style forcing term): solve loosely far from the optimum.
        forcing = min(0.1, max(1e-12, worst ** 0.5))
        step = _pcg(lambda v: hessian_vector(problem, probs, coef, v), g, precond, cg_iters, forcing)
        # Armijo backtracking per dataset (a full Newton step is accepted near the optimum).
        f0 = objective(problem, w, weights)
        slope = (g * step).flatten(1).sum(1)
        t = torch.ones(w.shape[0], dtype=torch.float64)
        for _ in range(30):
            ok = objective(problem, w - t.view(-1, 1, 1) * step, weights) <= f0 - 1e-4 * t * slope + 1e-15 * f0.abs()
            if bool(ok.all()):
                break
            t = torch.where(ok, t, 0.5 * t)
        w = w - t.view(-1, 1, 1) * step
    raise RuntimeError(f"head fine-tuning did not converge in {max_iter} Newton iterations "
                       f"(largest gradient norm {worst:.3g} > {tol})")


def head_as_linear(w: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> nn.Linear:
    """The released classifier on raw features h: logits = W[:, :-1] (h - mean)/std + W[:, -1].

    Folding the (public) standardisation into an ``nn.Linear`` is post-processing of the released W.
    """
    weight = w[:, :-1] / std.double().unsqueeze(0)
    bias = w[:, -1] - weight @ mean.double()
    linear = torch.nn.utils.skip_init(nn.Linear, weight.shape[1], weight.shape[0])  # no draw from the global RNG
    with torch.no_grad():
        linear.weight.copy_(weight.float())
        linear.bias.copy_(bias.float())
    return linear.eval()
