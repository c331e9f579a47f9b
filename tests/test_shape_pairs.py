"""The image–text testbed's images: two shapes of different classes, one per half, and a prompt naming one."""

import numpy as np
import pytest
import torch
from PIL import Image

import vitroll
from vitroll.maps import to_original
from vitroll.metrics import energy_in_mask, pointing_game
from vitroll.models import load_model
from vitroll.pipelines.evaluate_pairs import evaluate_pairs, pair_images
from vitroll.preprocess import Preprocessing
from vitroll.testbed.image_text_model import load_pairs_model
from vitroll.testbed.shape_pairs import PROMPTS, PairsConfig, prompt_for, sample, samples
from vitroll.testbed.shapes import CLASSES


def test_two_different_shapes_one_in_each_half_and_the_prompt_names_one():
    size = PairsConfig().image_size
    for drawn in samples(4, 200):
        assert drawn.image.shape == (size, size, 3) and drawn.image.dtype == np.uint8
        assert drawn.labels[0] != drawn.labels[1]
        assert drawn.masks.shape == (2, size, size) and drawn.masks.sum(axis=(1, 2)).min() > 60
        assert not (drawn.masks[0] & drawn.masks[1]).any()
        first, second = np.nonzero(drawn.masks[0]), np.nonzero(drawn.masks[1])
        # one shape entirely in the first half, the other in the second, along rows or columns
        assert any(first[axis].max() < size / 2 <= second[axis].min() for axis in (0, 1))
        assert drawn.prompt in {template.format(CLASSES[drawn.labels[drawn.named]]) for template in PROMPTS}
        assert np.array_equal(drawn.named_mask, drawn.masks[drawn.named])


def test_the_named_shape_is_either_one_equally_often():
    named = np.array([drawn.named for drawn in samples(9, 2000)])
    assert abs(named.mean() - 0.5) < 0.04


def test_images_regenerate_alone():
    again = sample(5, 17)
    assert np.array_equal(again.image, list(samples(5, 1, start=17))[0].image) and again.prompt == sample(5, 17).prompt


@pytest.mark.parametrize("template", range(len(PROMPTS)))
def test_prompt_for_names_the_class(template):
    assert prompt_for(CLASSES.index("disk"), template).endswith("disk")


def test_the_shipped_clip_model_names_the_two_shapes_of_most_held_out_images():
    model, tokenizer = load_pairs_model()
    drawn = pair_images(100)
    batch = tokenizer([prompt_for(label) for label in range(len(CLASSES))], padding=True, return_tensors="pt")
    pixels = torch.stack([torch.from_numpy(s.image).permute(2, 0, 1).float() / 127.5 - 1 for s in drawn])
    with torch.no_grad():
        logits = model(pixel_values=pixels, **batch).logits_per_image
    best_two = [set(row.topk(2).indices.tolist()) for row in logits]
    assert np.mean([chosen == set(s.labels) for chosen, s in zip(best_two, drawn)]) >= 0.8


def test_pair_scores_by_hand_and_rollout_cannot_follow_the_text():
    model = load_model("vitroll-clip-shapes")
    drawn = pair_images(4, seed=6)
    rows = evaluate_pairs(model, drawn, ["chefer", "rollout"], batch_size=3)
    assert [(row["image"], row["method"]) for row in rows] == [
        (0, "chefer"), (1, "chefer"), (2, "chefer"), (0, "rollout"), (1, "rollout"), (2, "rollout"),
        (3, "chefer"), (3, "rollout")]
    preprocessing = Preprocessing.from_model(model)
    for row in rows:
        item = drawn[row["image"]]
        tensor, (geometry,) = preprocessing.batch([Image.fromarray(item.image)])
        maps = vitroll.image_text_maps(model, tensor, [item.prompt, item.other_prompt], method=row["method"])[0]
        named, other = (to_original(maps[k].numpy(), geometry) for k in range(2))
        assert row["pointing_game"] == float(pointing_game(named, item.named_mask)[0])
        on_named, on_other = (named[item.masks[k]].max() for k in (item.named, 1 - item.named))
        assert row["named_over_other"] == (1.0 if on_named > on_other else 0.0 if on_named < on_other else 0.5)
        assert row["energy_in_mask"] == pytest.approx(float(energy_in_mask(named, item.named_mask)[0]), abs=1e-6)
        expected_both = row["pointing_game"] and pointing_game(other, item.masks[1 - item.named])[0]
        assert row["both_follow"] == float(expected_both)
        if row["method"] == "rollout":  # one map for both texts: it cannot peak on two different shapes
            np.testing.assert_array_equal(named, other)
            assert row["both_follow"] == 0.0
