"""The shapes testbed: deterministic images with exact masks, and the shipped model that was trained on them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitroll import load_model, rollout
from vitroll.testbed import CLASSES, ShapesConfig, arrays, sample
from vitroll.testbed.model import TESTBED_NAME, WEIGHTS


def test_images_are_reproducible_from_seed_and_index():
    a, b = sample(7, 3), sample(7, 3)
    assert np.array_equal(a.image, b.image) and np.array_equal(a.mask, b.mask) and a.label == b.label
    assert not np.array_equal(sample(7, 4).image, a.image)
    assert not np.array_equal(sample(8, 3).image, a.image)
    images, masks, labels = arrays(7, 5, start=1)
    assert np.array_equal(images[2], sample(7, 3).image)


def test_mask_covers_the_target_and_only_it():
    config = ShapesConfig(clutter=0.0)
    item = sample(0, 0, config)
    assert item.image.shape == (64, 64, 3) and item.mask.shape == (64, 64) and item.mask.dtype == bool
    inside = item.image[item.mask].astype(float).mean(axis=0)
    outside = item.image[~item.mask].astype(float).mean(axis=0)
    assert inside.min() > outside.max()  # targets are drawn brighter than the background
    top, left, bottom, right = item.box
    assert item.mask[top:bottom, left:right].sum() == item.mask.sum()
    assert 20 * 20 * 0.3 < item.mask.sum() < 30 * 30


def test_classes_are_balanced_enough():
    _, _, labels = arrays(5, 400)
    counts = np.bincount(labels, minlength=len(CLASSES))
    assert counts.min() > 70, counts


@pytest.fixture(scope="module")
def shipped():
    if not WEIGHTS.is_file():
        pytest.fail(f"{WEIGHTS} is missing: the trained testbed model must ship with the package")
    return load_model(TESTBED_NAME)


def test_shipped_model_classifies_held_out_images(shipped):
    images, _, labels = arrays(3, 300)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1)
    with torch.no_grad():
        accuracy = (shipped(x).argmax(-1).numpy() == labels).mean()
    assert accuracy >= 0.9, accuracy


def test_shipped_model_rollout_points_at_the_target(shipped):
    images, masks, _ = arrays(3, 64)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1)
    maps = rollout(shipped, x).numpy()  # (64, 8, 8) over 8-px patches
    patch_masks = masks.reshape(64, 8, 8, 8, 8).mean(axis=(2, 4)) > 0.5
    peaks = maps.reshape(64, -1).argmax(1)
    hits = patch_masks.reshape(64, -1)[np.arange(64), peaks]
    assert hits.mean() > 0.6, hits.mean()


def test_sanity_check_on_the_shipped_model_changes_rollout_and_chefer_maps(shipped):
    from vitroll.pipelines.sanity import sanity_check

    images, _, _ = arrays(3, 16)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1)
    result = sanity_check(shipped, x, ["rollout", "chefer", "center"])
    assert result.flagged() == ["center"]
    for method in ("rollout", "chefer"):
        assert result.correlations[method][-1].mean() < 0.5, (method, result.correlations[method].mean(axis=1))
