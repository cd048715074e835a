"""Local training of all virtual clients of a round at once (DP-FedEmb Algorithm 1 lines 4–12).

Every virtual client starts from the global backbone theta^(t) (Algorithm 1 line 5 prints
theta^(0), a typo: with theta^(0) the rounds could never build on each other and line 16's update
would be lost) and a head: a freshly initialised local softmax head over the client's own classes
(DP-FedEmb) or the broadcast global head (DP-FedAvg, Algorithm 2). K steps of minibatch SGD
(optionally with momentum) update the backbone with learning rate beta_1 and the head with beta_2.
The logits are <omega, f(theta, x)> without bias (Sec. 2.1).

The C clients are C small independent trainings: their parameters are stacked
(``torch.func.stack_module_state`` semantics, built from the global state) and each SGD step is one
``vmap`` of ``grad`` over clients, not a Python loop over clients or examples.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value, vmap

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LocalResult:
    """Stacked final backbone parameters (C, ...), heads (C, L, E) and per-step mean losses (C, K)."""

    params: Params
    heads: torch.Tensor
    losses: torch.Tensor


def stack_params(params: Params, copies: int) -> Params:
    """``copies`` independent copies of every tensor, stacked on a new leading dimension."""
    return {name: p.detach().unsqueeze(0).repeat(copies, *([1] * p.dim())) for name, p in params.items()}


def local_train(backbone: nn.Module, params: Params, heads: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                class_mask: torch.Tensor, *, lr_backbone: float, lr_head: float, momentum: float = 0.0) -> LocalResult:
    """K local SGD steps for C clients together.

    ``params``: stacked backbone parameters (C, ...); ``heads``: (C, L, E); ``x``: (C, K, b, ...)
    minibatches; ``y``: (C, K, b) labels in [0, L); ``class_mask``: (C, L) True for the head rows a
    client uses (padding rows get -inf logits and no gradient).
    """

    def loss_fn(p: Params, head: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        emb = functional_call(backbone, p, (xb,))
        logits = (emb @ head.T).masked_fill(~mask, float("-inf"))
        return F.cross_entropy(logits, yb)

    step_fn = vmap(grad_and_value(loss_fn, argnums=(0, 1)))
    velocity = {name: torch.zeros_like(p) for name, p in params.items()}
    head_velocity = torch.zeros_like(heads)
    losses = []
    for k in range(x.shape[1]):
        (g_params, g_head), loss = step_fn(params, heads, x[:, k], y[:, k], class_mask)
        losses.append(loss)
        velocity = {name: momentum * velocity[name] + g for name, g in g_params.items()}
        head_velocity = momentum * head_velocity + g_head
        params = {name: params[name] - lr_backbone * velocity[name] for name in params}
        heads = heads - lr_head * head_velocity
    return LocalResult(params, heads, torch.stack(losses, dim=1).detach())


def client_minibatches(examples: list[torch.Tensor], steps: int, batch_size: int,
                       gen: torch.Generator) -> torch.Tensor:
    """(C, steps, b) example indices: each client walks through fresh random permutations of its data."""
    out = torch.empty(len(examples), steps * batch_size, dtype=torch.long)
    need = steps * batch_size
    for c, idx in enumerate(examples):
        reps = -(-need // len(idx))
        order = torch.cat([idx[torch.randperm(len(idx), generator=gen)] for _ in range(reps)])
        out[c] = order[:need]
    return out.view(len(examples), steps, batch_size)
