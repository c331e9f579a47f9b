"""Integrated Gradients, GradientSHAP and occlusion against float64 per-example references on the families beyond a
plain timm ViT: DeiT with its distillation token, a ViT with register tokens, an average-pooled ViT without a class
token, a transformers ViTForImageClassification and CLIP's image–text score. The references (tests/reference.py)
share no code with vitroll: a float64 copy of the model, one image (or image–text pair) at a time, windows hidden in
a loop.

Tolerance: vitroll computes in float32, the references in float64. On these two-layer models a map of score drops or
of gradient × distance then differs from the reference by at most 6e-6 of the map's largest magnitude (measured over
every case here: about a hundred of float32's relative steps of 6e-8, accumulated through the layers). The checks allow
1e-4 of the peak: room for other CPUs' kernels, and far below what explaining another class changes (0.8–1.5 of the
peak, measured on the four classifiers' occlusion maps)."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch

transformers = pytest.importorskip("transformers")  # its ViT and CLIP cases, and test_image_text's text inputs

import vitroll  # noqa: E402
from image_text_models import hf_model  # noqa: E402
from reference import (Scores, plain_scores, reference_gradient_shap, reference_image_occlusion,  # noqa: E402
                       reference_integrated_gradients, sharpen_attention)
from test_attributions import box_blurred  # noqa: E402
from test_image_text import ATTENTION_MASK, INPUT_IDS  # noqa: E402

pytest.importorskip("captum")

PEAK_TOLERANCE = 1e-4
"""Allowed error relative to the map's largest magnitude (see the module's docstring)."""

TIMM_LAYOUTS = {
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {}),
    "registers": ("vit_tiny_patch16_224", {"reg_tokens": 2}),
    "average_pool": ("vit_tiny_patch16_224", {"class_token": False, "global_pool": "avg"}),
    "padded": ("vit_tiny_patch16_224", {"dynamic_img_size": True, "dynamic_img_pad": True}),
}
CLASSIFIERS = [*TIMM_LAYOUTS, "hf_vit"]
PATCH = {"deit_distilled": 16, "registers": 16, "average_pool": 16, "padded": 16, "hf_vit": 8, "clip": 8}
IMAGE_SIZE = {"hf_vit": (32, 32), "padded": (40, 36)}
"""Image (H, W) of each classifier that does not take 48 × 32: the padded ViT's is no whole number of its patches
(3 × 3 patches, the last row 8 pixels of the image and 8 of padding, the last column 4 and 12)."""


def classifier(kind: str) -> torch.nn.Module:
    """A small random classifier of 5 classes on 48 × 32 images (timm, patch 16) or 32 × 32 (transformers, patch 8);
    the padded ViT pads any input up to whole patches (timm's ``dynamic_img_pad``, right and bottom)."""
    torch.manual_seed(3)
    if kind == "hf_vit":
        config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, intermediate_size=64, num_labels=5)
        return transformers.ViTForImageClassification(config).eval()
    architecture, kwargs = TIMM_LAYOUTS[kind]
    return sharpen_attention(timm.create_model(architecture, img_size=(48, 32), depth=2, embed_dim=48, num_heads=3,
                                               num_classes=5, **kwargs))


def classifier_images(kind: str, batch: int) -> torch.Tensor:
    size = IMAGE_SIZE.get(kind, (48, 32))
    return torch.randn(batch, 3, *size, generator=torch.Generator().manual_seed(7))


def hf_scores(model: torch.nn.Module, image: torch.Tensor) -> torch.Tensor:
    return model(pixel_values=image).logits


def scores_of(kind: str) -> Scores:
    """The reference's score function of a classifier: transformers' logits, or the forward's output (timm)."""
    return hf_scores if kind == "hf_vit" else plain_scores


def clip_scores(model: torch.nn.Module, image: torch.Tensor) -> torch.Tensor:
    """CLIP's ``logits_per_image`` (1, T) of one image against the test texts: the texts are the classes."""
    return model(pixel_values=image, input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).logits_per_image


def signed_patch_means(attributions: np.ndarray, patch: int) -> np.ndarray:
    """Pixel attributions (C, H, W) → summed over channels, averaged over each patch × patch block (h, w); a last
    partial block (the image padded right and bottom up to whole patches) over its pixels of the image."""
    summed = attributions.sum(axis=0)
    height, width = summed.shape
    grid = (-(-height // patch), -(-width // patch))
    padded = np.full((grid[0] * patch, grid[1] * patch), np.nan)
    padded[:height, :width] = summed
    return np.nanmean(padded.reshape(grid[0], patch, grid[1], patch), axis=(1, 3))


def shap_baselines(image: torch.Tensor) -> torch.Tensor:
    """GradientSHAP's documented baselines of ONE image (C, H, W): black, its mean grey, its 9 × 9 box blur."""
    pixels = image.numpy()
    grey = np.broadcast_to(pixels.mean(axis=(1, 2), keepdims=True), pixels.shape)
    return torch.from_numpy(np.stack([np.zeros_like(pixels), grey, box_blurred(pixels)]))


def assert_close_to_peak(actual: torch.Tensor, expected: np.ndarray) -> None:
    assert np.ptp(expected) > 1e-6, "the reference map must not be flat"
    np.testing.assert_allclose(actual.numpy(), expected, rtol=0, atol=PEAK_TOLERANCE * np.abs(expected).max())


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_integrated_gradients_equals_the_float64_reference_per_image(kind):
    model, images, targets = classifier(kind), classifier_images(kind, 2), [4, 1]
    maps = vitroll.integrated_gradients(model, images, target_class=targets, steps=6, sign="signed")
    for row, target in enumerate(targets):
        expected = reference_integrated_gradients(model, images[row:row + 1], target, steps=6, scores=scores_of(kind))
        assert_close_to_peak(maps[row], signed_patch_means(expected, PATCH[kind]))


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_gradient_shap_equals_the_float64_reference_per_image(kind):
    model, images, targets = classifier(kind), classifier_images(kind, 2), [4, 1]
    maps = vitroll.gradient_shap(model, images, target_class=targets, samples=4, noise=0.2, seed=11, sign="signed")
    for row, target in enumerate(targets):
        expected = reference_gradient_shap(model, images[row:row + 1], shap_baselines(images[row]), target,
                                           samples=4, stdev=0.2, seed=11, scores=scores_of(kind))
        assert_close_to_peak(maps[row], signed_patch_means(expected, PATCH[kind]))


@pytest.mark.parametrize("window", [1, 2])
@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_occlusion_equals_the_float64_reference_per_image(kind, window):
    model, images, targets = classifier(kind), classifier_images(kind, 2), [4, 1]
    maps = vitroll.occlusion(model, images, target_class=targets, window=window, sign="signed", batch_size=3)
    for row, target in enumerate(targets):
        assert_close_to_peak(maps[row], reference_image_occlusion(model, images[row], target, window, PATCH[kind],
                                                                  scores_of(kind)))


def clip_images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))


def test_integrated_gradients_equals_the_float64_reference_per_image_text_pair():
    model, pixels = hf_model("clip"), clip_images()
    maps = vitroll.image_text_maps(model, pixels, INPUT_IDS, attention_mask=ATTENTION_MASK,
                                   method="integrated_gradients", steps=6, sign="signed")
    for i in range(2):
        for t in range(3):
            expected = reference_integrated_gradients(model, pixels[i:i + 1], t, steps=6, scores=clip_scores)
            assert_close_to_peak(maps[i, t], signed_patch_means(expected, PATCH["clip"]))


def test_gradient_shap_equals_the_float64_reference_per_image_text_pair():
    model, pixels = hf_model("clip"), clip_images()
    maps = vitroll.image_text_maps(model, pixels, INPUT_IDS, attention_mask=ATTENTION_MASK, method="gradient_shap",
                                   samples=3, noise=0.2, seed=5, sign="signed")
    assert maps.shape == (2, 3, 4, 4)
    for i in range(2):
        for t in range(3):
            expected = reference_gradient_shap(model, pixels[i:i + 1], shap_baselines(pixels[i]), t, samples=3,
                                               stdev=0.2, seed=5, scores=clip_scores)
            assert_close_to_peak(maps[i, t], signed_patch_means(expected, PATCH["clip"]))


def test_occlusion_equals_the_float64_reference_per_image_text_pair():
    model, pixels = hf_model("clip"), clip_images()
    maps = vitroll.image_text_maps(model, pixels, INPUT_IDS, attention_mask=ATTENTION_MASK, method="occlusion",
                                   window=2, sign="signed")
    for i in range(2):
        for t in range(3):
            assert_close_to_peak(maps[i, t], reference_image_occlusion(model, pixels[i], t, 2, PATCH["clip"],
                                                                       clip_scores))
