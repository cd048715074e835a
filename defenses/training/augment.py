"""Two-view augmentations applied to whole batches of tensors (no per-image Python loop).

Every augmentation takes images in [0, 1] of shape (N, C, H, W) and a CPU ``torch.Generator``; all
random parameters are drawn from that generator on the CPU, so two calls with equally seeded
generators give identical views on any device (the sensitivity checks rely on this to share
augmentation randomness between neighbouring batches).

* :class:`DigitsAugment` – small shifts, rotations, crops and pixel noise for 8x8 grey digits.
* :class:`GreyAugment`   – random resized crop and small rotations for 28x28 grey images (MNIST).
* :class:`SimCLRAugment` – SimCLR's family for colour images (Chen et al. 2020, App. A): random
  resized crop with flip, colour jitter (p = 0.8) and random greyscale (p = 0.2); no blur on
  32x32 images, as DPCL Sec. 5.1 does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

import torch
import torch.nn.functional as F

from privaudit.core.datasets import DatasetInfo
from privaudit.core.errors import one_of


class Augmentation(Protocol):
    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor: ...


def _uniform(n: int, low: float, high: float, gen: torch.Generator) -> torch.Tensor:
    return low + (high - low) * torch.rand(n, generator=gen)


def _affine(x: torch.Tensor, theta: torch.Tensor, padding: str) -> torch.Tensor:
    """Resample each image of ``x`` through its own 2x3 affine map ``theta`` (output -> input coords)."""
    theta = theta.to(device=x.device, dtype=x.dtype)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode=padding, align_corners=False)


def random_resized_crop_theta(n: int, scale: tuple[float, float], ratio: tuple[float, float],
                              flip_p: float, gen: torch.Generator) -> torch.Tensor:
    """Affine maps of a random resized crop: area fraction in ``scale``, aspect ratio in ``ratio``."""
    area = _uniform(n, *scale, gen)
    log_ratio = _uniform(n, math.log(ratio[0]), math.log(ratio[1]), gen)
    aspect = torch.exp(log_ratio)
    w = torch.sqrt(area * aspect).clamp(max=1.0)
    h = torch.sqrt(area / aspect).clamp(max=1.0)
    cx = (2 * torch.rand(n, generator=gen) - 1) * (1 - w)
    cy = (2 * torch.rand(n, generator=gen) - 1) * (1 - h)
    flip = torch.where(torch.rand(n, generator=gen) < flip_p, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = w * flip
    theta[:, 0, 2] = cx
    theta[:, 1, 1] = h
    theta[:, 1, 2] = cy
    return theta


def shift_rotate_theta(n: int, size: int, max_shift: float, max_degrees: float,
                       scale: tuple[float, float], gen: torch.Generator) -> torch.Tensor:
    """Affine maps for a random shift (pixels), rotation (degrees) and zoom (``scale`` of the side)."""
    return shift_rotate_from(shift_rotate_draws(n, gen), size, max_shift, max_degrees, scale)


def shift_rotate_draws(n: int, gen: torch.Generator) -> torch.Tensor:
    """The uniform draws of :func:`shift_rotate_theta` (4, n): angle, zoom, x and y shift, in that order."""
    return torch.stack([torch.rand(n, generator=gen) for _ in range(4)])


def shift_rotate_from(u: torch.Tensor, size: int, max_shift: float, max_degrees: float,
                      scale: tuple[float, float]) -> torch.Tensor:
    """The affine maps of :func:`shift_rotate_theta` from its uniform draws ``u`` (4, n)."""
    def between(v: torch.Tensor, low: float, high: float) -> torch.Tensor:
        return low + (high - low) * v  # as _uniform

    angle = between(u[0], -max_degrees, max_degrees) * math.pi / 180
    zoom = between(u[1], *scale)
    pixel = 2.0 / size  # one pixel in normalised coordinates
    tx = between(u[2], -max_shift, max_shift) * pixel
    ty = between(u[3], -max_shift, max_shift) * pixel
    cos, sin = torch.cos(angle) * zoom, torch.sin(angle) * zoom
    return torch.stack([torch.stack([cos, -sin, tx], 1), torch.stack([sin, cos, ty], 1)], 1)


_GREY_WEIGHTS = (0.299, 0.587, 0.114)


def _greyscale(x: torch.Tensor) -> torch.Tensor:
    w = torch.tensor(_GREY_WEIGHTS, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x * w).sum(1, keepdim=True)


def _rotate_hue(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotate hue by ``angle`` radians per image: a rotation of the chroma plane in YIQ space."""
    to_yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]],
                          device=x.device, dtype=x.dtype)
    from_yiq = torch.linalg.inv(to_yiq)
    cos, sin = torch.cos(angle), torch.sin(angle)
    n = x.shape[0]
    rot = torch.zeros(n, 3, 3, device=x.device, dtype=x.dtype)
    rot[:, 0, 0] = 1
    rot[:, 1, 1], rot[:, 1, 2], rot[:, 2, 1], rot[:, 2, 2] = cos, -sin, sin, cos
    mat = from_yiq @ rot @ to_yiq  # (n, 3, 3)
    return torch.einsum("nij,njhw->nihw", mat, x)


@dataclass(frozen=True)
class ColorJitter:
    """Colour jitter (brightness, contrast, saturation, hue) applied with probability ``p`` per image."""

    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.1
    p: float = 0.8

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        n = x.shape[0]
        apply = (torch.rand(n, generator=gen) < self.p).to(x.device).view(n, 1, 1, 1)
        b = _uniform(n, 1 - self.brightness, 1 + self.brightness, gen).to(x).view(n, 1, 1, 1)
        c = _uniform(n, 1 - self.contrast, 1 + self.contrast, gen).to(x).view(n, 1, 1, 1)
        s = _uniform(n, 1 - self.saturation, 1 + self.saturation, gen).to(x).view(n, 1, 1, 1)
        h = _uniform(n, -self.hue, self.hue, gen).to(x) * 2 * math.pi
        y = (x * b).clamp(0, 1)
        mean = _greyscale(y).mean(dim=(1, 2, 3), keepdim=True)
        y = ((y - mean) * c + mean).clamp(0, 1)
        grey = _greyscale(y)
        y = ((y - grey) * s + grey).clamp(0, 1)
        y = _rotate_hue(y, h).clamp(0, 1)
        return torch.where(apply, y, x)


@dataclass(frozen=True)
class SimCLRAugment:
    """SimCLR augmentations for RGB images (random resized crop + flip, colour jitter, greyscale)."""

    crop_scale: tuple[float, float] = (0.2, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    jitter: ColorJitter = ColorJitter()
    grey_p: float = 0.2

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        n = x.shape[0]
        theta = random_resized_crop_theta(n, self.crop_scale, self.crop_ratio, self.flip_p, generator)
        y = _affine(x, theta, "border")
        y = self.jitter(y, generator)
        to_grey = (torch.rand(n, generator=generator) < self.grey_p).to(x.device).view(n, 1, 1, 1)
        return torch.where(to_grey, _greyscale(y).expand_as(y), y)


@dataclass(frozen=True)
class GreyAugment:
    """Random resized crop and small rotation for grey images (MNIST, Fashion-MNIST)."""

    crop_scale: tuple[float, float] = (0.5, 1.0)
    max_degrees: float = 10.0
    flip_p: float = 0.0

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        n = x.shape[0]
        crop = random_resized_crop_theta(n, self.crop_scale, (3 / 4, 4 / 3), self.flip_p, generator)
        rot = shift_rotate_theta(n, x.shape[-1], 0.0, self.max_degrees, (1.0, 1.0), generator)
        # Compose: rotate the crop window (both maps are output -> input, applied crop-then-rotate).
        lin = rot[:, :, :2] @ crop[:, :, :2]
        trans = (rot[:, :, :2] @ crop[:, :, 2:]).squeeze(-1) + rot[:, :, 2]
        return _affine(x, torch.cat([lin, trans.unsqueeze(-1)], dim=2), "zeros")


@dataclass(frozen=True)
class DigitsAugment:
    """Small shifts, rotations and zooms plus pixel noise for 8x8 grey digits."""

    max_shift: float = 1.0  # pixels
    max_degrees: float = 12.0
    zoom: tuple[float, float] = (0.85, 1.15)
    noise_std: float = 0.05

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.apply(x, self.draw(x.shape, generator))

    def draw(self, shape: torch.Size | tuple[int, ...], generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """The random parameters of one call on images of ``shape``, in the order ``__call__`` draws them."""
        u = shift_rotate_draws(shape[0], generator).T  # (n, 4): rows of several draws concatenate
        if self.noise_std > 0:
            return u, torch.randn(tuple(shape), generator=generator)
        return (u,)

    def apply(self, x: torch.Tensor, drawn: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The views of ``x`` for parameters from :meth:`draw` (rows of several draws may be concatenated)."""
        theta = shift_rotate_from(drawn[0].T, x.shape[-1], self.max_shift, self.max_degrees, self.zoom)
        y = _affine(x, theta, "zeros")
        if self.noise_std > 0:
            y = y + self.noise_std * drawn[1].to(y)
        return y.clamp(0, 1)


AUGMENTATIONS = {"digits": DigitsAugment, "grey": GreyAugment, "rgb": SimCLRAugment}


def augmentation_for(info: DatasetInfo, name: str | None = None) -> Augmentation:
    """The default augmentation family for a dataset (or the named one: digits, grey, rgb)."""
    key = name or info.augmentation
    if key not in AUGMENTATIONS:
        raise one_of("augmentation", key, AUGMENTATIONS)
    return AUGMENTATIONS[key]()


def two_views(augment: Augmentation, x: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent augmented views of every image in ``x`` (the positive pairs of SimCLR / Barlow)."""
    return augment(x, generator), augment(x, generator)


def views_many(augment: Augmentation, xs: Sequence[torch.Tensor], generators: Sequence[torch.Generator],
               n_views: int = 2) -> tuple[torch.Tensor, ...]:
    """``n_views`` augmented views of each batch ``xs[k]`` with ``generators[k]``, stacked (K, B, ...) per view.

    Each batch gets exactly the views ``n_views`` calls ``augment(xs[k], generators[k])`` give. Where the
    augmentation separates drawing from applying (``draw`` / ``apply``), the parameters are drawn per
    batch in that order and applied to all K batches at once (one resampling for the ensemble).
    """
    if hasattr(augment, "draw") and hasattr(augment, "apply") and len({tuple(x.shape) for x in xs}) == 1:
        drawn = [[augment.draw(x.shape, g) for _ in range(n_views)] for x, g in zip(xs, generators)]
        x_all = torch.cat(list(xs) * n_views)  # view-major: view v of batch k at block v * K + k
        params = [torch.cat([drawn[k][v][i] for v in range(n_views) for k in range(len(xs))])
                  for i in range(len(drawn[0][0]))]
        out = augment.apply(x_all, tuple(params)).view(n_views, len(xs), *xs[0].shape)
        return tuple(out[v] for v in range(n_views))
    views = [[augment(x, g) for _ in range(n_views)] for x, g in zip(xs, generators)]
    return tuple(torch.stack([v[i] for v in views]) for i in range(n_views))
