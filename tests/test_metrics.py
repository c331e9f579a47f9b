"""Metrics on hand-made examples whose answers are known."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch import nn

from reference import (
    reference_deletion_insertion, reference_iou, reference_spearman, reference_top_pixels,
)
from vitroll.errors import InputValueError, OptionValueError
from vitroll.metrics import (
    deletion_insertion, energy_in_mask, peak_preference, pointing_game, rank_correlation, top_fraction_iou,
    top_fraction_mask,
)

MASK = np.zeros((4, 4), bool)
MASK[1:3, 1:3] = True  # 4 of 16 pixels


def test_pointing_game_hits_and_misses():
    on = np.zeros((4, 4)); on[2, 2] = 1
    off = np.zeros((4, 4)); off[0, 3] = 1
    assert pointing_game(np.stack([on, off]), np.stack([MASK, MASK])).tolist() == [True, False]
    assert pointing_game(off, MASK, tolerance=1).tolist() == [False]  # (0,3) is 1 px from (1,2) diagonally
    near = np.zeros((4, 4)); near[0, 2] = 1
    assert pointing_game(near, MASK, tolerance=1).tolist() == [True]


def test_pointing_game_counts_a_tie_only_if_every_peak_is_on_the_mask():
    flat = np.ones((4, 4))
    assert pointing_game(flat, MASK).tolist() == [False]


def test_peak_preference_by_hand_ignores_the_background():
    rival = np.zeros((4, 4), bool); rival[3, :] = True
    background_peak = np.zeros((4, 4)); background_peak[0, 0] = 9; background_peak[1, 1] = 2; background_peak[3, 0] = 1
    assert pointing_game(background_peak, MASK).tolist() == [False]
    lower = background_peak.copy(); lower[3, 3] = 5  # the rival's peak now beats the mask's
    tie = background_peak.copy(); tie[3, 2] = 2
    maps = np.stack([background_peak, lower, tie])
    assert peak_preference(maps, np.stack([MASK] * 3), np.stack([rival] * 3)).tolist() == [1.0, 0.0, 0.5]
    unseen = background_peak.copy(); unseen[1:3, 1:3] = np.nan  # unseen pixels count as zero
    assert peak_preference(unseen, MASK, rival).tolist() == [0.0]
    with pytest.raises(InputValueError, match="non-empty mask and rival mask"):
        peak_preference(background_peak, MASK, np.zeros((4, 4), bool))


@pytest.mark.parametrize("fraction", [0, 1.5])
def test_a_fraction_outside_zero_to_one_is_an_option_mistake(fraction):
    with pytest.raises(OptionValueError, match=rf"^fraction must be in \(0, 1\]; got {fraction}$"):
        top_fraction_mask(np.ones((1, 4, 4)), fraction)


def test_an_unknown_substrate_is_an_option_mistake():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 2))
    with pytest.raises(OptionValueError, match="^substrate must be 'blur' or 'mean'; got 'noise'$"):
        deletion_insertion(model, torch.zeros(1, 3, 4, 4), torch.ones(1, 4, 4), torch.tensor([0]), substrate="noise")


@settings(deadline=None)  # a deadline fails under load: an example took 2 s on shared cores
@given(maps=arrays(np.float64, (3, 5, 6), elements=st.floats(-10, 10)), scale=st.floats(0.1, 10),
       shift=st.floats(-10, 10), cut=st.integers(1, 5))
def test_peak_preference_flips_when_the_masks_swap_and_ignores_monotone_rescaling(maps, scale, shift, cut):
    left = np.zeros((3, 5, 6), bool); left[..., :cut] = True
    right = ~left
    preference = peak_preference(maps, left, right)
    assert set(preference.tolist()) <= {0.0, 0.5, 1.0}
    np.testing.assert_array_equal(peak_preference(maps, right, left), 1 - preference)
    expected = [float(m[:, :cut].max() > m[:, cut:].max()) + 0.5 * float(m[:, :cut].max() == m[:, cut:].max())
                for m in maps]
    np.testing.assert_array_equal(preference, expected)
    rounded = np.round(maps, 6)
    rescaled = rounded * scale + shift
    np.testing.assert_array_equal(peak_preference(rescaled, left, right), peak_preference(rounded, left, right))


def test_energy_in_mask_by_hand():
    uniform = np.ones((4, 4))
    assert energy_in_mask(uniform, MASK) == pytest.approx([0.25])
    skewed = np.ones((4, 4)); skewed[1:3, 1:3] = 4.0  # 16 inside of 28
    assert energy_in_mask(skewed, MASK) == pytest.approx([16 / 28])
    with_nan = skewed.copy(); with_nan[0, 0] = np.nan  # unseen pixel counts as zero
    assert energy_in_mask(with_nan, MASK) == pytest.approx([16 / 27])
    assert energy_in_mask(np.zeros((4, 4)), MASK).tolist() == [0.0]


def test_top_fraction_iou_by_hand():
    saliency = np.arange(16, dtype=float).reshape(4, 4)  # top 25 % = last row
    assert top_fraction_mask(saliency, 0.25)[0].sum() == 4
    assert top_fraction_iou(saliency, MASK, 0.25) == pytest.approx([0.0])
    saliency[1:3, 1:3] = 100
    assert top_fraction_iou(saliency, MASK, 0.25) == pytest.approx([1.0])
    assert top_fraction_iou(saliency, MASK, 0.5) == pytest.approx([4 / 8])
    assert top_fraction_iou(saliency, saliency, 0.3) == pytest.approx([1.0])
    with pytest.raises(ValueError, match="fraction"):
        top_fraction_iou(saliency, MASK, 0)


def test_top_fraction_iou_of_two_maps_counts_only_the_pixels_both_saw():
    seen_by_one = np.arange(100, dtype=float).reshape(10, 10)
    seen_by_one[:, :5] = np.nan  # a crop: the left half not seen by this model
    seen_by_both = seen_by_one.copy()
    seen_by_both[:, :5] = 1000.0  # the other model's strongest pixels lie where the first saw nothing
    # among the 50 shared pixels each top 10 % is the same 5 (the right half's largest values): IoU 1, not 0
    assert top_fraction_iou(seen_by_one, seen_by_both, 0.1) == pytest.approx([1.0])
    assert top_fraction_iou(seen_by_both, seen_by_one, 0.1) == pytest.approx([1.0])
    top = top_fraction_mask(seen_by_both, 0.1, np.isfinite(seen_by_one))[0]
    assert top.sum() == 5 and top[:, :5].sum() == 0
    assert top_fraction_mask(seen_by_both, 0.1, np.zeros((10, 10), bool)).sum() == 0  # nothing to choose from
    nowhere = np.full((10, 10), np.nan)
    assert top_fraction_iou(nowhere, seen_by_both, 0.1) == pytest.approx([0.0])


def test_rank_correlation_by_hand():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert rank_correlation(x, x * 10 + 3) == pytest.approx([1.0])
    assert rank_correlation(x, -x) == pytest.approx([-1.0])
    assert rank_correlation(x, np.array([[2.0, 1.0], [3.0, 4.0]])) == pytest.approx([0.8])  # 1 − 6·2/(4·15)
    assert rank_correlation(x, np.ones((2, 2))).tolist() == [0.0]
    with_nan = np.array([[np.nan, 2.0], [3.0, 1.0]])
    assert rank_correlation(x, with_nan) == pytest.approx([-0.5])  # ranks (1,2,3) vs (2,3,1)


class Brightness(nn.Module):
    """A two-class 'model' whose class-1 logit is the summed brightness of the top-left quarter."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(4.0))

    def forward(self, x):
        quarter = x[:, :, :4, :4].mean(dim=(1, 2, 3)) * self.scale
        return torch.stack([torch.zeros_like(quarter), quarter], dim=1)


def test_deletion_and_insertion_reward_the_map_that_points_at_the_evidence():
    model = Brightness()
    images = torch.ones(2, 3, 8, 8)
    good = torch.zeros(8, 8); good[:4, :4] = 1
    bad = torch.zeros(8, 8); bad[4:, 4:] = 1
    result = deletion_insertion(model, images, torch.stack([good, bad]), torch.tensor([1, 1]), steps=4,
                                substrate="mean")
    # 'mean' substrate of an all-ones image is ones: nothing changes, so use a dark image instead below
    assert np.allclose(result.deletion, result.deletion[:, :1])
    images = torch.ones(2, 3, 8, 8)
    images[:, :, :4, :4] = 2.0
    result = deletion_insertion(model, images, torch.stack([good, bad]), torch.tensor([1, 1]), steps=4,
                                substrate="mean")
    assert result.fractions.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    start = torch.tensor([0.0, 8.0]).softmax(0)[1].item()  # logit 4·2
    mean_logit = 4 * 1.25  # mean colour of the image is 1.25 everywhere after full deletion
    end = torch.tensor([0.0, mean_logit]).softmax(0)[1].item()
    assert result.deletion[0, 0] == pytest.approx(start) and result.deletion[0, 1] == pytest.approx(end)
    assert result.deletion[1, 1] == pytest.approx(start)  # deleting the wrong quarter changes nothing
    assert result.deletion_auc[0] < result.deletion_auc[1]
    assert result.insertion_auc[0] > result.insertion_auc[1]
    assert result.insertion[0, 1] == pytest.approx(start)
    assert result.insertion[:, 0] == pytest.approx([end, end])


def test_blur_substrate_keeps_a_constant_image_constant():
    model = Brightness()
    images = torch.full((1, 3, 16, 16), 0.5)
    result = deletion_insertion(model, images, torch.rand(1, 4, 4), torch.tensor([1]), steps=2, substrate="blur")
    assert np.allclose(result.deletion, result.deletion[0, 0])


TIED_VALUES = st.sampled_from([0.0, 0.0, 1.0, 1.0, 2.5, -1.0, np.nan])
"""Few distinct values, so that ties are the rule, and NaN (a pixel the model did not see)."""


@st.composite
def paired_maps(draw):
    """Two stacks of maps (B, H, W) of the same shape, from one pixel upwards, with ties, NaN and constant maps."""
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    return draw(arrays(np.float64, shape, elements=TIED_VALUES)), draw(arrays(np.float64, shape, elements=TIED_VALUES))


@settings(deadline=None)  # a deadline fails under load: an example took 2 s on shared cores
@given(paired_maps())
def test_rank_correlation_matches_the_float64_reference_with_ties_nan_and_constant_maps(pair):
    first, second = pair
    expected = [reference_spearman(a, b) for a, b in zip(first, second)]
    np.testing.assert_allclose(rank_correlation(first, second), expected, rtol=1e-12, atol=1e-12)


@settings(deadline=None)  # a deadline fails under load: an example took 2 s on shared cores
@given(paired_maps(), st.sampled_from([0.01, 0.1, 0.25, 0.5, 1.0]))
def test_top_fraction_iou_matches_the_reference_against_a_mask_and_between_maps(pair, fraction):
    first, second = pair
    masks = second > 0
    against_mask = [reference_iou(reference_top_pixels(a, fraction), set(np.flatnonzero(m)))
                    for a, m in zip(first, masks)]
    np.testing.assert_allclose(top_fraction_iou(first, masks, fraction), against_mask, rtol=1e-12)
    between = []
    for a, b in zip(first, second):
        both_seen = set(np.flatnonzero(np.isfinite(a) & np.isfinite(b)))
        between.append(reference_iou(reference_top_pixels(a, fraction, both_seen),
                                     reference_top_pixels(b, fraction, both_seen)))
    np.testing.assert_allclose(top_fraction_iou(first, second, fraction), between, rtol=1e-12)


def test_rank_correlation_of_one_pixel_or_none_seen_is_zero_without_a_warning():
    one = np.array([[np.nan, 2.0], [np.nan, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would be a stray line on a command's stderr
        assert rank_correlation(one, np.ones((2, 2)) * 3).tolist() == [0.0]
        assert rank_correlation(np.full((2, 2), np.nan), np.ones((2, 2))).tolist() == [0.0]


class PixelLinear(nn.Module):
    """A three-class linear model on a (3, 4, 4) image whose weights make every pixel matter differently."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.randn(3, 3 * 16, generator=generator))

    def forward(self, x):
        return x.flatten(1) @ self.weight.T


@settings(deadline=None, max_examples=30)
@given(arrays(np.float64, (2, 4, 4), elements=TIED_VALUES), st.sampled_from([3, 4, 5]), st.integers(0, 2))
def test_deletion_and_insertion_match_the_float64_reference_with_ties_and_nan(maps, steps, target):
    model = PixelLinear()
    images = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    result = deletion_insertion(model, images, torch.from_numpy(maps), torch.tensor([target, target]), steps=steps,
                                substrate="mean")
    for b in range(2):
        deletion, insertion, deletion_auc, insertion_auc = reference_deletion_insertion(
            model, images[b], maps[b], target, steps)
        np.testing.assert_allclose(result.deletion[b], deletion, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(result.insertion[b], insertion, rtol=1e-5, atol=1e-7)
        assert result.deletion_auc[b] == pytest.approx(deletion_auc, rel=1e-5, abs=1e-7)
        assert result.insertion_auc[b] == pytest.approx(insertion_auc, rel=1e-5, abs=1e-7)


def test_deletion_of_a_padded_grid_map_starts_with_the_pixels_of_its_hot_patch():
    """A 5 × 5 input in patches of 2, padded to 6 × 6 (timm's dynamic_img_pad): the hot middle patch is pixels 2–3
    on each axis, the first 4 deleted. Stretched evenly over 5 pixels, the grid put its peak on pixel 2 alone and
    deleted a cross around it first."""
    model = nn.Linear(3 * 25, 3)
    with torch.no_grad():
        model.weight.copy_(torch.randn(3, 75, generator=torch.Generator().manual_seed(0)))
    flat = nn.Sequential(nn.Flatten(), model)
    image = torch.randn(1, 3, 5, 5, generator=torch.Generator().manual_seed(1))
    grid = torch.zeros(1, 3, 3)
    grid[0, 1, 1] = 1.0
    result = deletion_insertion(flat, image, grid, torch.tensor([0]), steps=6, substrate="mean", padded_hw=(6, 6))
    patch = np.zeros((5, 5))
    patch[2:4, 2:4] = 1.0
    deletion, insertion, _, _ = reference_deletion_insertion(flat, image[0], patch, 0, steps=6)
    assert result.fractions[1] == 4 / 25
    np.testing.assert_allclose(result.deletion[0][:2], deletion[:2], rtol=1e-5)
    np.testing.assert_allclose(result.insertion[0][:2], insertion[:2], rtol=1e-5)
