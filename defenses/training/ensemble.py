"""Many small models of one architecture trained together: stacked parameters and one batched step.

Shadow and reference models (LiRA, Shokri, EncoderMI, multi-run audits) are K copies of the target's
training run on different data and seeds. When they fit in memory, stacking their parameters
(``torch.func.stack_module_state``) and computing all K losses in one pass — the K networks folded
into one wide network where the layers allow it (:mod:`privaudit.defenses.training.folding`), ``vmap(functional_call)``
otherwise — turns K small, overhead-bound training loops into one. Each model keeps its own data,
batch order, augmentation stream, initialisation and optimizer state, so the result equals K
separate runs of the same defense (tests check this against the defense's own ``fit``). The gain is
the per-model overhead: large for small models, none for models whose own arithmetic saturates the
CPU (use ``max_stack=1`` there; on a GPU stacking wins in both cases).

Models whose runs have different lengths (training sets of different sizes) are handled with a
per-model ``active`` mask: a finished model's parameters and optimizer state are left untouched.
The optimizers are functional re-implementations of ``torch.optim.SGD`` (momentum, no dampening)
and ``torch.optim.Adam`` with a per-model step count, tested against the torch versions.

A defense opts in by implementing ``fit_many(datas, budget, seeds, *, device, progress)``;
:func:`fit_many` falls back to calling ``fit`` once per model for defenses without one.
"""

from __future__ import annotations

import copy
import time
from typing import Callable, Iterator, Sequence

import torch
import torch.nn as nn
from torch.func import stack_module_state

from privaudit.core.errors import one_of
from privaudit.defenses.training.folding import batched_forward
from privaudit.defenses.training.training import OPTIMIZERS


class StackedOptimizer:
    """SGD-with-momentum or Adam over stacked parameters (leading dim K), one step count per model.

    Matches ``torch.optim.SGD(lr, momentum, weight_decay)`` (dampening 0, no Nesterov) and
    ``torch.optim.Adam(lr, betas, eps, weight_decay)`` (no AMSGrad) model by model.
    """

    def __init__(self, params: dict[str, torch.Tensor], name: str, lr: float, momentum: float = 0.9,
                 weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        if name not in OPTIMIZERS:
            raise one_of("optimizer", name, OPTIMIZERS)
        self.params, self.name, self.lr = params, name, lr
        self.momentum, self.weight_decay, self.betas, self.eps = momentum, weight_decay, betas, eps
        first = next(iter(params.values()))
        self.k = first.shape[0]
        self.steps = torch.zeros(self.k, dtype=torch.float64)
        self.state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in params.items()}

    @torch.no_grad()
    def step(self, grads: dict[str, torch.Tensor | None], active: torch.Tensor) -> None:
        """Update the models where ``active`` (bool (K,)) is True; leave the others unchanged."""
        active = active.to(torch.bool).cpu()
        self.steps += active.to(torch.float64)
        t = self.steps.clamp(min=1.0)
        b1, b2 = self.betas
        bc1 = (1.0 - b1 ** t).to(torch.float32)
        bc2_sqrt = (1.0 - b2 ** t).sqrt().to(torch.float32)
        everyone = bool(active.all())
        if everyone and self.name == "adam" and not self.weight_decay:
            self._adam_foreach(grads, bc1, bc2_sqrt)
            return
        for name, p in self.params.items():
            g = grads.get(name)
            g = torch.zeros_like(p) if g is None else g
            shape = (self.k,) + (1,) * (p.dim() - 1)
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            a, b = self.state[name]
            if self.name == "sgd":
                buf = a.mul(self.momentum).add_(g) if self.momentum else g
                new_p = p.add(buf, alpha=-self.lr)
                updates = [(a, buf)] if self.momentum else []
            else:
                m = a.lerp(g, 1.0 - b1)
                v = b.mul(b2).addcmul_(g, g, value=1.0 - b2)
                denom = v.sqrt().div_(bc2_sqrt.to(p.device).view(shape)).add_(self.eps)
                new_p = p - m.div(bc1.to(p.device).view(shape)).div_(denom).mul_(self.lr)
                updates = [(a, m), (b, v)]
            updates.append((p, new_p))
            if everyone:  # the common case: every model takes this step
                for old, new in updates:
                    old.copy_(new)
            else:
                mask = active.to(p.device).view(shape)
                for old, new in updates:
                    old.copy_(torch.where(mask, new, old))


    def _adam_foreach(self, grads: dict[str, torch.Tensor | None], bc1: torch.Tensor, bc2_sqrt: torch.Tensor) -> None:
        """The Adam step of :meth:`step` when every model takes it, as a few ``torch._foreach_*`` calls over
        all parameters (the same operations in the same order, so the same numbers, without a Python loop)."""
        names = list(self.params)
        ps = [self.params[n] for n in names]
        gs = [torch.zeros_like(p) if grads.get(n) is None else grads[n] for n, p in zip(names, ps)]
        ms = [self.state[n][0] for n in names]
        vs = [self.state[n][1] for n in names]
        b1, b2 = self.betas
        shapes = [(self.k,) + (1,) * (p.dim() - 1) for p in ps]
        c1 = [bc1.to(p.device).view(sh) for p, sh in zip(ps, shapes)]
        c2 = [bc2_sqrt.to(p.device).view(sh) for p, sh in zip(ps, shapes)]
        torch._foreach_lerp_(ms, gs, 1.0 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, gs, gs, value=1.0 - b2)
        denom = torch._foreach_sqrt(vs)
        torch._foreach_div_(denom, c2)
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(ms, c1)
        torch._foreach_div_(update, denom)
        torch._foreach_mul_(update, self.lr)
        torch._foreach_sub_(ps, update)


LossFn = Callable[..., torch.Tensor]


class StackedTrainer:
    """K models of one architecture with stacked parameters, trained by one batched loss per step.

    ``loss_fn(call, *inputs)`` returns the K losses (K,): ``call(x)`` runs all K models on stacked
    inputs x (K, B, ...) and returns (K, B, ...) — folded into one wide network when the architecture
    allows it (:mod:`privaudit.defenses.training.folding`), else with ``vmap(functional_call)``.
    """

    def __init__(self, modules: Sequence[nn.Module], optimizer: str, lr: float, momentum: float = 0.9,
                 weight_decay: float = 0.0, fold: bool = True):
        self.modules = list(modules)
        params, buffers = stack_module_state(self.modules)
        self.params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        self.buffers = {k: v.detach() for k, v in buffers.items()}
        self.base = copy.deepcopy(self.modules[0]).to("meta")
        self.forward = batched_forward(self.base, fold)
        self.optimizer = StackedOptimizer(self.params, optimizer, lr, momentum, weight_decay)

    @property
    def k(self) -> int:
        return len(self.modules)

    def losses(self, loss_fn: LossFn, *inputs: torch.Tensor) -> torch.Tensor:
        """The K losses (K,) of the current parameters on stacked inputs."""
        return loss_fn(lambda x: self.forward(self.params, self.buffers, x), *inputs)

    def step(self, loss_fn: LossFn, inputs: Sequence[torch.Tensor], active: torch.Tensor) -> torch.Tensor:
        losses = self.losses(loss_fn, *inputs)
        names = list(self.params)
        grads = torch.autograd.grad(losses.sum(), [self.params[n] for n in names], allow_unused=True)
        self.optimizer.step(dict(zip(names, grads)), active)
        return losses.detach()

    def run(self, streams: Sequence[Iterator[torch.Tensor]], total: int,
            make_inputs: Callable[[int, torch.Tensor], tuple[torch.Tensor, ...]], loss_fn: LossFn, *,
            desc: str = "train", progress: bool = True,
            make_batch: Callable[[list[int], list[torch.Tensor]], tuple[torch.Tensor, ...]] | None = None
            ) -> list[dict[str, list[float]]]:
        """Train until every model's batch stream is exhausted; ``total`` is the longest stream's length.

        ``make_inputs(k, idx)`` builds model k's inputs for its batch ``idx`` (augmentations drawn from
        model k's own generator). ``make_batch(ks, idxs)``, when given, builds the stacked inputs of the
        models ``ks`` at once (the same values, fewer operations). Returns one history per model
        (``step``, ``seconds``, ``loss``).
        """
        from tqdm.auto import tqdm

        histories: list[dict[str, list[float]]] = [{"step": [], "seconds": [], "loss": []} for _ in range(self.k)]
        last: list[tuple[torch.Tensor, ...] | None] = [None] * self.k
        inputs: list[torch.Tensor] | None = None
        start = time.perf_counter()
        bar = tqdm(total=total, desc=desc, disable=None if progress else True, leave=False, dynamic_ncols=True)
        try:
            for _ in range(total):
                active = torch.zeros(self.k, dtype=torch.bool)
                if make_batch is not None:
                    inputs = self._batched_inputs(streams, make_batch, active, inputs)
                else:
                    inputs = self._stacked_inputs(streams, make_inputs, active, last)
                if inputs is None:  # every stream is exhausted
                    break
                losses = self.step(loss_fn, inputs, active)
                now = time.perf_counter() - start
                for k in torch.nonzero(active).flatten().tolist():
                    h = histories[k]
                    h["step"].append(len(h["step"]))
                    h["seconds"].append(now)
                    h["loss"].append(float(losses[k]))
                bar.update(1)
        finally:
            bar.close()
        return histories

    def _batched_inputs(self, streams: Sequence[Iterator[torch.Tensor]],
                        make_batch: Callable[[list[int], list[torch.Tensor]], tuple[torch.Tensor, ...]],
                        active: torch.Tensor, previous: list[torch.Tensor] | None) -> list[torch.Tensor] | None:
        """The next stacked inputs from ``make_batch`` of the models with a batch left (marked in ``active``);
        finished models see their last inputs (their parameters are not updated). None when all are done."""
        ks, idxs = [], []
        for k, stream in enumerate(streams):
            idx = next(stream, None)
            if idx is not None:
                active[k] = True
                ks.append(k)
                idxs.append(idx)
        if not ks:
            return None
        fresh = make_batch(ks, idxs)
        if len(ks) == self.k:
            return list(fresh)
        inputs = [t.clone() for t in previous]
        for part, new in zip(inputs, fresh):
            part[ks] = new
        return inputs

    @staticmethod
    def _stacked_inputs(streams: Sequence[Iterator[torch.Tensor]],
                        make_inputs: Callable[[int, torch.Tensor], tuple[torch.Tensor, ...]], active: torch.Tensor,
                        last: list[tuple[torch.Tensor, ...] | None]) -> list[torch.Tensor] | None:
        """Each model's next inputs from ``make_inputs``, stacked (models with a batch left marked in
        ``active``; finished models repeat their ``last`` inputs). None when every stream is exhausted."""
        per_model = []
        for k, stream in enumerate(streams):
            idx = next(stream, None)
            if idx is not None:
                active[k] = True
                last[k] = make_inputs(k, idx)
            per_model.append(last[k])
        if not active.any():
            return None
        fill = next(x for x in per_model if x is not None)
        per_model = [x if x is not None else fill for x in per_model]
        return [torch.stack(parts) for parts in zip(*per_model)]

    @torch.no_grad()
    def unstack(self) -> list[nn.Module]:
        """Write the trained parameters back into the original modules and return them."""
        for k, module in enumerate(self.modules):
            state = {name: p[k].detach().clone() for name, p in self.params.items()}
            state.update({name: b[k].clone() for name, b in self.buffers.items()})
            module.load_state_dict(state)
        return self.modules


def fit_many(defense, datas: Sequence, budget, seeds: Sequence[int], *, device: str | torch.device = "cpu",
             progress: bool = False) -> list:
    """Train ``defense`` once per (data, seed): its vectorised ``fit_many`` when it has one, else ``fit``."""
    if len(datas) != len(seeds):
        raise ValueError(f"fit_many: {len(datas)} datasets for {len(seeds)} seeds")
    batched = getattr(defense, "fit_many", None)
    if batched is not None and len(datas) > 1:
        return list(batched(list(datas), budget, list(seeds), device=device, progress=progress))
    return [defense.fit(d, budget, s, device=device, progress=progress) for d, s in zip(datas, seeds)]
