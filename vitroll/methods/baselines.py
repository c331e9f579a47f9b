"""Baselines every comparison table needs: maps that know nothing about the model's attention.

They still run the model once (no attention recorded) so pipelines can report its predictions.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torch import nn

from vitroll.errors import OptionValueError, UnsupportedModelError
from vitroll.io.text import TokenBatch
from vitroll.methods.inputs import Inputs, model_batch
from vitroll.methods.base import Saliency, model_device, predict
from vitroll.methods.registry import register_method
from vitroll.wording import method_option


def input_stream(seed: int, content: torch.Tensor) -> int:
    """A random stream for one input: ``seed`` mixed with a digest of the input's ``content``, so the same input
    draws the same values alone, in any batch and at any position. Pixels are compared at 1/1024 (preprocessing on
    another device rounds differently); token ids exactly."""
    if content.is_floating_point():
        content = (content.float() * 1024).round()
    digest = hashlib.blake2b(content.to(torch.int64).cpu().contiguous().numpy().tobytes(), digest_size=8,
                             key=str(int(seed)).encode())
    return int.from_bytes(digest.digest(), "little") >> 1


@register_method("random", checks_constant_maps=False)  # a baseline: its map means nothing by design
def random_map(model: nn.Module, inputs: Inputs, *, seed: int = 0) -> Saliency:
    """Uniform random maps (B, h, w) on the model's device, reproducible for a given ``seed``: each input's stream
    is drawn from ``seed`` and its content (:func:`input_stream`), so its map does not depend on its batch and two
    different inputs get different maps; the content is read before the cast to the model's dtype, so a float16 or
    bfloat16 copy of the model draws the same map for the same image. For a text model, random token scores (B, L)
    from the real tokens' ids, padded positions 0. ``inputs`` as for every method
    (:data:`~vitroll.methods.inputs.Inputs`).

    Parameters
    ----------
    seed : int
        Seed mixed with each input's content.
    """
    given = model_batch(model, inputs)  # float32 pixels (of anything but a tensor), whatever the model's dtype
    batch, logits, layout = predict(model, given)
    explained = layout.num_tokens - layout.num_prefix_tokens
    contents = ([ids[real.bool()] for ids, real in zip(batch.input_ids, batch.real)]
                if isinstance(batch, TokenBatch) else list(given))
    values = torch.stack([torch.rand(explained, generator=torch.Generator().manual_seed(input_stream(seed, content)))
                          for content in contents])
    values = F.pad(values, (layout.num_prefix_tokens, 0))  # the prefix tokens, which the layout drops
    return Saliency(layout.patch_values(values.to(model_device(model))), logits)


@register_method("center", checks_constant_maps=False)
def center(model: nn.Module, inputs: Inputs, *, sigma: float = 0.25) -> Saliency:
    """A Gaussian centred on the image, over its patch grid, the same for every image (B, h, w), on the model's
    device. ``inputs`` as for every method (:data:`~vitroll.methods.inputs.Inputs`).

    Photographers centre their subjects: a method that does not beat this has found nothing.

    Parameters
    ----------
    sigma : float > 0
        Standard deviation of the Gaussian as a fraction of each side of the grid.

    Returns
    -------
    Tensor, shape (B, h, w), float32, on the model's device
    """
    if not sigma > 0:
        raise OptionValueError(f"{method_option('sigma')} must be > 0 (a fraction of the grid's side); got {sigma}")
    batch, logits, layout = predict(model, inputs)
    if layout.grid is None:
        raise UnsupportedModelError(f"{type(model).__name__} takes tokens, not images: the center baseline has no "
                                    "centre to put its Gaussian on; use random")
    (h, w), (height, width) = layout.grid, batch.shape[-2:]
    covered_h, covered_w = layout.padded_hw or (height, width)
    # each cell's centre from the image's, as a fraction of its side: a padded grid's centre is not the image's
    rows = ((torch.arange(h) + 0.5) * covered_h / h - height / 2) / height
    cols = ((torch.arange(w) + 0.5) * covered_w / w - width / 2) / width
    gaussian = torch.exp(-(rows[:, None] ** 2 + cols[None, :] ** 2) / (2 * sigma**2))
    return Saliency(gaussian.expand(len(batch), h, w).to(batch.device), logits)
