"""All randomness of one DP step, keyed by (seed, step, purpose, batch position).

A step's random choices -- augmented views, group keys, the noise of every mechanism -- come from
:class:`StepRandomness`. Per-example draws are made in fixed blocks of batch positions, each block
from its own generator, so a draw for position k does not depend on how many examples follow it:
two neighbouring batches B and B + {x} (x appended last) that share a ``StepRandomness`` get the
same views, group keys and noise for every common example. The sensitivity checks rely on this to
evaluate a privatized quantity on both neighbours under the same randomness; training uses the
same code, so the checked function is exactly the trained one.
"""

from __future__ import annotations

from typing import Callable

import torch

from privaudit.defenses.training.seeding import derive_seed, torch_generator

BLOCK = 64  # batch positions per generator block

Augmentation = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


class StepRandomness:
    """Named random streams for step ``step`` of a run seeded with ``seed``."""

    def __init__(self, seed: int, step: int = 0):
        self.seed = int(seed)
        self.step = int(step)

    @classmethod
    def resolve(cls, randomness: "int | torch.Generator | StepRandomness") -> "StepRandomness":
        """Accept a seed, a CPU generator (one seed is drawn from it) or a StepRandomness."""
        if isinstance(randomness, StepRandomness):
            return randomness
        if isinstance(randomness, torch.Generator):
            return cls(int(torch.randint(0, 2 ** 62, (1,), generator=randomness)))
        if isinstance(randomness, bool) or not isinstance(randomness, int):
            raise TypeError(f"randomness: expected an int seed, a torch.Generator or StepRandomness, "
                            f"got {type(randomness).__name__}")
        return cls(randomness)

    def generator(self, *purpose: object) -> torch.Generator:
        return torch_generator(self.seed, "step", self.step, *purpose)

    def subseed(self, *purpose: object) -> int:
        return derive_seed(self.seed, "step", self.step, *purpose)

    def normal(self, shape: tuple[int, ...] | torch.Size, purpose: str, *, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Standard normal draws of a fixed shape for mechanism ``purpose``."""
        draw = torch.randn(tuple(shape), generator=self.generator("normal", purpose),
                           dtype=torch.float64 if dtype == torch.float64 else torch.float32)
        return draw.to(device=device, dtype=dtype)

    def uniform(self, n: int, purpose: str, *, device: torch.device | str = "cpu") -> torch.Tensor:
        """One U[0, 1) draw per batch position (position-stable across batch sizes)."""
        blocks = [torch.rand(BLOCK, generator=self.generator("uniform", purpose, b))
                  for b in range((n + BLOCK - 1) // BLOCK)]
        out = torch.cat(blocks)[:n] if blocks else torch.zeros(0)
        return out.to(device)

    def views(self, augment: Augmentation, x: torch.Tensor, purpose: str) -> torch.Tensor:
        """One augmented view of every row of ``x`` (position-stable across batch sizes).

        Each block of BLOCK positions is padded to full size and augmented with its own generator,
        so the parameters drawn for a row do not depend on the rows after it.
        """
        n = x.shape[0]
        outs = []
        for b, start in enumerate(range(0, n, BLOCK)):
            block = x[start:start + BLOCK]
            k = block.shape[0]
            if k < BLOCK:
                block = torch.cat([block, block[-1:].expand(BLOCK - k, *block.shape[1:])])
            outs.append(augment(block, self.generator("views", purpose, b))[:k])
        return torch.cat(outs) if outs else x[:0].clone()
