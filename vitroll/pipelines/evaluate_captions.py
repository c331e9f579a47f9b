"""Measure caption maps on the two-shape testbed: does each shape word's map point at the shape it names?

Every image of :mod:`vitroll.testbed.shape_pairs` holds two shapes; its caption (:mod:`vitroll.testbed.captions`)
names both in reading order, "a disk left of a square". The captioner reads that caption teacher-forced (so every
image is scored on the same words, whatever it would generate), and per image and method the maps of its two shape
words are scored:

- ``pointing_game``: the share of the two shape words whose map peaks on the shape the word names;
- ``named_over_other``: the share of the two shape words whose map peaks higher on the shape the word names than
  on the other shape (:func:`~vitroll.metrics.peak_preference`; a peak on the background counts for neither; a
  word-blind map scores 0.5);
- ``energy_in_mask``: the mean share of a shape word's map on its shape;
- ``both_follow``: both shape words' maps peak on their own shapes.

``random`` draws a uniform random grid per image and token: the chance level.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch
from PIL import Image
from torch import nn

from vitroll.errors import InputValueError, MethodOptionError, OptionValueError
from vitroll.maps import to_original
from vitroll.methods.base import model_device
from vitroll.methods.caption import CAPTION_METHODS, caption_maps, captioner_of
from vitroll.metrics import energy_in_mask, peak_preference, pointing_game
from vitroll.preprocess import Preprocessing
from vitroll.testbed.captions import caption_for, shape_word_targets
from vitroll.testbed.shape_pairs import PairSample
from vitroll.wording import method_option

CAPTION_METRICS = {
    "pointing_game": "pointing game: shape word on its shape ↑",
    "named_over_other": "shape word's peak on its shape, not the other ↑",
    "energy_in_mask": "energy on the named shape ↑",
    "both_follow": "both shape words on their own shapes ↑",
}
"""Per-image metric columns and their table headings."""

BASELINE = "random"

CAPTION_OPTIONS = {"head_fusion": "rollout", "attention_weight": "rollout", "window": "occlusion"}
"""The options of :func:`~vitroll.methods.caption.caption_maps` that the captioning testbed passes on, each to the one
caption method that takes it."""


def check_caption_options(method_options: Mapping[str, object]) -> None:
    """Refuse an option the caption methods do not take (``discard_ratio``, ``start_layer``…), which the captioning
    testbed dropped in silence: ``vitroll evaluate --testbed-kind captions --discard-ratio 0.9`` scored the maps of
    discard ratio 0 without a word.

    Raises
    ------
    MethodOptionError
        Naming the first such option as the user gave it, and those the caption methods take.
    """
    refused = [name for name in method_options if name not in CAPTION_OPTIONS]
    if refused:
        taken = ", ".join(f"{method_option(name)} ({method}'s)" for name, method in CAPTION_OPTIONS.items())
        raise MethodOptionError(f"the caption methods take {taken}; not "
                                f"{method_option(refused[0], method_options[refused[0]])}")


def caption_ids(tokenizer: Any, captions: Sequence[str], end: int, pad: int) -> torch.Tensor:
    """(B, K) the captions' tokens, one per word (checked), each followed by the end token and padded."""
    encoded = tokenizer(list(captions), add_special_tokens=False)["input_ids"]
    for caption, ids in zip(captions, encoded):
        if len(ids) != len(caption.split()):
            raise InputValueError(f"the tokenizer splits {caption!r} into {len(ids)} tokens, not one per word")
    width = max(len(ids) for ids in encoded) + 1
    return torch.tensor([ids + [end] + [pad] * (width - len(ids) - 1) for ids in encoded])


def evaluate_captions(model: nn.Module, tokenizer: Any, images: Sequence[PairSample], methods: Sequence[str], *,
                      preprocessing: Optional[Preprocessing] = None, batch_size: int = 16,
                      seed: int = 0, method_options: Optional[Mapping[str, object]] = None) -> list[dict[str, Any]]:
    """One row per image and method with the :data:`CAPTION_METRICS` (see the module docstring).

    Parameters
    ----------
    model : nn.Module
        A captioner whose tokenizer has one token per caption word (``vitroll-caption-shapes``).
    methods : sequence of str
        Among :data:`~vitroll.methods.caption.CAPTION_METHODS` and ``"random"``.
    seed : int
        Of the random baseline's maps.
    method_options : mapping, optional
        Options for several methods at once, among :data:`CAPTION_OPTIONS`: each goes to the method that takes it
        (``window`` to ``occlusion``).

    Raises
    ------
    MethodOptionError
        For an option none of the caption methods takes (:func:`check_caption_options`).
    """
    unknown = [name for name in methods if name not in (*CAPTION_METHODS, BASELINE)]
    if unknown:
        raise OptionValueError(f"caption maps come from {', '.join(CAPTION_METHODS)} (and the {BASELINE} baseline); "
                               f"not {', '.join(unknown)}")
    options = dict(method_options or {})
    check_caption_options(options)
    captioner = captioner_of(model)
    _start, end, pad = captioner.special_ids(model)
    preprocessing = preprocessing or Preprocessing.from_model(model)
    rows = []
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size]
        tensor, geometries = preprocessing.batch([Image.fromarray(item.image) for item in chunk])
        tensor = tensor.to(model_device(model))
        captions = [caption_for(item) for item in chunk]
        ids = caption_ids(tokenizer, captions, end, pad)
        grid = captioner.encoder_layout(model, tuple(tensor.shape[-2:])).grid
        for method in dict.fromkeys(methods):  # a method named twice runs once
            if method == BASELINE:
                maps = np.random.default_rng([seed, start]).random((len(chunk), ids.shape[1], *grid))
            else:
                taken = {name: value for name, value in options.items() if CAPTION_OPTIONS[name] == method}
                maps = caption_maps(model, tensor, method=method, caption_ids=ids, **taken).maps.float().cpu().numpy()
            for i, (item, geometry, caption) in enumerate(zip(chunk, geometries, captions)):
                scored = [(to_original(maps[i, word], geometry), item.masks[target], item.masks[1 - target])
                          for word, target in shape_word_targets(item, caption).items()]
                hits = [bool(pointing_game(saliency, mask)[0]) for saliency, mask, _ in scored]
                rows.append(dict(
                    image=start + i, method=method, caption=caption,
                    pointing_game=float(np.mean(hits)),
                    named_over_other=float(np.mean([peak_preference(saliency, mask, other)[0]
                                                    for saliency, mask, other in scored])),
                    energy_in_mask=float(np.mean([energy_in_mask(saliency, mask)[0] for saliency, mask, _ in scored])),
                    both_follow=float(all(hits)),
                ))
    return rows
