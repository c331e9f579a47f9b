"""Maps land on the right pixels of the original image; overlays have the expected colours."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import PIL.Image
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vitroll import overlay
from vitroll.maps import grid_box_in_original, key_patches, normalize, peak_location, summary, to_original, upsample
from vitroll.overlay import GRID_PANEL, colorize, drawable, figure, fit_text, lookup_table, overlay_grid
from vitroll.overlay import use_fallback_fonts
from vitroll.overlay import _installed_fallback_fonts
from vitroll.pipelines.explain import figure_bytes
from vitroll.preprocess import Preprocessing

PREPROCESSING = Preprocessing(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.875)


@pytest.mark.parametrize("original_hw", [(300, 451), (640, 427), (224, 224)])
@pytest.mark.parametrize("cell", [(0, 0), (3, 10), (13, 13), (7, 2)])
def test_one_hot_patch_lights_up_its_region_of_the_original(original_hw, cell):
    geometry = PREPROCESSING.geometry(original_hw)
    grid = np.zeros((14, 14), np.float32)
    grid[cell] = 1.0
    top, left, bottom, right = grid_box_in_original(geometry, (14, 14), cell)
    nearest = to_original(grid, geometry, interpolation="nearest")
    lit = np.argwhere(nearest == 1.0)
    assert lit.size, "the patch must be visible in the original image"
    # every lit pixel centre lies inside the patch's box (half-pixel slack for the nearest-neighbour boundary)
    assert lit[:, 0].min() + 0.5 >= top - 0.5 and lit[:, 0].max() + 0.5 <= bottom + 0.5
    assert lit[:, 1].min() + 0.5 >= left - 0.5 and lit[:, 1].max() + 0.5 <= right + 0.5
    # and the lit area is the box's area, within one pixel around its border
    area = (bottom - top) * (right - left)
    perimeter = 2 * ((bottom - top) + (right - left))
    assert abs(len(lit) - area) <= perimeter + 4
    row, col = peak_location(to_original(grid, geometry))
    assert top - 1 <= row <= bottom + 1 and left - 1 <= col <= right + 1


PADDED = Preprocessing(input_size=(36, 36), mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=1.0, crop_mode="squash",
                       patch_padding=(8, 8))
"""A model that pads its 36 × 36 input to 40 × 40 (timm's dynamic_img_pad, patch 8): a 5 × 5 grid, whose last row
and column of patches hold 4 pixels of the input each."""


@pytest.mark.parametrize(("cell", "rows", "cols"), [((1, 1), (16, 32), (24, 48)), ((4, 4), (64, 72), (96, 108)),
                                                    ((4, 0), (64, 72), (0, 24))])
def test_a_padded_grids_hot_cell_lands_on_exactly_the_pixels_of_its_patch(cell, rows, cols):
    """A 72 × 108 image squashed to 36 × 36 (2 and 3 original pixels per input pixel): patch (1, 1) is input pixels
    8–15, so original rows 16–31 and columns 24–47; a last patch is input pixels 32–35, so the last 8 rows (12
    columns). Stretched evenly over the input, patch 1 would start at input pixel 7.2."""
    geometry = PADDED.geometry((72, 108))
    assert geometry.padded_hw == (40, 40)
    grid = np.zeros((5, 5), np.float32)
    grid[cell] = 1.0
    expected = np.zeros((72, 108), bool)
    expected[rows[0]:rows[1], cols[0]:cols[1]] = True
    np.testing.assert_array_equal(to_original(grid, geometry, interpolation="nearest") == 1.0, expected)
    assert grid_box_in_original(geometry, (5, 5), cell) == (rows[0], cols[0], rows[1], cols[1])
    assert key_patches(grid, geometry, 1)[0].box == (cols[0], rows[0], cols[1], rows[1])


def test_vitroll_overlay_puts_a_padded_models_last_patch_on_the_last_pixels_of_the_image():
    """What `vitroll overlay` draws (render) for a timm ViT with dynamic_img_pad at an input of no whole number of
    patches: its preprocessing knows the padding, so the hot last patch colours the image's last 4 input pixels (8
    original rows, 4 columns) and nothing else."""
    import timm

    from vitroll.pipelines.explain import ExplainSettings, render

    model = timm.create_model("vit_tiny_patch16_224", img_size=36, patch_size=8, depth=1, embed_dim=32, num_heads=2,
                              num_classes=3, dynamic_img_size=True, dynamic_img_pad=True)
    preprocessing = Preprocessing.from_model(model, crop_pct=1.0, crop_mode="squash")
    image = np.full((72, 36, 3), 128, np.uint8)
    _tensor, geometry = preprocessing(PIL.Image.fromarray(image))
    grid = np.zeros((5, 5), np.float32)
    grid[4, 2] = 1.0
    saliency, overlaid = render(image, grid, geometry, ExplainSettings(method="occlusion", interpolation="nearest"))
    expected = np.zeros((72, 36), bool)
    expected[64:, 16:24] = True
    np.testing.assert_array_equal(saliency == 1.0, expected)
    assert (overlaid[expected] == overlaid[64, 16]).all() and not (overlaid[~expected] == overlaid[64, 16]).all(1).any()


@pytest.mark.parametrize(("cell", "pixels"), [(1, (8, 16)), (4, (32, 36)), (0, (0, 8))])
def test_overlay_with_padded_hw_puts_a_padded_grids_cell_on_exactly_its_pixels(cell, pixels):
    """A 5 × 5 grid of a model that pads its 36 × 36 input to 40 × 40 (patch 8): patch 1 is pixels 8–15, the last
    patch pixels 32–35. Without ``padded_hw`` the grid is stretched over the 36 pixels (patch 1: 8–14)."""
    image = np.zeros((36, 36, 3), np.uint8)
    grid = np.zeros((5, 5), np.float32)
    grid[cell, cell] = 1.0
    expected = np.zeros((36, 36), bool)
    expected[pixels[0]:pixels[1], pixels[0]:pixels[1]] = True
    overlaid = overlay(image, grid, interpolation="nearest", padded_hw=(40, 40))
    np.testing.assert_array_equal((overlaid == overlaid[pixels[0], pixels[0]]).all(axis=2), expected)
    np.testing.assert_array_equal(upsample(grid, (36, 36), interpolation="nearest", padded_hw=(40, 40)) == 1.0,
                                  expected)
    stretched = upsample(grid, (36, 36), interpolation="nearest") == 1.0
    assert cell != 1 or np.flatnonzero(stretched.any(axis=1)).tolist() == list(range(8, 15))


def test_padded_hw_none_or_the_images_own_size_leaves_upsample_and_overlay_as_they_were():
    grid = np.random.default_rng(0).random((5, 7)).astype(np.float32)
    image = np.full((36, 50, 3), 90, np.uint8)
    plain = upsample(grid, (36, 50), interpolation="bicubic")
    for padded_hw in (None, (36, 50)):
        np.testing.assert_array_equal(upsample(grid, (36, 50), interpolation="bicubic", padded_hw=padded_hw), plain)
        np.testing.assert_array_equal(overlay(image, grid, padded_hw=padded_hw), overlay(image, grid))
    # an image-sized map is used as it is
    np.testing.assert_array_equal(overlay(image, plain, padded_hw=(40, 56)), overlay(image, plain))


@settings(max_examples=60, deadline=None)
@given(grid_hw=st.tuples(st.integers(1, 6), st.integers(1, 6)),
       patch_hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       short=st.tuples(st.integers(0, 8), st.integers(0, 8)), cell=st.tuples(st.integers(0, 5), st.integers(0, 5)),
       interpolation=st.sampled_from(["nearest", "bilinear", "bicubic"]))
def test_upsample_with_padded_hw_is_to_original_for_an_image_of_the_models_input_size(grid_hw, patch_hw, short, cell,
                                                                                    interpolation):
    """Any grid of whole patches over an input up to a patch short of them on each side: a one-hot cell lights
    exactly its patch's pixels that lie in the image (nearest), and every interpolation equals what the commands
    draw through the preprocessing geometry (:func:`to_original`)."""
    padded = (grid_hw[0] * patch_hw[0], grid_hw[1] * patch_hw[1])
    size = tuple(max(1, side - min(cut, patch - 1)) for side, cut, patch in zip(padded, short, patch_hw))
    cell = (cell[0] % grid_hw[0], cell[1] % grid_hw[1])
    grid = np.zeros(grid_hw, np.float32)
    grid[cell] = 1.0
    geometry = Preprocessing(input_size=size, mean=(0.5,), std=(0.5,), crop_pct=1.0, crop_mode="squash",
                             patch_padding=patch_hw).geometry(size)
    assert geometry.padded_hw in (padded, None)
    upsampled = upsample(grid, size, interpolation=interpolation, padded_hw=padded)
    assert upsampled.shape == size and upsampled.flags.c_contiguous
    np.testing.assert_allclose(upsampled, to_original(grid, geometry, interpolation=interpolation), atol=1e-5)
    if interpolation == "nearest":
        expected = np.zeros(size, bool)
        (row, col), (patch_h, patch_w) = cell, patch_hw
        expected[row * patch_h:(row + 1) * patch_h, col * patch_w:(col + 1) * patch_w] = True
        np.testing.assert_array_equal(upsampled == 1.0, expected)


@pytest.mark.parametrize(("padded_hw", "error", "message"), [
    ((32, 40), ValueError, "padded_hw (H', W') must be at least the image's (H, W) = (36, 36): the input padded up "
                           "to whole patches, which the grid covers; got (32, 40) (an image of another size than the "
                           "model's input takes its map from to_original(grid_map, geometry))"),
    ((40, 0), ValueError, "padded_hw must be (H, W), two integers ≥ 1; got (40, 0)"),
    (40, TypeError, "padded_hw must be (H, W), two integers ≥ 1; got int 40"),
])
def test_a_padded_hw_that_cannot_be_the_padded_input_is_refused_by_name(padded_hw, error, message):
    grid = np.ones((5, 5), np.float32)
    with pytest.raises(error) as raised:
        overlay(np.zeros((36, 36, 3), np.uint8), grid, padded_hw=padded_hw)
    assert str(raised.value) == message


def test_a_geometry_pads_only_an_input_of_no_whole_number_of_patches():
    assert PADDED.with_overrides(input_size=(40, 32)).geometry((50, 50)).padded_hw is None
    assert PADDED.with_overrides(input_size=(40, 33)).geometry((50, 50)).padded_hw == (40, 40)


def test_region_outside_the_centre_crop_is_nan():
    # resized 256x512, crop left 144 → original x in [72, 184)… wide margins
    geometry = PREPROCESSING.geometry((300, 600))
    saliency = to_original(np.ones((14, 14), np.float32), geometry)
    top, left, bottom, right = geometry.original_box()
    assert np.isnan(saliency[:, : int(left) - 1]).all() and np.isnan(saliency[:, int(np.ceil(right)) + 1:]).all()
    assert np.isfinite(saliency[int(top) + 1: int(bottom) - 1, int(left) + 1: int(right) - 1]).all()


def test_squash_mode_covers_the_whole_image():
    squash = PREPROCESSING.with_overrides(crop_mode="squash", crop_pct=1.0)
    saliency = to_original(np.ones((14, 14), np.float32), squash.geometry((300, 451)))
    assert np.isfinite(saliency).all()


@pytest.mark.filterwarnings("ignore:overlay. a grid map:UserWarning")  # stretched on purpose
def test_overlay_corner_peak_is_red_there_and_blue_elsewhere():
    image = np.full((120, 160, 3), 255, np.uint8)
    heat = np.zeros((8, 8), np.float32)
    heat[0, 0] = 1.0
    out = overlay(image, heat, cmap="jet", alpha=1.0)
    assert out.shape == image.shape and out.dtype == np.uint8
    red, far = out[2, 2].astype(int), out[-3, -3].astype(int)
    assert red[0] > 100 and red[1] < 30 and red[2] < 30, red       # jet(1.0) = dark red (128, 0, 0)
    assert far[2] > 100 and far[0] < 30 and far[1] < 30, far       # jet(0.0) = dark blue (0, 0, 128)


def test_overlay_blends_with_alpha_and_keeps_nan_pixels():
    image = np.full((4, 4, 3), 200, np.uint8)
    heat = np.array([[0.0, 1.0, np.nan, 0.5]] * 4, np.float32)
    out = overlay(image, heat, cmap="gray", alpha=0.25)
    np.testing.assert_array_equal(out[:, 2], image[:, 2])                          # NaN: untouched
    np.testing.assert_array_equal(out[0, 0], [150, 150, 150])                       # 0.75·200 + 0.25·0
    np.testing.assert_array_equal(out[0, 1], [214, 214, 214])                       # 0.75·200 + 0.25·255 = 213.75
    with pytest.raises(ValueError, match="RGB uint8"):
        overlay(image.astype(np.float32), heat)
    with pytest.raises(ValueError, match="colormap"):
        overlay(image, heat, cmap="no-such-map")


def test_colorize_is_rgb_not_bgr():
    colors = colorize(np.array([[0.0, 1.0]]), cmap="jet")
    assert tuple(colors[0, 0]) == (0, 0, 128) and tuple(colors[0, 1]) == (128, 0, 0)


def test_normalize_returns_what_its_docstring_says_of_infinities():
    """Its Returns said NaN wherever the map is not finite: +inf and −inf are 1 and 0 but in a map whose finite values
    are all one."""
    np.testing.assert_array_equal(normalize(np.array([[np.inf, 1.0, np.nan, -np.inf, 3.0]])),
                                  np.array([[1.0, 0.0, np.nan, 0.0, 1.0]], np.float32))
    # they were NaN in a map whose finite values are all one ([inf, 2, 2] gave NaN, 0, 0: the largest value drawn as
    # no value) and inf where none is finite: now 1 and 0 in every map, as the values above and below all others
    np.testing.assert_array_equal(normalize(np.array([[np.inf, 2.0, 2.0, -np.inf]])), [[1.0, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(normalize(np.array([np.inf, 2.0, 2.0])), [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(normalize(np.array([[np.inf, np.nan, -np.inf]])), [[1.0, np.nan, 0.0]])


finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                          st.sampled_from([0.0, 1.0, -1.0, 2.5]))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(finite_or_not, min_size=1, max_size=40), mode=st.sampled_from(["minmax", "percentile"]))
def test_normalize_lands_in_0_1_keeps_order_and_nan_and_gives_a_constant_map_0(values, mode):
    saliency = np.array(values, dtype=np.float64)
    scaled = normalize(saliency, mode=mode)
    assert scaled.dtype == np.float32 and scaled.shape == saliency.shape
    nan = np.isnan(saliency)
    np.testing.assert_array_equal(np.isnan(scaled), nan)
    kept, given = scaled[~nan], saliency[~nan]
    assert ((kept >= 0) & (kept <= 1)).all()
    order = np.argsort(given, kind="stable")
    assert (np.diff(kept[order]) >= 0).all()  # not above a value that is not below it
    assert (kept[given == np.inf] == 1).all() and (kept[given == -np.inf] == 0).all()
    finite = given[np.isfinite(given)]
    if finite.size and (finite == finite[0]).all():
        assert (kept[np.isfinite(given)] == 0).all()
    elif finite.size and mode == "minmax":
        assert kept[np.isfinite(given)].min() == 0 and kept[np.isfinite(given)].max() == 1


def test_normalize_modes():
    values = np.array([[1.0, 2.0, 3.0, np.nan]])
    np.testing.assert_allclose(normalize(values)[0, :3], [0.0, 0.5, 1.0])
    assert np.isnan(normalize(values)[0, 3])
    spiky = np.concatenate([np.linspace(0, 1, 999), [100.0]])[None]
    assert normalize(spiky, mode="percentile")[0, 500] > 0.4 > normalize(spiky)[0, 500]
    assert (normalize(np.ones((2, 2))) == 0).all()


def test_upsample_preserves_a_constant_and_size():
    out = upsample(np.full((3, 5), 0.25), (30, 50), interpolation="bicubic")
    assert out.shape == (30, 50)
    np.testing.assert_allclose(out, 0.25, atol=1e-6)


def test_summary_statistics():
    flat = summary(np.ones((10, 10)))
    assert flat["entropy"] == pytest.approx(1.0) and flat["top_mass"] == pytest.approx(0.1)
    peaked = np.zeros((10, 10))
    peaked[2, 7] = 5.0
    stats = summary(peaked)
    assert (stats["peak_row"], stats["peak_col"]) == (2, 7)
    assert stats["entropy"] == pytest.approx(0.0) and stats["top_mass"] == pytest.approx(1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_map_functions_take_the_methods_tensors_as_they_come(dtype):
    grid = torch.arange(196, dtype=torch.float32).reshape(14, 14).to(dtype)
    geometry = PREPROCESSING.geometry((300, 451))
    held = grid.clone().requires_grad_(True)  # as a map still in a graph comes: NumPy cannot take it directly
    expected = grid.float().numpy()
    assert np.array_equal(to_original(held, geometry), to_original(expected, geometry), equal_nan=True)
    assert np.array_equal(upsample(held, (30, 40)), upsample(expected, (30, 40)))
    assert key_patches(held, geometry, k=2) == key_patches(expected, geometry, k=2)
    assert key_patches(held, geometry, k=1)[0].score == 195.0


def test_a_colormap_is_taken_by_name_or_as_a_matplotlib_object():
    import matplotlib
    from matplotlib.colors import LinearSegmentedColormap

    image = np.full((6, 8, 3), 100, np.uint8)
    heat = np.linspace(0, 1, 48, dtype=np.float32).reshape(6, 8)
    by_object = overlay(image, heat, cmap=matplotlib.colormaps["viridis"])
    assert np.array_equal(by_object, overlay(image, heat, cmap="viridis"))
    black_to_red = LinearSegmentedColormap.from_list("mine", [(0, 0, 0), (1, 0, 0)])
    colours = colorize(heat, cmap=black_to_red)
    assert colours[-1, -1].tolist() == [255, 0, 0] and colours[0, 0].tolist() == [0, 0, 0]
    with pytest.raises(TypeError, match=r"^cmap must be a matplotlib colormap name or a matplotlib.colors.Colormap; "
                                        r"got int$"):
        overlay(image, heat, cmap=3)


@pytest.mark.parametrize("image, heatmap, message", [
    (np.zeros((0, 6, 3), np.uint8), np.ones((2, 2)),
     "image must be RGB uint8 of shape (H, W, 3), H and W ≥ 1; got uint8 (0, 6, 3)"),
    (np.zeros((4, 6), np.uint8), np.ones((2, 2)),
     "image must be RGB uint8 of shape (H, W, 3), H and W ≥ 1; got uint8 (4, 6): "
     "np.stack([image] * 3, axis=-1) makes a grey image RGB"),
    (np.zeros((4, 6, 3), np.uint8), np.ones((0, 2)), "heatmap must be 2-D (h, w), h and w ≥ 1; got shape (0, 2)"),
    (np.zeros((4, 6, 3), np.uint8), np.ones((1, 2, 2)),
     "heatmap must be 2-D (h, w), h and w ≥ 1; got shape (1, 2, 2); a batch of maps? pass one of them, e.g. maps[0]"),
])
def test_overlay_refuses_empty_or_misshapen_inputs_in_its_own_words(image, heatmap, message):
    with pytest.raises(ValueError) as raised:
        overlay(image, heatmap)
    assert str(raised.value) == message


@pytest.mark.parametrize("percentiles", [(99.0, 1.0), (5.0, 5.0), (-1.0, 50.0), (50.0, 101.0)])
def test_percentiles_must_be_a_low_and_a_high_in_0_to_100(percentiles):
    with pytest.raises(ValueError, match=r"^percentiles must be \(low, high\) with 0 <= low < high <= 100; got "):
        normalize(np.arange(4.0), mode="percentile", percentiles=percentiles)


def test_percentile_normalisation_keeps_a_single_hot_patch():
    grid = np.zeros((14, 14), np.float32)
    grid[3, 4] = 5.0  # one patch in 196: below the 99th percentile's reach, so that percentile is 0 too
    normalized = normalize(grid, mode="percentile")
    assert normalized[3, 4] == 1.0 and normalized.sum() == 1.0
    image = np.full((140, 140, 3), 255, np.uint8)
    nearest = overlay(image, grid, normalization="percentile", interpolation="nearest")
    assert np.array_equal(nearest, overlay(image, grid, interpolation="nearest"))
    assert nearest[35, 45].tolist() == [192, 128, 128]  # the patch, jet's dark red over white; it was left blue


@pytest.mark.parametrize("grid", [np.ones((1, 14, 14)), torch.ones(2, 14, 14)], ids=["array", "tensor"])
def test_a_batch_of_maps_is_refused_pointing_to_one_of_them_not_warped_into_channels(grid):
    geometry = PREPROCESSING.geometry((300, 451))
    message = (f"grid_map must be 2-D (h, w), h and w ≥ 1; got shape {tuple(grid.shape)}; a batch of maps? pass one of "
               "them, e.g. maps[0]")
    for place in (lambda: to_original(grid, geometry), lambda: upsample(grid, (30, 40)),
                  lambda: key_patches(grid, geometry, 3)):
        with pytest.raises(ValueError) as raised:
            place()  # to_original and upsample returned (H, W, 14): the batch's rows as colour channels
        assert str(raised.value) == message
    with pytest.raises(ValueError, match=r"^heatmap must be 2-D \(h, w\), h and w ≥ 1; got shape \(14,\)$"):
        overlay(np.zeros((4, 6, 3), np.uint8), np.ones(14))


def _drawn(fig) -> "object":
    """The renderer of ``fig`` after drawing it once (what saving it does)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


@pytest.mark.parametrize("name", ["price_$5 and $x^2.png", "x$\\frac$y.png", "50%_off_&_{a}\\b.png"])
def test_a_figure_title_with_dollars_is_drawn_as_written_not_as_mathtext(name):
    image = np.zeros((32, 48, 3), np.uint8)
    fig = figure(image, np.zeros((32, 48), np.float32), image, title=name)
    renderer = _drawn(fig)  # x$\frac$y raised a mathtext ParseSyntaxException here
    (title,) = fig.texts
    assert title.get_text() == name
    # the drawn width is that of the literal characters ("$5 and $x^2" as mathtext is the narrower "5andx²")
    literal = renderer.get_text_width_height_descent(name, title.get_fontproperties(), ismath=False)[0]
    assert title.get_window_extent(renderer).width == pytest.approx(literal, abs=1)


@pytest.mark.parametrize("title", ["very_long_name_without_spaces_" * 20, "猫" * 300, "a photo of a cat " * 60,
                                   "שלום עולם مرحبا بالعالم " * 20], ids=["no spaces", "CJK", "words", "RTL"])
def test_a_long_figure_title_wraps_to_three_lines_inside_the_figure_and_ends_in_an_ellipsis(title):
    image = np.zeros((32, 48, 3), np.uint8)
    fig = figure(image, np.zeros((32, 48), np.float32), image, title=title)
    renderer = _drawn(fig)
    (drawn,) = fig.texts
    lines = drawn.get_text().split("\n")
    assert len(lines) == 3 and lines[-1].endswith("…")
    # the start of the title, in order (a character no font here has spelt as its escape)
    assert "".join(lines).replace(" ", "")[:-1] in drawable(title).replace(" ", "")
    box, page = drawn.get_window_extent(renderer), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1  # it ran ~5 figure widths off both sides


def test_fit_text_breaks_at_spaces_keeps_short_text_and_given_line_breaks():
    assert fit_text("a cat", 3, 10) == "a cat"
    assert fit_text("model\nprediction", 3, 10) == "model\nprediction"
    assert fit_text("a photo of a woman in a space suit next to a rocket", 1.5, 10) == (
        "a photo of a woman\nin a space suit next\nto a rocket")
    assert fit_text("x" * 1000, 0.5, 10, lines=2) == "xxxxxx\nxxxx…"


def test_fit_text_spells_the_bytes_of_a_name_that_is_not_utf8():
    """Every title passes through fit_text; compare's image titles reached matplotlib's set_text with a lone
    surrogate (TypeError) where overlay, annotate and caption spelt it out themselves."""
    assert fit_text("caf\udce9.png — cross (98.1%)", 3, 10) == "caf\\xe9.png — cross (98.1%)"


def test_grid_panel_titles_fit_their_panels_and_are_drawn_as_written():
    image = np.zeros((32, 32, 3), np.uint8)
    captions = ["$x$ " + "long_label_" * 30, "a$\\frac$b"]
    fig = overlay_grid(image, [image, image], captions, title="$5 " * 200)
    renderer = _drawn(fig)
    titles = [axes.title for axes in fig.axes[1:3]]
    assert titles[1].get_text() == "a$\\frac$b"
    first, *rest = titles[0].get_text().split("\n")  # the long word starts a line of its own, then is broken
    assert first == "$x$" and len(rest) == 2 and rest[0].startswith("long_label_") and rest[1].endswith("…")
    for axes, title in zip(fig.axes[1:3], titles):
        panel = GRID_PANEL * fig.dpi
        assert title.get_window_extent(renderer).width <= panel, title.get_text()
    (suptitle,) = fig.texts
    assert suptitle.get_text().startswith("$5 $5") and suptitle.get_window_extent(renderer).x1 <= fig.bbox.x1


@pytest.fixture()
def a_fallback_font_installed(monkeypatch):
    """matplotlib's font list as if Noto Sans CJK JP were installed (its file: DejaVu Sans, for want of one)."""
    import matplotlib
    from matplotlib import font_manager

    noto = font_manager.FontEntry(fname=font_manager.findfont("DejaVu Sans"), name="Noto Sans CJK JP")
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [*font_manager.fontManager.ttflist, noto])
    monkeypatch.setitem(matplotlib.rcParams, "font.family", ["sans-serif"])
    _installed_fallback_fonts.cache_clear()
    yield matplotlib.rcParams
    _installed_fallback_fonts.cache_clear()


def test_installed_fallback_fonts_follow_matplotlibs_own_in_the_font_family_list(a_fallback_font_installed):
    assert use_fallback_fonts() == ("Noto Sans CJK JP",)
    assert a_fallback_font_installed["font.family"] == ["sans-serif", "Noto Sans CJK JP"]
    assert use_fallback_fonts() == ("Noto Sans CJK JP",)  # once in the list
    assert a_fallback_font_installed["font.family"] == ["sans-serif", "Noto Sans CJK JP"]


def test_a_font_family_the_user_chose_is_left_as_it_is(a_fallback_font_installed):
    a_fallback_font_installed["font.family"] = ["serif"]
    use_fallback_fonts()
    assert a_fallback_font_installed["font.family"] == ["serif"]


def test_a_name_no_installed_font_can_draw_gives_no_glyph_warnings():
    rgb = np.zeros((24, 32, 3), np.uint8)
    with warnings.catch_warnings(record=True) as caught:
        figure_bytes(figure(rgb, np.zeros((24, 32)), rgb, title="猫の写真.png — 고양이"))
    assert [str(warning.message) for warning in caught] == []  # was two lines per missing character, per figure


def test_a_character_no_font_here_has_is_spelt_in_a_title_not_drawn_as_a_box(monkeypatch):
    """猫.png's title was an empty box and '.png' where no CJK font is installed (DejaVu Sans alone, as here): a
    character that none of matplotlib's fonts has is now spelt as its escape; one that a font has (ą, Ω, 🐱 in DejaVu
    Sans) is drawn."""
    import importlib

    import matplotlib

    monkeypatch.setitem(matplotlib.rcParams, "font.family", ["sans-serif"])
    monkeypatch.setitem(matplotlib.rcParams, "font.sans-serif", ["DejaVu Sans"])
    monkeypatch.setattr(importlib.import_module("vitroll.overlay"), "_installed_fallback_fonts", lambda: ())
    rgb = np.zeros((24, 32, 3), np.uint8)
    fig = figure(rgb, np.zeros((24, 32)), rgb, title="猫.png — 고양이 ąę Ω 🐱")
    (title,) = fig.texts
    assert title.get_text() == "\\u732b.png — \\uace0\\uc591\\uc774 ąę Ω 🐱"
    assert fit_text("猫" * 40, 1.0, 12, lines=1).startswith("\\u732b")


@pytest.mark.parametrize("heatmap, held", [
    (np.ones((2, 2), np.complex64), "complex64"), (np.array([["a", "b"], ["c", "d"]]), "<U1"),
    (np.ones((2, 2), dtype=object), "object"), (None, "a NoneType"), (torch.ones(2, 2, dtype=torch.complex64),
                                                                      "torch.complex64"),
])
def test_a_heatmap_of_no_real_numbers_is_refused_naming_its_type(heatmap, held):
    """A complex map lost its imaginary part with a NumPy warning; strings failed in NumPy's words ("could not convert
    string to float"), None as a map of shape ()."""
    with pytest.raises(ValueError) as raised:
        overlay(np.zeros((4, 6, 3), np.uint8), heatmap)
    assert str(raised.value) == f"heatmap must hold real numbers (float, int or bool); got {held}"


@pytest.mark.filterwarnings("ignore:overlay. a grid map:UserWarning")  # stretched on purpose
@pytest.mark.parametrize("alpha", ["0.5", True, torch.tensor(0.5), None])
def test_alpha_of_another_type_is_a_type_error_naming_it(alpha):
    """A string failed in Python's words ("'<=' not supported…"), True and a tensor in OpenCV's ("Overload resolution
    failed")."""
    with pytest.raises(TypeError, match=r"^alpha must be a number in \[0, 1\]; got "):
        overlay(np.zeros((4, 6, 3), np.uint8), np.ones((2, 2)), alpha=alpha)
    assert overlay(np.zeros((4, 6, 3), np.uint8), np.ones((2, 2)), alpha=np.float32(0.5)).shape == (4, 6, 3)


def test_an_infinite_cell_of_a_grid_map_is_coloured_as_its_extreme_not_left_a_hole():
    """An image-sized map coloured +inf as its largest value; a grid map stretched over the image turned an infinite
    cell and its neighbours into NaN (∞·0 in the interpolation), left uncoloured."""
    image = np.full((4, 4, 3), 200, np.uint8)
    grid = np.array([[0.0, 1.0], [np.inf, -np.inf]], np.float32)
    stretched = overlay(image, grid, cmap="gray", alpha=1.0, interpolation="nearest")
    assert stretched[:, :, 0].tolist() == [[0, 0, 255, 255], [0, 0, 255, 255], [255, 255, 0, 0], [255, 255, 0, 0]]
    bilinear = overlay(image, grid, cmap="gray", alpha=1.0)
    assert np.array_equal(bilinear, overlay(image, np.array([[0.0, 1.0], [1.0, 0.0]], np.float32), cmap="gray",
                                             alpha=1.0))


@pytest.mark.parametrize("grid", [[[np.inf, 2.0], [2.0, 2.0]], [[np.inf, 2.0], [np.nan, -np.inf]],
                                  [[-np.inf, 2.0], [2.0, 2.0]]], ids=["inf", "inf-nan-minus-inf", "minus-inf"])
def test_infinities_over_a_constant_grid_map_are_coloured_as_normalize_colours_them(grid):
    """A grid map whose finite values are all one drew its +inf cell as the coldest (the finite value, then made 0),
    where the same map at the image's size, through normalize, draws it as the hottest, 1."""
    image = np.full((4, 4, 3), 200, np.uint8)
    grid = np.array(grid)
    image_sized = overlay(image, np.kron(grid, np.ones((2, 2))), cmap="gray", alpha=1.0)
    assert np.array_equal(overlay(image, grid, cmap="gray", alpha=1.0, interpolation="nearest"), image_sized)
    colours = (normalize(grid) * 255).round()
    assert image_sized[::2, ::2, 0].tolist() == np.where(np.isnan(colours), 200, colours).tolist()


@pytest.mark.parametrize("grid", [
    np.array([[1e308, 0.0], [0.0, -1e308]]),  # float32 made both extremes inf, and max − min overflows float64 too
    np.array([[3e38, 0.0], [0.0, -3e38]], np.float32),  # max − min overflowed float32
    np.array([[1e-300, 5e-301], [5e-301, 0.0]]),  # flushed to 0 in float32: a blank map
    torch.tensor([[1e300, 0.0], [0.0, -1e300]], dtype=torch.float64),
], ids=["float64-extremes", "float32-extremes", "float64-tiny", "float64-tensor"])
def test_a_map_of_huge_or_tiny_finite_values_is_coloured_as_its_scaled_copy_without_warnings(grid):
    image = np.full((4, 4, 3), 200, np.uint8)
    unit = [[1.0, 0.5], [0.5, 0.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert normalize(grid).tolist() == unit
        stretched = overlay(image, grid, cmap="gray", alpha=1.0, interpolation="nearest")
        image_sized = overlay(image, np.kron(np.asarray(grid), np.ones((2, 2))), cmap="gray", alpha=1.0)
        bilinear = overlay(image, grid, cmap="gray", alpha=1.0)
    expected = [[255, 255, 128, 128], [255, 255, 128, 128], [128, 128, 0, 0], [128, 128, 0, 0]]
    assert stretched[:, :, 0].tolist() == expected and image_sized[:, :, 0].tolist() == expected
    assert bilinear[:, :, 0].tolist() == [[255, 223, 159, 128], [223, 191, 128, 96], [159, 128, 64, 32],
                                          [128, 96, 32, 0]]
    assert np.array_equal(bilinear, overlay(image, np.array(unit, np.float32), cmap="gray", alpha=1.0))


images = st.tuples(st.integers(1, 24), st.integers(1, 24), st.integers(0, 2**16)).map(
    lambda hws: np.random.default_rng(hws[2]).integers(0, 256, (hws[0], hws[1], 3), dtype=np.uint8))
heatmaps = st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**16), st.booleans()).map(
    lambda hwsn: np.where(np.random.default_rng(hwsn[2]).random((hwsn[0], hwsn[1])) < 0.2 * hwsn[3], np.nan,
                          np.random.default_rng(hwsn[2] + 1).normal(size=(hwsn[0], hwsn[1])) * 100))


@pytest.mark.filterwarnings("ignore:overlay. a grid map:UserWarning")  # stretched on purpose
@settings(max_examples=40, deadline=None)
@given(image=images, heatmap=heatmaps, cmap=st.sampled_from(["jet", "viridis", "gray"]),
       interpolation=st.sampled_from(["bilinear", "bicubic", "nearest"]))
def test_overlay_at_alpha_0_is_the_image_and_at_alpha_1_the_colormap_exactly(image, heatmap, cmap, interpolation):
    """Whatever the image, grid and NaN cells: RGB uint8 of the image's size; alpha 0 gives the image back byte for
    byte, alpha 1 the colormap of the normalised, stretched map (the image itself where that map is NaN)."""
    untouched = overlay(image, heatmap, cmap=cmap, alpha=0.0, interpolation=interpolation)
    assert untouched.dtype == np.uint8 and untouched.shape == image.shape
    np.testing.assert_array_equal(untouched, image)
    coloured = overlay(image, heatmap, cmap=cmap, alpha=1.0, interpolation=interpolation)
    stretched = heatmap if heatmap.shape == image.shape[:2] else upsample(
        heatmap, image.shape[:2], interpolation=interpolation)
    values = normalize(stretched)
    expected = np.where(np.isfinite(values)[..., None], colorize(values, cmap=cmap), image)
    np.testing.assert_array_equal(coloured, expected)


def astronaut_512x300() -> np.ndarray:
    """A real photo, wider than tall (H×W 300×512), as a user would overlay a map on it."""
    with PIL.Image.open(Path(__file__).parent.parent / "sample_images" / "astronaut.jpg") as photo:
        return np.asarray(photo.convert("RGB").resize((512, 300)))


def test_overlay_with_geometry_puts_a_grid_cell_on_the_pixels_of_its_patch_in_one_call():
    """vit at 224, crop_pct 0.875 on 300×512: resized to 256×436 (shorter side to ⌊224/0.875⌋ = 256, the longer
    ⌊256·512/300⌋ = 436), cropped at (16, 106). Patch (0, 0), input pixels [0, 16)², covers original rows
    [16, 32)·300/256 = [18.75, 37.5) and columns [106, 122)·512/436 = [124.48, 143.27)."""
    image = astronaut_512x300()
    geometry = PREPROCESSING.geometry(image.shape[:2])
    grid = np.zeros((14, 14), np.float32)
    grid[0, 0] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        placed = overlay(image, grid, geometry=geometry, interpolation="nearest", cmap="gray", alpha=1.0)
    outside = np.isnan(to_original(grid, geometry))
    lit = np.argwhere((placed == 255).all(axis=-1) & ~outside)  # the photo has white pixels of its own
    assert (lit[:, 0].min(), lit[:, 0].max(), lit[:, 1].min(), lit[:, 1].max()) == (19, 37, 124, 142)
    assert len(lit) == 19 * 19 and (placed[~outside] % 255 == 0).all()  # the crop: white at the patch, else black
    np.testing.assert_array_equal(placed[outside], image[outside])  # where the model saw nothing: the photo itself
    assert outside[:, :124].all() and outside[:19].all() and not outside[19:38, 124:143].any()
    for interpolation in ("bilinear", "nearest"):
        np.testing.assert_array_equal(
            overlay(image, grid, geometry=geometry, interpolation=interpolation),
            overlay(image, to_original(grid, geometry, interpolation=interpolation)))


def test_a_grid_stretched_over_an_image_of_another_shape_warns_once_naming_the_fix():
    image = astronaut_512x300()
    grid = np.random.default_rng(0).random((14, 14)).astype(np.float32)
    with pytest.warns(UserWarning) as caught:
        stretched = overlay(image, grid)
    assert [str(w.message) for w in caught] == [
        "overlay: a grid map of 14×14 patches is stretched over an image of 300×512 pixels (H×W), another shape: "
        "where the model saw a centre crop, the map lands off the pixels it is of. Give "
        "geometry=Preprocessing.from_model(model).geometry(image.shape[:2]) to put it where the model looked (or a "
        "map in the image's pixels, vitroll.to_original(grid_map, geometry))"]
    assert caught[0].filename == __file__
    np.testing.assert_array_equal(stretched, overlay(image, upsample(grid, (300, 512))))  # drawn as before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        overlay(image[:, :310], grid)  # 300×310 against 14×14: within 10 %
        overlay(np.zeros((36, 36, 3), np.uint8), np.ones((5, 5)), padded_hw=(40, 40))
        overlay(image, upsample(grid, (300, 512)))


def test_a_geometry_of_another_image_or_with_padded_hw_is_refused_by_name():
    image = astronaut_512x300()
    with pytest.raises(ValueError, match=r"^geometry is of an image of 300×600 pixels \(H×W\), this image is 300×512: "
                                         r"take the geometry of this image"):
        overlay(image, np.ones((14, 14)), geometry=PREPROCESSING.geometry((300, 600)))
    with pytest.raises(ValueError, match="^give geometry or padded_hw, not both"):
        overlay(image, np.ones((14, 14)), geometry=PREPROCESSING.geometry((300, 512)), padded_hw=(224, 224))
    with pytest.raises(TypeError, match="^geometry must be the CropGeometry"):
        overlay(image, np.ones((14, 14)), geometry=(300, 512))


def test_a_map_in_the_images_pixels_given_with_geometry_is_refused_not_taken_for_a_grid():
    """to_original's map (H, W) with geometry= was taken for a grid of 300×512 patches and placed again, in silence."""
    image = astronaut_512x300()
    geometry = PREPROCESSING.geometry((300, 512))
    placed = to_original(np.arange(196.0).reshape(14, 14), geometry)
    with pytest.raises(ValueError) as refused:
        overlay(image, placed, geometry=geometry)
    assert str(refused.value) == (
        "heatmap is 300×512, already in the image's pixels (as to_original gives it): larger than the model's input "
        "of 224×224 pixels, it is no patch grid, which geometry places; give the grid map (h, w) with geometry, or "
        "this map without geometry")
    assert np.array_equal(overlay(image, placed), overlay(image, np.arange(196.0).reshape(14, 14), geometry=geometry))


def test_overlay_pixels_are_the_blend_of_jets_colours_written_out_by_hand():
    """tests/reference_rendering.py builds its colours with lookup_table, the function under test, so a reversed
    table or an inverted alpha would pass it: jet's ends are written out here (dark blue 0, 0, 128; dark red 128, 0,
    0), and a pixel is (1 − α)·image + α·colour, rounded."""
    assert lookup_table("jet")[0].tolist() == [0, 0, 128]
    assert lookup_table("jet")[255].tolist() == [128, 0, 0]
    drawn = overlay(np.full((2, 2, 3), 200, np.uint8), np.array([[0.0, 1.0], [0.0, 0.0]]), cmap="jet", alpha=0.3)
    assert drawn[0, 0].tolist() == [140, 140, 178]
    assert drawn[0, 1].tolist() == [178, 140, 140]
