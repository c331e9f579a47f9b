"""The image–text testbed's images: two shapes of different classes, one per half, and a prompt naming one."""

import numpy as np
import pytest

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
