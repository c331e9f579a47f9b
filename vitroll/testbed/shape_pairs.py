"""Images with two target shapes and a text naming one of them: the image–text testbed.

An image holds two large shapes of different classes, one in each half (left/right or top/bottom, at random),
on the textured background of :mod:`vitroll.testbed.shapes`. A prompt names one of the two, so the right map for
that text covers the named shape's mask and not the other's — which a text-agnostic method (plain rollout) can only
get right by chance. Every image is drawn from ``numpy.random.default_rng([seed, index])``, as in ``shapes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from vitroll.testbed.shapes import CLASSES, background, draw_shape, shape_colour

PROMPTS = ("a {}", "the {}", "a photo of a {}", "a picture of the {}")
"""Templates of the text naming a shape."""

REACH = 0.6
"""How far a shape of size ``side`` reaches from its centre, as a multiple of ``side``, at any rotation it is drawn
with (a square turned by 0.4 rad reaches furthest): kept inside its half of the image."""

WORDS = ("a", "the", "photo", "picture", "of", *CLASSES)
"""Every word of every prompt."""


@dataclass(frozen=True)
class PairsConfig:
    """How the images of a split look."""

    image_size: int = 64
    target_size: tuple[int, int] = (16, 24)
    """Range of each target's size, in pixels (the side of its unrotated bounding box)."""
    clutter: float = 1.0
    """Texture noise of the background, as in :class:`vitroll.testbed.shapes.ShapesConfig`."""


@dataclass(frozen=True)
class PairSample:
    image: np.ndarray
    """(S, S, 3) uint8 RGB."""
    masks: np.ndarray
    """(2, S, S) bool: each target's pixels."""
    labels: tuple[int, int]
    """The two targets' classes (different)."""
    named: int
    """Which of the two targets (0 or 1) the prompt names."""
    template: int
    """Which of :data:`PROMPTS` the prompt fills in."""

    @property
    def prompt(self) -> str:
        """The text naming the named target."""
        return prompt_for(self.labels[self.named], self.template)

    @property
    def other_prompt(self) -> str:
        """The same template naming the other target: its map should cover the other shape."""
        return prompt_for(self.labels[1 - self.named], self.template)

    @property
    def named_mask(self) -> np.ndarray:
        """(S, S) bool: the pixels of the shape the prompt names."""
        return self.masks[self.named]


def prompt_for(label: int, template: int = 0) -> str:
    """The text naming class ``label`` with ``PROMPTS[template]``."""
    return PROMPTS[template].format(CLASSES[label])


def sample(seed: int, index: int, config: PairsConfig = PairsConfig()) -> PairSample:
    """Image ``index`` of split ``seed``."""
    rng = np.random.default_rng([seed, index])
    size = config.image_size
    labels = tuple(int(c) for c in rng.choice(len(CLASSES), size=2, replace=False))
    canvas = background(rng, size, config.clutter)
    vertical_split = bool(rng.integers(2))
    masks = np.zeros((2, size, size), dtype=bool)
    half = size / 2
    for which, label in enumerate(labels):
        side = rng.uniform(*config.target_size)
        margin = REACH * side + 1
        along = rng.uniform(margin, size - margin)
        across = rng.uniform(margin, half - margin) + which * half
        center = (along, across) if vertical_split else (across, along)
        mask_canvas = np.zeros((size, size), dtype=np.float64)
        draw_shape(mask_canvas, label, center, side, rng.uniform(-0.4, 0.4), 1.0)
        canvas = canvas * (1 - mask_canvas[..., None]) + shape_colour(rng) * mask_canvas[..., None]
        masks[which] = mask_canvas >= 0.5
    named = int(rng.integers(2))
    template = int(rng.integers(len(PROMPTS)))
    image = np.clip(canvas * 255 + 0.5, 0, 255).astype(np.uint8)
    return PairSample(image=image, masks=masks, labels=labels, named=named, template=template)


def samples(seed: int, count: int, config: PairsConfig = PairsConfig(), start: int = 0) -> Iterator[PairSample]:
    """Images ``start … start+count−1`` of split ``seed``."""
    for index in range(start, start + count):
        yield sample(seed, index, config)
