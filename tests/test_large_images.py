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
                                 reference_overlay, reference_summary)
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
