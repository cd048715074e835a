"""What a constructed pair's rows look like inside the model: the inputs of the layers the constructions
replace (the last linear layer, the projection head), the rows' labels, and the pair's shared seed.

The constructions (one module each in this package) fit parameter values to these inputs; every pair
they build holds rows of the target's domain, so it is a valid input of the code the defense trains with.
"""

from __future__ import annotations

from typing import Any

import torch

from privaudit.audit.sensitivity.search import SEED_RANGE
from privaudit.audit.sensitivity.evaluator import Target


def shared_seed(gen: torch.Generator) -> int:
    """A fresh shared randomness seed for a pair (one draw from ``gen``)."""
    return int(torch.randint(SEED_RANGE, (1,), generator=gen))


def last_linear(module: torch.nn.Module) -> tuple[str, torch.nn.Linear]:
    """The model's last linear layer and its name."""
    name, last = [(n, m) for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)][-1]
    return name, last


def projector(target: Target) -> tuple[str, torch.nn.Sequential] | None:
    """The Linear-ReLU-Linear projection head of a :class:`ContrastiveModel` (name, module), if any."""
    for name, m in target.module.named_modules():
        if isinstance(m, torch.nn.Sequential) and len(m) == 3 and isinstance(m[0], torch.nn.Linear) \
                and isinstance(m[1], torch.nn.ReLU) and isinstance(m[2], torch.nn.Linear) and name.startswith("projector"):
            return name, m
    return None


@torch.no_grad()
def layer_inputs(target: Target, layer: torch.nn.Module, rows: Any, randomness: int, params: Any = None,
                 empty_width: int | None = None) -> torch.Tensor:
    """The inputs (R, H) of ``layer`` for every row the step embeds, in float64.

    Recorded by a forward hook while ``target`` evaluates ``rows`` (at ``params`` when given); only the
    step's plain embedding calls count (calls inside the per-unit engine's ``vmap`` carry
    functorch-wrapped tensors and are skipped), so the rows are those of the step's sources, in their
    order. ``empty_width``: the width of the empty result when no call was recorded (None: an error).
    """
    seen: list[torch.Tensor] = []

    def hook(mod: Any, inp: Any, out: Any) -> None:
        q = inp[0]
        if not torch._C._functorch.is_functorch_wrapped_tensor(q):
            seen.append(q.detach().double().clone())

    handle = layer.register_forward_hook(hook)
    try:
        target.call(target.domain.batch(rows), randomness, params)
    finally:
        handle.remove()
    if not seen and empty_width is not None:
        return torch.zeros(0, empty_width, dtype=torch.float64)
    return torch.cat(seen)


def last_layer_inputs(target: Target, rows: Any, randomness: int, params: Any = None) -> torch.Tensor:
    """The inputs q (R, H) of the model's last linear layer for every row the step embeds (:func:`layer_inputs`)."""
    _, last = last_linear(target.module)
    return layer_inputs(target, last, rows, randomness, params, empty_width=last.in_features)


def projector_inputs(target: Target, rows: Any, randomness: int) -> torch.Tensor | None:
    """The inputs of the projection head's first layer (the rows' representations), None without a head."""
    found = projector(target)
    if found is None:
        return None
    return layer_inputs(target, found[1][0], rows, randomness)


def row_labels(q_rows: int, n_units: int, per_unit: torch.Tensor) -> torch.Tensor:
    """Labels of the step's rows from one label per example (rows are blocks of the batch, in order)."""
    if n_units == 0 or q_rows % n_units:
        raise ValueError(f"{q_rows} embedded rows are not blocks of {n_units} examples")
    return per_unit.double().repeat(q_rows // n_units)
