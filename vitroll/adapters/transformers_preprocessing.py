"""The evaluation transform of a Hugging Face transformers vision model, as a :class:`~vitroll.preprocess.Preprocessing`
with its crop geometry."""

from __future__ import annotations

from torch import nn

from vitroll.preprocess import Preprocessing

HALF = (0.5, 0.5, 0.5)


def transformers_preprocessing(model: nn.Module) -> Preprocessing:
    """``ViTImageProcessor``'s defaults at the model's ``config.image_size``: both sides resized to it (bilinear),
    rescaled to [0, 1], normalised with mean and std 0.5."""
    size = model.config.image_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return Preprocessing(input_size=(height, width), mean=HALF, std=HALF, crop_pct=1.0, interpolation="bilinear",
                         crop_mode="squash")
