"""A planted leaky defense for the gate tests: a Gaussian mechanism whose noise is calibrated to a tenth
of its sensitivity.

Test scaffolding, loaded as the plugin ``leaky_defense:NoisyKernelSum`` (tests/ is on pytest's path).
The released model is a random-feature "kernel sum" classifier: a fixed, data-independent map phi into
unit vectors (random Fourier features of a narrow RBF kernel), and the head

    W = sum_{i in members} phi(x_i) e_{y_i}^T + N(0, sigma^2 I),   logits(x) = W^T phi(x).

Adding or removing one example moves W by phi(x_i) e_{y_i}^T, of Frobenius norm exactly 1, so with
sigma = z (z calibrated for the target epsilon) this is an honest Gaussian mechanism and the claim
``Gaussian(z)`` holds. The planted bug divides the noise by ``leak_factor`` (10 by default: noise
calibrated for sensitivity 1/10) while the claim still says z. A member's own term adds ~1 to its
label's logit, so the loss attack reads membership directly; with the bug the signal-to-noise ratio is
10 times the claim's and a sound one-run bound exceeds the claimed epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from privaudit.accountants.calibrate import calibrate
from privaudit.accountants.claim import PrivacyClaim
from privaudit.accountants.events import GaussianDpEvent
from privaudit.core.datasets import MembershipData
from privaudit.defenses.base import Budget, Defense, Trained
from privaudit.defenses.nn.model import ModelSpec
from privaudit.defenses.training.seeding import torch_generator


class RandomFeatures(nn.Module):
    """phi(x) = normalise(cos(x W + b)): random Fourier features of an RBF kernel, unit norm."""

    def __init__(self, in_dim: int, dim: int, bandwidth: float, seed: int):
        super().__init__()
        gen = torch_generator(seed, "random-features")
        self.w = nn.Parameter(torch.randn(in_dim, dim, generator=gen) / bandwidth, requires_grad=False)
        self.b = nn.Parameter(torch.rand(dim, generator=gen) * 2 * math.pi, requires_grad=False)

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.cos(x.flatten(1) @ self.w + self.b)
        return z / z.norm(dim=1, keepdim=True).clamp(min=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.represent(x)


@dataclass(frozen=True)
class NoisyKernelSumConfig:
    dim: int = 4096
    bandwidth: float = 0.5
    feature_seed: int = 0
    leak_factor: float = 10.0


class NoisyKernelSum(Defense):
    name = "leaky_defense:NoisyKernelSum"
    private = True
    Config = NoisyKernelSumConfig

    def fit(self, data: MembershipData, budget: Budget, seed: int, *, device="cpu", progress=False) -> Trained:
        cfg = self.config
        delta = budget.resolve_delta(len(data.train))

        def claim(z: float) -> PrivacyClaim:
            return PrivacyClaim(GaussianDpEvent(z), "add-remove", "example", delta, paper_accountant="rdp",
                                source="planted leaky Gaussian mechanism (test plugin)",
                                params={"noise_multiplier": z, "sensitivity": 1.0})

        z = budget.noise_multiplier or calibrate(claim, budget.target_epsilon)
        in_dim = int(math.prod(data.info.shape))
        features = RandomFeatures(in_dim, cfg.dim, cfg.bandwidth, cfg.feature_seed)
        with torch.no_grad():
            phi = features.represent(data.train.x)
            weight = phi.T @ nn.functional.one_hot(data.train.y, data.info.num_classes).float()
            noise = torch.randn(weight.shape, generator=torch_generator(seed, "noise"))
            weight += noise * (z / cfg.leak_factor)  # the planted bug: sigma = z / leak_factor, claim says z
        head = nn.Linear(cfg.dim, data.info.num_classes, bias=False)
        head.weight = nn.Parameter(weight.T.contiguous(), requires_grad=False)
        spec = ModelSpec(encoder="mlp", in_shape=data.info.shape)
        return Trained(self.name, features, spec, claim(z), {}, {"leak_factor": cfg.leak_factor}, seed,
                       classifier=head)


class Broken(NoisyKernelSum):
    """A defense that fails while training (for the run-error path of the gate)."""

    name = "leaky_defense:Broken"

    def fit(self, data, budget, seed, *, device="cpu", progress=False):
        raise RuntimeError("planted failure while training")


@dataclass(frozen=True)
class PausingConfig(NoisyKernelSumConfig):
    pause_seconds: float = 0.0
    marker: str = ""


class Pausing(NoisyKernelSum):
    """The honest kernel sum, but training appends a line to ``marker`` and then pauses: a test can see that
    a cell is training and kill the run there (the SIGKILL-and-resume tests)."""

    name = "leaky_defense:Pausing"
    Config = PausingConfig

    def fit(self, data, budget, seed, *, device="cpu", progress=False):
        import time
        from pathlib import Path

        if self.config.marker:
            with Path(self.config.marker).open("a") as handle:
                handle.write(f"{self.marker_line(budget)}\n")
        time.sleep(self.pause_seconds())
        self.after_pause(budget)
        return super().fit(data, budget, seed, device=device, progress=progress)

    def marker_line(self, budget) -> str:
        return str(budget.target_epsilon)

    def pause_seconds(self) -> float:
        return self.config.pause_seconds

    def after_pause(self, budget) -> None:
        pass


class LateWriter(Pausing):
    """Pausing, but the marker's line is the training process's pid, the pause is ``$LATE_WRITER_PAUSE`` seconds
    (an environment variable, so the pause is no part of the cell's configuration and a resume in a process
    without it does not wait), and after it a file is written into the run's pretrained cache (``OUT/cache``), as
    public pretraining does: a worker that outlived a killed run would write into the output directory then. With
    ``$LATE_WRITER_FULL_DISK`` set, that write finds the disk full (fsync fails with ENOSPC), in whichever process
    trains."""

    name = "leaky_defense:LateWriter"

    def marker_line(self, budget) -> str:
        import os

        return str(os.getpid())

    def pause_seconds(self) -> float:
        import os

        return float(os.environ.get("LATE_WRITER_PAUSE", "0"))

    def after_pause(self, budget) -> None:
        import errno
        import os

        from privaudit.core.io import atomic_write_bytes
        from privaudit.defenses.training.pretrain import cache_dir

        if cache_dir() is None:
            return
        real = os.fsync

        def full_disk(fd: int) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        if os.environ.get("LATE_WRITER_FULL_DISK"):
            os.fsync = full_disk
        try:
            atomic_write_bytes(cache_dir() / f"late-{budget.target_epsilon:g}.bin", b"written after the pause")
        finally:
            os.fsync = real
