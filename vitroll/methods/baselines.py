"""Baselines every comparison table needs: maps that know nothing about the model's attention.

They still run the model once (no attention recorded) so pipelines can report its predictions.
"""

from __future__ import annotations

import torch
from torch import nn

from vitroll.methods.image_batch import Images
from vitroll.methods.base import Saliency, predict
from vitroll.methods.registry import register_method


@register_method("random")
def random_map(model: nn.Module, images: Images, *, seed: int = 0) -> Saliency:
    """Uniform random maps (B, h, w) on the model's device, reproducible for a given ``seed``; image ``b`` gets
    stream ``seed + b``. ``images`` as for every method (:data:`~vitroll.methods.image_batch.Images`)."""
    images, logits, (h, w) = predict(model, images)
    maps = torch.stack([torch.rand(h, w, generator=torch.Generator().manual_seed(int(seed) + b))
                        for b in range(len(images))])
    return Saliency(maps.to(images.device), logits)


@register_method("center")
def center(model: nn.Module, images: Images, *, sigma: float = 0.25) -> Saliency:
    """A Gaussian centred on the patch grid, the same for every image (B, h, w), on the model's device. ``images``
    as for every method (:data:`~vitroll.methods.image_batch.Images`).

    ``sigma`` is the standard deviation as a fraction of each side (photographers centre their subjects;
    a method that does not beat this has found nothing).
    """
    images, logits, (h, w) = predict(model, images)
    rows = (torch.arange(h) + 0.5) / h - 0.5
    cols = (torch.arange(w) + 0.5) / w - 0.5
    gaussian = torch.exp(-(rows[:, None] ** 2 + cols[None, :] ** 2) / (2 * sigma**2))
    return Saliency(gaussian.expand(len(images), h, w).to(images.device), logits)
