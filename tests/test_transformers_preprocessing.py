"""vitroll's Preprocessing read from transformers' image processors equals their output, and its geometry maps a
marker in the original image to the patch the processor put it in."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

transformers = pytest.importorskip("transformers")

from vitroll.adapters.transformers_preprocessing import (  # noqa: E402
    processor_preprocessing, transformers_preprocessing, use_image_processor)

FAMILIES = ["ViT", "DeiT", "Bit", "CLIP", "Siglip", "Beit"]
SHAPES = [(300, 200), (200, 300), (257, 311), (17, 23), (224, 224)]  # (H, W): portrait, landscape, odd, tiny, square
# transformers' processors rescale and normalise in float32, in another order: a few ulps
PIL_TOLERANCE = 1e-5
# the torchvision backend resizes with torchvision's antialiased kernels, not PIL's: within 3 grey levels of 255
FAST_TOLERANCE_GREY_LEVELS = 3


def photo(height: int, width: int) -> Image.Image:
    rng = np.random.default_rng(height * 1000 + width)
    smooth = rng.random((height // 4 + 2, width // 4 + 2, 3)) * 255
    big = np.asarray(Image.fromarray(smooth.astype(np.uint8)).resize((width, height), Image.Resampling.BILINEAR))
    return Image.fromarray(big)


def processor(family: str, backend: str) -> object:
    suffix = "Pil" if backend == "pil" else ""
    return getattr(transformers, f"{family}ImageProcessor{suffix}")()


@pytest.mark.parametrize("backend", ["pil", "torchvision"])
@pytest.mark.parametrize("family", FAMILIES)
def test_pixels_equal_the_processor_output(family, backend):
    reference = processor(family, backend)
    preprocessing = processor_preprocessing(reference)
    std = torch.tensor(preprocessing.std).view(3, 1, 1)
    for height, width in SHAPES:
        image = photo(height, width)
        expected = reference(images=image, return_tensors="pt")["pixel_values"][0]
        mine, geometry = preprocessing(image)
        assert mine.shape == expected.shape
        if backend == "pil":
            assert (mine - expected).abs().max().item() < PIL_TOLERANCE
        else:
            grey_levels = ((mine - expected).abs() * std * 255).max().item()
            assert grey_levels <= FAST_TOLERANCE_GREY_LEVELS, (family, height, width, grey_levels)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_marker_lands_in_the_patch_the_geometry_names(family):
    reference = processor(family, "pil")
    preprocessing = processor_preprocessing(reference)
    patch = 16
    for height, width in [(300, 200), (211, 347)]:
        geometry = preprocessing.geometry((height, width))
        grid = (geometry.input_hw[0] // patch, geometry.input_hw[1] // patch)
        affine = geometry.grid_to_original_affine(grid)
        for row, col in [(grid[0] // 2, grid[1] // 2), (1, grid[1] - 2), (grid[0] - 1, 0)]:
            # the original pixel whose centre the affine sends to this cell's centre
            x = int(round((col - affine[0, 2]) / affine[0, 0]))
            y = int(round((row - affine[1, 2]) / affine[1, 1]))
            canvas = np.zeros((height, width, 3), np.uint8)
            canvas[max(y - 2, 0):y + 3, max(x - 2, 0):x + 3] = 255
            pixels = reference(images=Image.fromarray(canvas), return_tensors="pt")["pixel_values"][0].mean(0)
            cells = pixels.reshape(grid[0], patch, grid[1], patch).sum((1, 3))
            assert divmod(int(cells.argmax()), grid[1]) == (row, col), (family, height, width)


def test_use_image_processor_overrides_the_model_type_defaults():
    config = transformers.Dinov2Config(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=32)
    model = transformers.Dinov2Model(config)
    default = transformers_preprocessing(model)
    assert (default.input_size, default.crop_mode, default.crop_pct, default.interpolation) == (
        (32, 32), "center", 224 / 256, "bicubic")
    use_image_processor(model, transformers.BitImageProcessor(size={"shortest_edge": 40},
                                                              crop_size={"height": 32, "width": 32}, resample=2))
    chosen = transformers_preprocessing(model)
    assert (chosen.input_size, chosen.crop_pct, chosen.interpolation, chosen.geometry((80, 60)).resized_hw) == (
        (32, 32), 32 / 40, "bilinear", (53, 40))


def test_a_resize_without_inverse_is_refused():
    with pytest.raises(ValueError, match="no vitroll geometry"):
        processor_preprocessing(transformers.ViTImageProcessor(size={"longest_edge": 224}))
