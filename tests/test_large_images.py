"""The fast rendering path (OpenCV uint8 blend, table lookups, float32 statistics, fast PNG filters) gives what the
slow float path of tests/reference_rendering.py gave, within the stated tolerances, on random inputs."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from PIL import Image

from reference_rendering import (reference_blend, reference_colorize, reference_encode_png, reference_normalize,
                                 reference_overlay, reference_summary, summary_before_fast_top_mass)
from vitroll.io import encode_png, load_image
from vitroll.maps import normalize, summary, to_original
from vitroll.overlay import blend, colorize, overlay
from vitroll.preprocess import Preprocessing

PHOTO = np.asarray(load_image(Path(__file__).resolve().parents[1] / "sample_images" / "astronaut.jpg"))
"""A photograph (512 × 512 RGB uint8, scikit-image's astronaut), the one the project ships."""

SETTINGS = settings(max_examples=60, deadline=None)

images = st.tuples(st.integers(1, 40), st.integers(1, 40)).flatmap(
    lambda hw: arrays(np.uint8, (*hw, 3), elements=st.integers(0, 255)))
alphas = st.one_of(st.sampled_from([0.0, 0.25, 0.5, 0.8, 1.0]), st.floats(0.0, 1.0))
cmaps = st.sampled_from(["jet", "viridis", "gray", "inferno"])


def float_mix(image: np.ndarray, colors: np.ndarray, alpha: float) -> np.ndarray:
    """``(1 − α)·image + α·colors`` as the reference computes it, before rounding (H, W, 3) float32."""
    return image.astype(np.float32) * (1.0 - alpha) + colors.astype(np.float32) * alpha


maps = st.tuples(st.integers(1, 30), st.integers(1, 30), st.sampled_from([np.float32, np.float64])).flatmap(
    lambda shape: arrays(shape[2], shape[:2], elements=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True, width=32 if shape[2] is np.float32 else 64),
        st.sampled_from([0.0, 1.0, -0.0, 0.5]))))


@SETTINGS
@given(saliency=maps, mode=st.sampled_from(["minmax", "percentile"]))
def test_normalize_equals_its_two_pass_reference(saliency, mode):
    got, want = normalize(saliency, mode=mode), reference_normalize(saliency, mode=mode)
    assert got.dtype == want.dtype == np.float32
    # equal values and NaN in the same places; the sign of a zero may differ (a float64 -1e-308 is float32 -0.0, and
    # which of -0.0 and 0.0 NumPy's min returns depends on its reduction order), never a colour
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("scale", [1.0, 1e-300, 1e300, 3e38])
def test_normalize_equals_its_reference_on_a_unit_map_at_any_scale(scale):
    saliency = np.random.default_rng(0).random((64, 48)) * scale
    saliency[0, :3] = (np.nan, np.inf, -np.inf)
    for mode in ("minmax", "percentile"):
        np.testing.assert_array_equal(normalize(saliency, mode=mode), reference_normalize(saliency, mode=mode))


@SETTINGS
@given(image=images, seed=st.integers(0, 2**32 - 1), cmap=cmaps)
def test_colorize_equals_the_fancy_indexed_table_exactly(image, seed, cmap):
    values = np.random.default_rng(seed).random(image.shape[:2]).astype(np.float32)
    values[values < 0.1] = np.nan
    values[values > 0.95] = 1.0
    np.testing.assert_array_equal(colorize(values, cmap=cmap), reference_colorize(values, cmap))


@SETTINGS
@given(image=images, seed=st.integers(0, 2**32 - 1), alpha=alphas)
def test_blend_is_within_one_grey_level_and_only_at_exact_halves(image, seed, alpha):
    rng = np.random.default_rng(seed)
    colors = rng.integers(0, 256, image.shape, dtype=np.uint8)
    where = rng.random(image.shape[:2]) < 0.8
    got, want = blend(image, colors, alpha, where).astype(int), reference_blend(image, colors, alpha, where).astype(int)
    differs = got != want
    assert np.abs(got - want).max(initial=0) <= 1
    # OpenCV rounds ties to even, the float reference half up: they may differ only where the mix is k + ½
    mix = float_mix(image, colors, alpha)[differs]
    np.testing.assert_allclose(mix - np.floor(mix), 0.5, atol=1e-4)
    np.testing.assert_array_equal(got[~where], image[~where])


@SETTINGS
@given(image=images, grid_hw=st.tuples(st.integers(1, 16), st.integers(1, 16)), seed=st.integers(0, 2**32 - 1),
       alpha=alphas, cmap=cmaps, normalization=st.sampled_from(["minmax", "percentile"]),
       interpolation=st.sampled_from(["bilinear", "bicubic", "nearest"]), image_sized=st.booleans())
def test_overlay_is_within_one_grey_level_of_the_float_reference(image, grid_hw, seed, alpha, cmap, normalization,
                                                                   interpolation, image_sized):
    rng = np.random.default_rng(seed)
    heat = rng.random(image.shape[:2] if image_sized else grid_hw).astype(np.float32)
    if image_sized:
        heat[:, : heat.shape[1] // 4] = np.nan  # outside the centre crop
    options = dict(cmap=cmap, alpha=alpha, interpolation=interpolation, normalization=normalization)
    got, want = overlay(image, heat, **options).astype(int), reference_overlay(image, heat, **options).astype(int)
    assert np.abs(got - want).max(initial=0) <= 1


def test_overlay_of_a_large_photo_matches_the_reference():
    """6000 × 4000 would take the reference seconds; 1500 × 1000 has the same code path."""
    import cv2

    image = cv2.resize(PHOTO, (1500, 1000), interpolation=cv2.INTER_CUBIC)
    heat = np.random.default_rng(0).random((14, 14)).astype(np.float32)
    got, want = overlay(image, heat).astype(int), reference_overlay(image, heat).astype(int)
    assert np.abs(got - want).max() <= 1
    # α = 0.5: image + colour is odd for half the values, and half of those halves round down to even
    assert 0.2 < (got != want).mean() < 0.3
    saliency = normalize(cv2.resize(heat, (1500, 1000)))
    mix = float_mix(image, reference_colorize(saliency), 0.5)[got != want]
    np.testing.assert_array_equal(mix - np.floor(mix), 0.5)


@SETTINGS
@given(image=images)
def test_fast_png_is_lossless(image):
    decoded = np.asarray(Image.open(io.BytesIO(encode_png(image))))
    np.testing.assert_array_equal(decoded.reshape(image.shape), image)


def test_fast_png_of_a_photo_overlay_is_lossless_and_no_larger_than_libpng_defaults():

    image = overlay(PHOTO, np.random.default_rng(0).random((14, 14)).astype(np.float32))
    data = encode_png(image)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(data))), image)
    assert len(data) <= len(reference_encode_png(image))


@SETTINGS
@given(hw=st.tuples(st.integers(1, 60), st.integers(1, 60)), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([np.float32, np.float64]), zeros=st.floats(0.0, 0.9), nans=st.floats(0.0, 0.5),
       top_fraction=st.sampled_from([0.01, 0.1, 0.5]))
def test_summary_equals_the_float64_reference(hw, seed, dtype, zeros, nans, top_fraction):
    rng = np.random.default_rng(seed)
    saliency = (rng.random(hw) * 2 - 0.2).astype(dtype)  # some negatives, clipped to 0 by both
    saliency[rng.random(hw) < zeros] = 0.0
    saliency[rng.random(hw) < nans] = np.nan
    got, want = summary(saliency, top_fraction=top_fraction), reference_summary(saliency, top_fraction=top_fraction)
    assert (got["peak_row"], got["peak_col"]) == (want["peak_row"], want["peak_col"])
    for key in ("entropy", "top_mass"):
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-9, equal_nan=True)


def test_summary_of_an_image_sized_map_matches_the_reference():
    geometry = Preprocessing(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3).geometry((1000, 1500))
    saliency = to_original(np.random.default_rng(0).random((14, 14)).astype(np.float32), geometry)
    got, want = summary(saliency), reference_summary(saliency)
    assert got == pytest.approx(want, rel=0, abs=1e-12)


def assert_same_summary(saliency: np.ndarray, top_fraction: float = 0.1) -> None:
    """summary() returns exactly, bit for bit, what it returned before its fast paths (NaN where it gave NaN)."""
    got = summary(saliency, top_fraction=top_fraction)
    want = summary_before_fast_top_mass(saliency, top_fraction=top_fraction)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert type(got[key]) is type(value)
        assert got[key] == value or (np.isnan(got[key]) and np.isnan(value)), (key, got[key], value)


@settings(max_examples=80, deadline=None)
@given(hw=st.one_of(st.tuples(st.integers(1, 40), st.integers(1, 40)),
                   st.tuples(st.integers(190, 320), st.integers(190, 320))), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([np.float32, np.float64]), zeros=st.sampled_from([0.0, 0.3, 0.95, 1.0]),
       nans=st.sampled_from([0.0, 0.2, 0.6, 1.0]), levels=st.sampled_from([0, 1, 2, 7, 256]),
       spread=st.sampled_from([1.0, 1e3, 1e30]), negatives=st.booleans(),
       top_fraction=st.sampled_from([0.001, 0.1, 0.5, 0.99]))
def test_summary_is_bit_identical_to_before_its_fast_paths(hw, seed, dtype, zeros, nans, levels, spread, negatives,
                                                           top_fraction):
    """Random maps, small and up to 320 × 320 (the fast top-mass path needs over 32768 positive values): ties (a few
    levels, a constant map), zeros, NaN, ±inf, negatives, and ranges so wide that the top values' sum depends on
    the order of the additions (the old partition's is kept then)."""
    rng = np.random.default_rng(seed)
    saliency = rng.random(hw) ** np.log10(spread) if spread > 1 else rng.random(hw)
    if levels:
        saliency = np.floor(saliency * levels) / levels + 1.0 / levels
    if negatives:
        saliency -= 0.2
    saliency = saliency.astype(dtype)
    saliency[rng.random(hw) < zeros] = 0.0
    saliency[rng.random(hw) < nans] = np.nan
    saliency.flat[rng.integers(0, saliency.size, 3)] = rng.choice([np.inf, -np.inf, 5.0], 3)
    assert_same_summary(saliency, top_fraction)


def periodic(stride_value: float, other: float, top_fraction: float) -> tuple[np.ndarray, float]:
    """40960 float32 values, every 10th (the ones the fast path samples) ``stride_value``, the rest ``other``."""
    values = np.full(40960, other, np.float32)
    values[::10] = stride_value
    return values.reshape(160, 256), top_fraction


@pytest.mark.parametrize("saliency, top_fraction", [
    periodic(2.0, 1.0, 0.5),  # the sample sees only the large values: too few candidates, all are partitioned
    periodic(1.0, 2.0, 0.1),  # the sample sees only the small ones: every value is a candidate
    (np.random.default_rng(1).random((200, 200)).astype(np.float32) ** 40, 0.1),  # wide but exact: the fast path
    # top values decades apart: their sum depends on the order of the additions, so they are partitioned as before
    (np.float32(10.0) ** np.random.default_rng(2).uniform(-30, 30, (200, 200)).astype(np.float32), 0.1),
    (np.where(np.random.default_rng(3).random((200, 200)) < 0.05, np.float32(1e30),
              np.random.default_rng(4).random((200, 200)).astype(np.float32)), 0.1),
    (np.full((200, 200), 0.25, np.float32), 0.1),  # one tie everywhere
])
def test_summary_of_adversarial_maps_is_bit_identical_to_before(saliency, top_fraction):
    assert_same_summary(saliency, top_fraction)


@pytest.mark.parametrize("size", [(1080, 1920), (480, 640), (4000, 6000)])
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic", "nearest"])
def test_summary_of_real_maps_is_bit_identical_to_before_and_skips_the_full_partition(size, interpolation,
                                                                                      monkeypatch):
    """Rollout-like maps of photos (a 14 × 14 grid onto the image, NaN outside the centre crop), and the map of a
    one-layer ViT on the astronaut: the same numbers as before, and no partition of every positive value (the 17 ms
    of a 1920 × 1080 map that the threshold saves)."""
    geometry = Preprocessing(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3).geometry(size)
    grid = np.random.default_rng(size[0]).random((14, 14)).astype(np.float32) ** 4
    saliency = to_original(grid, geometry, interpolation=interpolation)
    partitioned: list[int] = []
    partition = np.partition
    monkeypatch.setattr(np, "partition", lambda array, kth: partitioned.append(array.size) or partition(array, kth))
    got = summary(saliency)
    monkeypatch.undo()
    assert_same_summary(saliency)
    positives = int(np.count_nonzero(saliency > 0))
    assert partitioned and max(partitioned) < positives / 4, (partitioned, positives)
    assert got["top_mass"] == summary_before_fast_top_mass(saliency)["top_mass"]


def test_summary_of_a_vit_map_of_a_photo_is_bit_identical_to_before():
    import timm
    import torch

    from vitroll.pipelines.explain import ExplainSettings, render
    from vitroll.pipelines.stream import decoded_batches, explained_batches, read_image

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", depth=1).eval()
    path = Path(__file__).resolve().parents[1] / "sample_images" / "astronaut.jpg"
    settings_ = ExplainSettings()
    preprocessing = Preprocessing.from_model(model)
    [[record]] = explained_batches(model, decoded_batches([path], read_image, preprocessing, batch_size=1), settings_)
    saliency, _ = render(record.image, record.grid_map, record.geometry, settings_)
    assert_same_summary(saliency)


def test_a_figure_of_a_large_image_looks_as_when_matplotlib_shrank_it(monkeypatch):
    """Shrinking to SHOWN_SIDE before matplotlib (10× faster at 6000 × 4000) changes its 1200 × 420 figure by less
    than a grey level on average; edges differ most (matplotlib's own antialiasing then shrinks 3×, not 7×)."""
    import sys

    import cv2

    from vitroll.pipelines.explain import ExplainSettings, figure_png, render

    overlay_module = sys.modules["vitroll.overlay"]  # vitroll.overlay is also the function's name in the package
    image = cv2.resize(PHOTO, (2400, 1600), interpolation=cv2.INTER_CUBIC)
    geometry = Preprocessing(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3).geometry(image.shape[:2])
    saliency, overlaid = render(image, np.random.default_rng(0).random((14, 14)).astype(np.float32), geometry,
                                ExplainSettings())

    def drawn() -> np.ndarray:
        data = figure_png("photo.jpg", image, saliency, overlaid, ExplainSettings())
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)

    fast = drawn()
    monkeypatch.setattr(overlay_module, "SHOWN_SIDE", 10**9)
    difference = np.abs(fast - drawn())
    assert difference.mean() < 1.0 and np.percentile(difference, 99) <= 8
