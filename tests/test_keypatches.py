"""Key patches: the best cells of a map, located in the original image's pixels."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vitroll.maps import key_patches
from vitroll.overlay import outline_boxes
from vitroll.preprocess import Preprocessing


def coordinate_image(height: int, width: int) -> Image.Image:
    """Red encodes the column and green the row of every pixel, so a crop tells where it came from."""
    rows, cols = np.mgrid[0:height, 0:width]
    rgb = np.stack([cols * 255 / (width - 1), rows * 255 / (height - 1), np.zeros_like(rows)], axis=-1)
    return Image.fromarray(np.round(rgb).astype(np.uint8))


@pytest.mark.parametrize("size_hw", [(200, 300), (330, 140)])
def test_boxes_land_on_the_pixels_the_model_saw_in_that_patch(size_hw):
    height, width = size_hw
    preprocessing = Preprocessing(input_size=(64, 48), mean=(0, 0, 0), std=(1, 1, 1), crop_pct=0.875,
                                  interpolation="bilinear")
    tensor, geometry = preprocessing(coordinate_image(height, width))
    grid = np.zeros((4, 3))
    grid[1, 2], grid[3, 0], grid[0, 1] = 3.0, 2.0, 1.0
    patches = key_patches(grid, geometry, k=3)
    assert [(p.row, p.col, p.score) for p in patches] == [(1, 2, 3.0), (3, 0, 2.0), (0, 1, 1.0)]
    for patch in patches:
        cell = tensor[:, patch.row * 16:(patch.row + 1) * 16, patch.col * 16:(patch.col + 1) * 16][:, 2:-2, 2:-2]
        seen_cols = cell[0].numpy() * (width - 1)
        seen_rows = cell[1].numpy() * (height - 1)
        left, top, right, bottom = patch.box
        tolerance = 2 + max(width, height) / 255  # 8-bit coordinate code + resampling blur
        assert left - tolerance <= seen_cols.min() and seen_cols.max() <= right + tolerance
        assert top - tolerance <= seen_rows.min() and seen_rows.max() <= bottom + tolerance
        # and the box is not larger than the patch: its size is one patch scaled back
        assert right - left == pytest.approx(16 / geometry.scale[1], abs=1.01)
        assert bottom - top == pytest.approx(16 / geometry.scale[0], abs=1.01)


def test_nan_cells_are_never_key_patches_and_ties_are_row_major():
    from vitroll.preprocess import CropGeometry

    geometry = CropGeometry(original_hw=(4, 4), resized_hw=(4, 4), crop_top_left=(0, 0), input_hw=(4, 4))
    grid = np.array([[np.nan, 1.0], [1.0, 0.0]])
    assert [(p.row, p.col) for p in key_patches(grid, geometry, k=3)] == [(0, 1), (1, 0), (1, 1)]
    assert key_patches(grid, geometry, k=1)[0].box == (2, 0, 4, 2)


def test_k_is_a_count():
    from vitroll.preprocess import CropGeometry

    geometry = CropGeometry(original_hw=(4, 4), resized_hw=(4, 4), crop_top_left=(0, 0), input_hw=(4, 4))
    grid = np.array([[0.0, 1.0], [2.0, 3.0]])
    assert key_patches(grid, geometry, k=0) == [] and len(key_patches(grid, geometry, k=np.int64(9))) == 4
    with pytest.raises(ValueError, match=r"^k must be >= 0 \(how many patches\); got -1$"):
        key_patches(grid, geometry, k=-1)
    with pytest.raises(TypeError, match=r"^k must be an int \(how many patches\); got float 2.5$"):
        key_patches(grid, geometry, k=2.5)


def test_outline_boxes_draws_only_the_border():
    image = np.zeros((10, 10, 3), np.uint8)
    drawn = outline_boxes(image, [(2, 3, 8, 7)], color=(255, 255, 255), thickness=1)
    assert drawn[3, 2:8].min() == 255 and drawn[6, 2:8].min() == 255  # top and bottom edges (bottom = 7 − 1)
    assert drawn[3:7, 2].min() == 255 and drawn[3:7, 7].min() == 255
    assert drawn[4:6, 3:7].max() == 0 and image.max() == 0  # inside untouched, input not modified


@pytest.mark.parametrize("crop_mode,crop_pct", [("border", 1.0), ("center", 1.15)])
def test_a_cell_in_the_padding_around_the_image_is_no_key_patch(crop_mode, crop_pct):
    """A letterboxed strip's best cell lay in the padding above it: its box came out as (129, 0, 171, -235)."""
    geometry = Preprocessing(input_size=(224, 224), mean=(0.5,), std=(0.5,), crop_pct=crop_pct,
                             crop_mode=crop_mode).geometry((40, 600))
    grid = np.zeros((14, 14), np.float32)
    grid[0, 3], grid[6, 3] = 5.0, 1.0  # row 0 is padding, row 6 over the strip
    assert [(patch.row, patch.col) for patch in key_patches(grid, geometry, k=1)] == [(6, 3)]
    assert all(0 <= left < right <= 600 and 0 <= top < bottom <= 40 for left, top, right, bottom in
               (patch.box for patch in key_patches(grid, geometry, k=196)))
