"""Measure image–text methods on the two-shape testbed: does the map follow the text?

Every image of :mod:`vitroll.testbed.shape_pairs` holds two shapes and a prompt naming one. Per image and method,
the maps for that prompt and for the same template naming the other shape are scored:

- ``pointing_game``: the named prompt's map peaks on the named shape;
- ``named_over_other``: the named prompt's map peaks higher on the named shape than on the other
  (:func:`~vitroll.metrics.peak_preference`): the pointing game between the two shapes, where a peak on the
  background counts for neither; a text-agnostic method scores 0.5 on average, the named shape being drawn at random;
- ``energy_in_mask``: the share of the named prompt's map on the named shape;
- ``both_follow``: each of the two prompts' maps peaks on its own shape — a text-agnostic method, whose two maps
  are one, cannot score here.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from PIL import Image
from torch import nn

from vitroll.maps import to_original
from vitroll.methods import check_shared_options, method_named
from vitroll.methods.image_text import image_text_maps
from vitroll.metrics import energy_in_mask, peak_preference, pointing_game
from vitroll.preprocess import Preprocessing
from vitroll.testbed.shape_pairs import PairSample, samples

PAIR_METRICS = {
    "pointing_game": "pointing game on the named shape ↑",
    "named_over_other": "peak on the named shape, not the other ↑",
    "energy_in_mask": "energy on the named shape ↑",
    "both_follow": "both prompts on their own shapes ↑",
}
"""Per-image metric columns and their table headings."""


def pair_images(count: int, seed: int = 3) -> list[PairSample]:
    """``count`` testbed images of split ``seed`` (3: the shipped model's held-out test split)."""
    return list(samples(seed, count))


def evaluate_pairs(model: nn.Module, images: Sequence[PairSample], methods: Sequence[str], *,
                   method_options: Optional[Mapping[str, object]] = None, tokenizer: Optional[object] = None,
                   preprocessing: Optional[Preprocessing] = None, batch_size: int = 16) -> list[dict[str, Any]]:
    """One row per image and method with the :data:`PAIR_METRICS` (see the module docstring).

    Parameters
    ----------
    model : nn.Module
        An image–text model (:func:`vitroll.image_text_maps` explains it).
    images : sequence of PairSample
    methods : sequence of str
        Method names, each run through :func:`vitroll.image_text_maps`.
    method_options : mapping, optional
        Options for several methods at once: each method gets those it takes (an option none takes is an error).
    tokenizer : optional
        For the prompts; default: the model's own.
    """
    runs = {name: method_named(name) for name in methods}
    shared = check_shared_options(runs.values(), method_options or {})
    preprocessing = preprocessing or Preprocessing.from_model(model)
    rows = []
    for start in range(0, len(images), batch_size):
        chunk = images[start:start + batch_size]
        tensor, geometries = preprocessing.batch([Image.fromarray(item.image) for item in chunk])
        texts = sorted({text for item in chunk for text in (item.prompt, item.other_prompt)})
        column = {text: t for t, text in enumerate(texts)}
        for method in runs:  # a method named twice runs once
            maps = image_text_maps(model, tensor, texts, tokenizer=tokenizer, method=method,
                                   **runs[method].among(shared)).float().cpu().numpy()
            for i, (item, geometry) in enumerate(zip(chunk, geometries)):
                named = to_original(maps[i, column[item.prompt]], geometry)
                other = to_original(maps[i, column[item.other_prompt]], geometry)
                named_hit = bool(pointing_game(named, item.named_mask)[0])
                rows.append(dict(
                    image=start + i, method=method, prompt=item.prompt,
                    pointing_game=float(named_hit),
                    named_over_other=float(peak_preference(named, item.named_mask, item.masks[1 - item.named])[0]),
                    energy_in_mask=float(energy_in_mask(named, item.named_mask)[0]),
                    both_follow=float(named_hit and pointing_game(other, item.masks[1 - item.named])[0]),
                ))
    return rows
