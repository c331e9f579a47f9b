"""Synthetic images with a known answer: one target shape decides the class, among distractors and noise.

Every image is drawn from its own random stream ``numpy.random.default_rng([seed, index])``, so a split is a
seed and any image of it can be regenerated alone. The target is one large shape (its class), the
distractors are small shapes of every kind, and all of them share the same colour distribution, so the
model has to find the large shape and read its outline. The mask is the target's own pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import cv2
import numpy as np

CLASSES = ("square", "disk", "triangle", "cross")
"""Class index → name of the target shape."""


@dataclass(frozen=True)
class ShapesConfig:
    """How the images of a split look.

    ``clutter`` in [0, 1] scales the number of distractors and the texture noise together, so training can
    start on clean images and add clutter once the model finds the shapes.
    """

    image_size: int = 64
    target_size: tuple[int, int] = (20, 30)
    """Range of the target's bounding-box side, in pixels."""
    distractor_size: tuple[int, int] = (5, 9)
    max_distractors: int = 5
    clutter: float = 1.0


@dataclass(frozen=True)
class ShapeSample:
    image: np.ndarray
    """(S, S, 3) uint8 RGB."""
    mask: np.ndarray
    """(S, S) bool: the target's pixels."""
    label: int
    box: tuple[int, int, int, int]
    """Target bounding box (top, left, bottom, right), bottom/right exclusive."""


def draw_shape(canvas: np.ndarray, shape: int, center: tuple[float, float], size: float, angle: float, color) -> None:
    """Draw ``CLASSES[shape]`` filled, ``size`` = side of its bounding box, rotated by ``angle`` radians."""
    cy, cx = center
    half = size / 2
    if CLASSES[shape] == "disk":
        cv2.circle(canvas, (round(cx * 16), round(cy * 16)), round(half * 16), color, -1, cv2.LINE_AA, shift=4)
        return
    if CLASSES[shape] == "square":
        corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=float) * half * 0.85
    elif CLASSES[shape] == "triangle":
        corners = np.array([[0, -1], [0.866, 0.5], [-0.866, 0.5]], dtype=float) * half * 1.1
    else:
        arm = 0.32
        corners = np.array(
            [[-arm, -1], [arm, -1], [arm, -arm], [1, -arm], [1, arm], [arm, arm], [arm, 1], [-arm, 1],
             [-arm, arm], [-1, arm], [-1, -arm], [-arm, -arm]], dtype=float
        ) * half
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    points = corners @ rotation.T + [cx, cy]
    cv2.fillPoly(canvas, [np.round(points * 16).astype(np.int32)], color, cv2.LINE_AA, shift=4)


def background(rng: np.random.Generator, size: int, clutter: float) -> np.ndarray:
    """A dim (size, size, 3) float canvas in [0, 1], with coarse and fine texture noise scaled by ``clutter``."""
    base = rng.uniform(0.15, 0.45, size=3)
    coarse = rng.normal(0, 1, size=(size // 8, size // 8, 3))
    texture = cv2.resize(coarse, (size, size), interpolation=cv2.INTER_CUBIC)
    fine = rng.normal(0, 1, size=(size, size, 3))
    return base + clutter * (0.06 * texture + 0.04 * fine)


def shape_colour(rng: np.random.Generator) -> np.ndarray:
    """A bright RGB colour (3,) in [0.55, 1]: every shape, target or distractor, draws from the same range."""
    return rng.uniform(0.55, 1.0, size=3)


def sample(seed: int, index: int, config: ShapesConfig = ShapesConfig()) -> ShapeSample:
    """Image ``index`` of split ``seed``."""
    rng = np.random.default_rng([seed, index])
    size = config.image_size
    label = int(rng.integers(len(CLASSES)))
    canvas = background(rng, size, config.clutter)

    target_side = rng.uniform(*config.target_size)
    margin = target_side / 2 + 1
    center = (rng.uniform(margin, size - margin), rng.uniform(margin, size - margin))
    angle = rng.uniform(-0.4, 0.4)

    distractors = rng.integers(0, config.max_distractors + 1) if config.clutter > 0 else 0
    distractors = int(round(distractors * config.clutter))
    for _ in range(distractors):
        side = rng.uniform(*config.distractor_size)
        where = rng.uniform(side / 2, size - side / 2, size=2)
        # keep distractors off the target so its mask stays its own
        if np.hypot(*(where - center)) < (target_side + side) / 2 + 2:
            continue
        draw_shape(canvas, int(rng.integers(len(CLASSES))), tuple(where), side, rng.uniform(0, np.pi),
                   tuple(shape_colour(rng)))

    mask_canvas = np.zeros((size, size), dtype=np.float64)
    draw_shape(mask_canvas, label, center, target_side, angle, 1.0)
    colour = shape_colour(rng)
    canvas = canvas * (1 - mask_canvas[..., None]) + colour * mask_canvas[..., None]
    image = np.clip(canvas * 255 + 0.5, 0, 255).astype(np.uint8)
    mask = mask_canvas >= 0.5
    rows, cols = np.nonzero(mask)
    box = (int(rows.min()), int(cols.min()), int(rows.max()) + 1, int(cols.max()) + 1)
    return ShapeSample(image=image, mask=mask, label=label, box=box)


def samples(seed: int, count: int, config: ShapesConfig = ShapesConfig(), start: int = 0) -> Iterator[ShapeSample]:
    """Images ``start … start+count−1`` of split ``seed``."""
    for index in range(start, start + count):
        yield sample(seed, index, config)


def arrays(seed: int, count: int, config: ShapesConfig = ShapesConfig(), start: int = 0):
    """Stacked split: images (n, S, S, 3) uint8, masks (n, S, S) bool, labels (n,) int64."""
    drawn = list(samples(seed, count, config, start))
    return (
        np.stack([s.image for s in drawn]),
        np.stack([s.mask for s in drawn]),
        np.array([s.label for s in drawn], dtype=np.int64),
    )
