"""Integrated Gradients and GradientSHAP through captum: the axioms they promise, on the patch grid."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch

from vitroll import VitrollError
from vitroll.capture import TokenLayout
from vitroll.methods import gradient_shap, integrated_gradients
from vitroll.methods.attributions import hide_patches, pixels_to_grid

from reference import reference_gradient_shap, reference_integrated_gradients

pytest.importorskip("captum")


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", img_size=(48, 32), depth=2, num_classes=4).eval()


def test_integrated_gradients_is_complete_per_image_and_target(tiny):
    """Σ attributions = f(x)[t] − f(0)[t] (Sundararajan et al.'s completeness), each image with its own target."""
    images = torch.randn(3, 3, 48, 32)
    targets = [2, 0, 3]
    maps = integrated_gradients(tiny, images, target_class=targets, steps=128, sign="signed")
    assert maps.shape == (3, 3, 2)
    with torch.no_grad():
        gap = tiny(images)[torch.arange(3), targets] - tiny(torch.zeros_like(images))[torch.arange(3), targets]
    total = maps.sum(dim=(1, 2)) * (16 * 16)  # each grid cell is the mean over its 16×16 pixels
    torch.testing.assert_close(total, gap, rtol=0.03, atol=0.03)


def test_gradient_shap_is_reproducible_and_class_specific(tiny):
    images = torch.randn(2, 3, 48, 32)
    a = gradient_shap(tiny, images, target_class=1, seed=3)
    torch.testing.assert_close(a, gradient_shap(tiny, images, target_class=1, seed=3))
    assert not torch.allclose(a, gradient_shap(tiny, images, target_class=2, seed=3))
    assert (a >= 0).all() and a.shape == (2, 3, 2)
    assert all(p.grad is None for p in tiny.parameters())


def test_gradient_shap_maps_do_not_depend_on_the_batch(tiny):
    """Each image gets the draws of ``seed`` and baselines of its own, alone or among others (annotate batches them)."""
    images = torch.randn(3, 3, 48, 32)
    batch = gradient_shap(tiny, images, target_class=[1, 0, 2], seed=3, samples=4)
    for row, target in enumerate([1, 0, 2]):
        torch.testing.assert_close(batch[row], gradient_shap(tiny, images[row:row + 1], target_class=target, seed=3,
                                                             samples=4)[0], rtol=0, atol=1e-7)
    torch.testing.assert_close(batch[2], gradient_shap(tiny, images[[2, 0]], target_class=[2, 1], seed=3,
                                                       samples=4)[0], rtol=0, atol=1e-7)


def absolute_patch_means(attributions: np.ndarray, patch: int = 16) -> np.ndarray:
    """Pixel attributions (C, H, W) → |a| summed over channels, averaged over each patch × patch block (h, w)."""
    summed = np.abs(attributions).sum(axis=0)
    height, width = summed.shape
    return summed.reshape(height // patch, patch, width // patch, patch).mean(axis=(1, 3))


def box_blurred(image: np.ndarray, radius: int = 4) -> np.ndarray:
    """Each pixel of (C, H, W) replaced by the mean of the (2·radius + 1)² window around it, clipped at the borders."""
    out = np.empty_like(image)
    for y in range(image.shape[1]):
        for x in range(image.shape[2]):
            out[:, y, x] = image[:, max(0, y - radius):y + radius + 1,
                                 max(0, x - radius):x + radius + 1].mean(axis=(1, 2))
    return out


def test_integrated_gradients_matches_a_float64_gauss_legendre_sum_per_image(tiny):
    images = torch.randn(2, 3, 48, 32, generator=torch.Generator().manual_seed(4))
    maps = integrated_gradients(tiny, images, target_class=[2, 1], steps=8)
    for row, target in enumerate([2, 1]):
        expected = absolute_patch_means(reference_integrated_gradients(tiny, images[row:row + 1], target, steps=8))
        assert expected.max() > 1e-3
        np.testing.assert_allclose(maps[row].numpy(), expected, rtol=1e-4, atol=1e-7)


def test_gradient_shap_matches_a_float64_estimate_from_the_same_draws(tiny):
    """Baselines black, the image's mean grey and its 9 × 9 box blur; noise 0.1 in pixel units; one image at a time."""
    images = torch.randn(2, 3, 48, 32, generator=torch.Generator().manual_seed(5))
    maps = gradient_shap(tiny, images, target_class=[2, 1], samples=6, noise=0.1, seed=3)
    for row, target in enumerate([2, 1]):
        image = images[row].numpy()
        grey = np.broadcast_to(image.mean(axis=(1, 2), keepdims=True), image.shape)
        baselines = torch.from_numpy(np.stack([np.zeros_like(image), grey, box_blurred(image)]))
        expected = absolute_patch_means(
            reference_gradient_shap(tiny, images[row:row + 1], baselines, target, samples=6, stdev=0.1, seed=3))
        assert expected.max() > 1e-3
        np.testing.assert_allclose(maps[row].numpy(), expected, rtol=1e-4, atol=1e-7)


def test_pixels_to_grid_by_hand():
    pixels = torch.zeros(1, 3, 4, 4)
    pixels[0, 0, 0, 0] = -8.0
    pixels[0, 1, 3, 3] = 4.0
    layout = TokenLayout(1, "class_token", (2, 2))
    assert pixels_to_grid(pixels, layout, "absolute").tolist() == [[[2.0, 0.0], [0.0, 1.0]]]
    assert pixels_to_grid(pixels, layout, "positive").tolist() == [[[0.0, 0.0], [0.0, 1.0]]]
    assert pixels_to_grid(pixels, layout, "signed").tolist() == [[[-2.0, 0.0], [0.0, 1.0]]]


def test_pixels_to_grid_averages_a_padded_patch_over_its_image_pixels():
    """A 3 × 3 image in patches of 2, padded to 4 × 4: the last row and column of patches hold 2 pixels of the image
    (the corner 1), which their means are over; the padding adds nothing."""
    pixels = torch.arange(1.0, 10.0).reshape(1, 1, 3, 3)
    layout = TokenLayout(1, "class_token", (2, 2), padded_hw=(4, 4))
    assert pixels_to_grid(pixels, layout, "signed").tolist() == [[[3.0, 4.5], [7.5, 9.0]]]


def test_hide_patches_hides_the_pixels_of_a_padded_patch():
    """36 pixels in patches of 8, padded to 40 (timm's dynamic_img_pad): patch 1 is rows 8–15, patch 4 the last
    4 rows; stretched evenly over 36 pixels, patch 1 would be rows 8–14."""
    image = torch.ones(1, 1, 36, 36)
    masks = torch.zeros(2, 5, 5, dtype=torch.bool)
    masks[0, 1, 1] = masks[1, 4, 4] = True
    hidden = hide_patches(image, masks, torch.zeros(()), TokenLayout(1, "class_token", (5, 5), padded_hw=(40, 40)))
    assert (hidden[0, 0] == 0).nonzero().unique(dim=0).tolist() == [[row, col] for row in range(8, 16)
                                                                     for col in range(8, 16)]
    assert (hidden[1, 0] == 0).nonzero().tolist() == [[row, col] for row in range(32, 36) for col in range(32, 36)]


def test_missing_captum_names_the_extra(tiny, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_captum(name, *args, **kwargs):
        if name.startswith("captum"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_captum)
    with pytest.raises(VitrollError, match=r'pip install "vitroll\[attr\]"'):
        integrated_gradients(tiny, torch.randn(1, 3, 48, 32))
