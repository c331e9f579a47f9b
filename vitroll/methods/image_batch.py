"""The images a saliency method accepts, and their conversion into one batch for the model.

A method takes a preprocessed batch (B, C, H, W) as it is (C = 3, or 1 for a model whose input convolution takes grey),
or images as users hold them: a PIL image, a path, a uint8 or 16-bit grey array, or a list or tuple of these (sizes
may differ). Those are decoded like image files (:func:`vitroll.io.images.upright_rgb`: EXIF orientation applied, any
mode converted to RGB) and preprocessed with the model's own evaluation transform
(:meth:`vitroll.preprocess.Preprocessing.from_model`: grey for a model that takes one channel), which brings every
image to the model's input size, so they stack into one batch.
"""

from __future__ import annotations

import os
from typing import Union

import numpy as np
import torch
from PIL import Image
from torch import nn

from vitroll.errors import InputTypeError, InputValueError
from vitroll.io import load_image
from vitroll.io.images import upright_rgb
from vitroll.preprocess import Preprocessing
from vitroll.wording import with_article

ImageLike = Union[Image.Image, str, os.PathLike[str], np.ndarray]
"""One image: a PIL image, a path to an image file, a uint8 array (H, W, 3) RGB or (H, W) grey, or a uint16 array
(H, W) grey (stretched to its range, as a 16-bit grey file is); a grey (H, W, 1) is taken as (H, W)."""

Images = Union[torch.Tensor, ImageLike, list[ImageLike], tuple[ImageLike, ...]]
"""What every method takes: a preprocessed tensor (B, C, H, W) (C: the model's input channels, 3 or 1), one
:data:`ImageLike`, or a list or tuple of them."""

ACCEPTED = ("a preprocessed tensor (B, C, H, W), a PIL image, a path (str or os.PathLike), a uint8 array (H, W, 3) "
            "or (H, W), a uint16 array (H, W), or a list or tuple of images, paths and arrays")


def image_batch(model: nn.Module, images: Images) -> torch.Tensor:
    """``images`` as one batch for ``model``.

    Parameters
    ----------
    model : nn.Module
        Supplies the preprocessing (:meth:`Preprocessing.from_model`) for anything that is not a tensor.
    images : Images
        A float tensor is returned as it is (its shape is the caller's to check). Anything else is decoded and
        preprocessed image by image.

    Returns
    -------
    Tensor, shape (B, C, H, W), float32 on the CPU for converted images (B = 1 for a single image); C is 3, or 1
    for a model whose input convolution takes one channel (the images converted to grey).

    Raises
    ------
    TypeError
        For a value of any other type (a dict, a tensor inside a list, …), naming what is accepted.
    ValueError
        For an integer, bool or complex tensor (not preprocessed input), an empty batch, list or tuple, or an array that
        is not uint8 (H, W, 3), (H, W) or uint16 (H, W) (or grey with an axis of 1).
    ImageReadError
        For a path that is missing or not a readable image.
    """
    if isinstance(images, torch.Tensor):
        if not images.is_floating_point():
            raise InputValueError(f"images is a {images.dtype} tensor: a tensor must be the model's preprocessed float "
                                  "input (Preprocessing.from_model(model).batch gives it); pass raw pixels as a uint8 "
                                  "NumPy array (H, W, 3) or a PIL image to have them preprocessed")
        if images.ndim >= 1 and len(images) == 0:
            raise InputValueError(f"images is an empty batch of shape {tuple(images.shape)}: "
                                  "there is nothing to explain")
        return images
    if isinstance(images, (list, tuple)):
        if not images:
            raise InputValueError(f"images is an empty {type(images).__name__}; accepted: {ACCEPTED}")
        decoded = [_decode(image, f"images[{index}]") for index, image in enumerate(images)]
    else:
        decoded = [_decode(images, "images")]
    tensors, _ = Preprocessing.from_model(model).batch(decoded)
    return tensors


def _decode(image: object, label: str) -> Image.Image:
    """One :data:`ImageLike` as an upright RGB PIL image; ``label`` names it in errors."""
    if isinstance(image, Image.Image):
        return upright_rgb(image)
    if isinstance(image, (str, os.PathLike)):
        return load_image(image)
    if isinstance(image, np.ndarray):
        return upright_rgb(Image.fromarray(_pillow_pixels(image, label)))
    raise InputTypeError(f"{label} has type {type(image).__name__}; accepted: {ACCEPTED}")


def _pillow_pixels(array: np.ndarray, label: str) -> np.ndarray:
    """``array`` as pixels Pillow holds as one image: uint8 (H, W, 3) RGB, uint8 (H, W) grey (L) or uint16 (H, W)
    grey (I;16, which :func:`~vitroll.io.images.upright_rgb` stretches to its range as a 16-bit grey file is); a
    grey (H, W, 1) loses its channel axis. Anything else is refused, naming what to do.
    """
    if array.dtype.kind == "u" and array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    bits = 8 * array.dtype.itemsize if array.dtype.kind == "u" else None
    channels = array.shape[-1] if array.ndim == 3 else None
    if (bits in (8, 16) and array.ndim == 2) or (bits, channels) == (8, 3):
        return array
    if bits == 8 and channels in (2, 4):
        kind, colour = ("grey", "0") if channels == 2 else ("RGB", ":3")
        raise InputValueError(f"{label} is a uint8 array of shape {array.shape}, {kind} with alpha, which vitroll does "
                              f"not guess how to show: Image.fromarray({label}) puts it on white as image files are, "
                              f"{label}[..., {colour}] drops the alpha")
    if bits == 16 and channels == 3:
        raise InputValueError(f"{label} is a uint16 colour array of shape {array.shape}, which vitroll does not guess "
                              f"how to scale: ({label} >> 8).astype(np.uint8) reads it as Pillow reads a 16-bit "
                              f"colour PNG, ({label} / {label}.max() * 255).round().astype(np.uint8) stretches it to "
                              "its maximum")
    advice = _array_advice(array, label)
    raise InputValueError(f"{label} is {with_article(str(array.dtype))} array of shape {array.shape}, not a uint8 "
                          f"image (H, W, 3) or a uint8 or uint16 grey image (H, W); accepted: {ACCEPTED}"
                          f"{f'; {advice}' if advice else ''}")


def _array_advice(array: np.ndarray, label: str) -> str:
    """The conversion that makes ``array`` images a method takes, for the arrays ML code holds (floats in [0, 1],
    channels first, a stacked batch), or "" when no one conversion fits."""
    if array.ndim == 4 and array.dtype == np.uint8 and array.shape[-1] in (1, 3):
        return f"list({label}) passes a stacked batch as its images"
    if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[2] not in (1, 3, 4):
        return f"{label}.transpose(1, 2, 0) puts the channels last"
    if array.dtype.kind == "f" and (array.ndim == 2 or (array.ndim == 3 and array.shape[2] == 3)):
        return f"({label} * 255).round().astype(np.uint8) converts values in [0, 1]"
    return ""
