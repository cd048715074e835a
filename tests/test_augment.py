"""Batch augmentations: shapes, ranges, determinism given the generator, and sanity of each family."""

import pytest
import torch

from privaudit.core.datasets import DATASETS
from privaudit.defenses.training.augment import (ColorJitter, DigitsAugment, GreyAugment, SimCLRAugment,
                                                 augmentation_for, random_resized_crop_theta, two_views, _affine)


@pytest.mark.parametrize("aug,shape", [(DigitsAugment(), (6, 1, 8, 8)), (GreyAugment(), (6, 1, 28, 28)),
                                       (SimCLRAugment(), (6, 3, 32, 32))])
def test_shape_range_and_determinism(aug, shape):
    x = torch.rand(shape)
    a = aug(x, torch.Generator().manual_seed(5))
    b = aug(x, torch.Generator().manual_seed(5))
    c = aug(x, torch.Generator().manual_seed(6))
    assert a.shape == x.shape
    assert float(a.min()) >= 0 and float(a.max()) <= 1
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_two_views_differ():
    x = torch.rand(4, 3, 32, 32)
    v1, v2 = two_views(SimCLRAugment(), x, torch.Generator().manual_seed(0))
    assert not torch.allclose(v1, v2)


def test_full_crop_without_flip_is_identity():
    x = torch.rand(3, 3, 16, 16)
    theta = random_resized_crop_theta(3, (1.0, 1.0), (1.0, 1.0), 0.0, torch.Generator().manual_seed(0))
    assert torch.allclose(_affine(x, theta, "border"), x, atol=1e-5)


def test_flip_mirrors_the_image():
    x = torch.rand(2, 1, 8, 8)
    theta = random_resized_crop_theta(2, (1.0, 1.0), (1.0, 1.0), 1.0, torch.Generator().manual_seed(0))
    assert torch.allclose(_affine(x, theta, "border"), x.flip(-1), atol=1e-5)


def test_colour_jitter_with_zero_strength_is_identity():
    x = torch.rand(4, 3, 8, 8)
    jitter = ColorJitter(0.0, 0.0, 0.0, 0.0, p=1.0)
    assert torch.allclose(jitter(x, torch.Generator().manual_seed(0)), x, atol=1e-5)


def test_augmentation_per_dataset():
    assert isinstance(augmentation_for(DATASETS["digits"].info), DigitsAugment)
    assert isinstance(augmentation_for(DATASETS["cifar10"].info), SimCLRAugment)
    assert isinstance(augmentation_for(DATASETS["mnist"].info), GreyAugment)


def test_views_many_equals_separate_calls(digits):
    """The ensemble's batched views are exactly those of K separate two-view calls with each model's generator."""
    from privaudit.defenses.training.augment import DigitsAugment, views_many
    from privaudit.defenses.training.seeding import torch_generator

    augment = DigitsAugment()
    xs = [digits.train.x[k * 8:(k + 1) * 8] for k in range(3)]
    v1, v2 = views_many(augment, xs, [torch_generator(k, "augment") for k in range(3)])
    assert v1.shape == v2.shape == (3, 8, *xs[0].shape[1:])
    for k, x in enumerate(xs):
        g = torch_generator(k, "augment")
        assert torch.equal(v1[k], augment(x, g)) and torch.equal(v2[k], augment(x, g))
