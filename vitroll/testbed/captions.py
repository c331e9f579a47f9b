"""Captions of the two-shape images of :mod:`vitroll.testbed.shape_pairs`: the captioning testbed's text.

A caption names both shapes in reading order — the one in the left (or top) half first — and how they lie:
"a disk left of a square" when the middle column separates the two shapes, "a triangle above a cross" when only
the middle row does (when both do, by chance, the caption says "left of"). Which shape is where comes from the
sample's masks, so the caption is
a function of the sample alone (deterministic per seed and index). :func:`shape_word_positions` says which word of
a caption names which of the sample's two masks, so a per-word map can be scored against the right shape.

Spatial words make flips and quarter turns change the caption: train on these captions without
:func:`vitroll.testbed.training.augment` (fresh images every step instead).
"""

from __future__ import annotations

import numpy as np

from vitroll.testbed.shape_pairs import PairSample
from vitroll.testbed.shapes import CLASSES

RELATIONS = {"horizontal": "left of", "vertical": "above"}
"""How the first-named shape lies relative to the second, by the direction the two halves are side by side in."""

TEMPLATE = "a {first} {relation} a {second}"

CAPTION_WORDS = ("a", "left", "of", "above", *CLASSES)
"""Every word of every caption."""


def _split_along(masks: np.ndarray, axis: int) -> tuple[int, int] | None:
    """``(first, second)`` when one mask lies wholly before the middle of ``axis`` (0: rows, 1: columns) and the
    other wholly after it; else ``None``."""
    middle = masks.shape[1 + axis] / 2
    extents = [np.nonzero(mask.any(axis=1 - axis))[0] for mask in masks]
    for first, second in ((0, 1), (1, 0)):
        if extents[first].max() < middle <= extents[second].min():
            return first, second
    return None


def layout(sample: PairSample) -> tuple[str, tuple[int, int]]:
    """``("horizontal" | "vertical", (first, second))``: how the two shapes lie and which target (index into
    ``sample.masks``) comes first in reading order (left, or top), from the masks: "horizontal" when the middle
    column separates them (also when, by chance, the middle row does too), else "vertical" (the middle row does)."""
    order = _split_along(sample.masks, 1)
    if order is not None:
        return "horizontal", order
    order = _split_along(sample.masks, 0)
    if order is None:
        raise ValueError("neither the middle column nor the middle row separates the two shapes")
    return "vertical", order


def caption_for(sample: PairSample) -> str:
    """The caption of ``sample``: its left (top) shape, the relation, its right (bottom) shape."""
    direction, (first, second) = layout(sample)
    return TEMPLATE.format(first=CLASSES[sample.labels[first]], relation=RELATIONS[direction],
                           second=CLASSES[sample.labels[second]])


def shape_word_positions(caption: str) -> dict[int, int]:
    """``{word index: rank}`` of the caption's shape words: rank 0 for the shape named first (left / top), 1 for the
    second (right / bottom). Word indices count whitespace-separated words from 0 (one token each, after the
    decoder's start token). Combine with :func:`target_order` to get the mask each word names."""
    shape_words = [index for index, word in enumerate(caption.split()) if word in CLASSES]
    return {index: rank for rank, index in enumerate(shape_words)}


def target_order(sample: PairSample) -> tuple[int, int]:
    """Which target of ``sample.masks`` the caption names first and second."""
    return layout(sample)[1]


def shape_word_targets(sample: PairSample, caption: str | None = None) -> dict[int, int]:
    """``{word index: index into sample.masks}`` for each shape word of ``caption`` (default: the sample's own
    caption): which mask the word's map should point into."""
    order = target_order(sample)
    return {index: order[rank] for index, rank in shape_word_positions(caption or caption_for(sample)).items()}
