"""Model preprocessing with its geometry kept, so maps can be put back on the original image.

:class:`Preprocessing` is an evaluation transform (resize, centre crop, normalise: timm's and torchvision's
conventions) that returns, with every tensor, the :class:`CropGeometry` that says which part of the original image
the model saw. Each model family registers how its models' transform is found (:func:`register_preprocessing`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Callable, Literal

import numpy as np
import torch
from PIL import Image
from torch import nn

from vitroll.capture.families import padded_to_patches, refuse_if_refused, registered_family
from vitroll.errors import InputTypeError, InputValueError, OptionValueError, UnsupportedModelError
from vitroll.io.images import to_rgb
from vitroll.registry import Registry

CropMode = Literal["center", "squash", "border"]
_PIL_INTERPOLATION = {
    "bicubic": Image.Resampling.BICUBIC,
    "bilinear": Image.Resampling.BILINEAR,
    "nearest": Image.Resampling.NEAREST,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}
_FILTER_SUPPORT = {Image.Resampling.NEAREST: 0.5, Image.Resampling.BOX: 0.5, Image.Resampling.BILINEAR: 1.0,
                   Image.Resampling.HAMMING: 1.0, Image.Resampling.BICUBIC: 2.0, Image.Resampling.LANCZOS: 3.0}
"""Half-width of each filter's window in output pixels (Pillow's), widened by the downscaling factor."""


_LUMA = np.asarray([0.299, 0.587, 0.114], dtype=np.float32)
"""ITU-R 601 weights of R, G, B in grey, as PIL's ``convert("L")`` takes them."""

FULL_RESIZE_LIMIT = 64
"""How many times the model input's area a resized copy of an image may have before only its crop is resampled:
an image 48 times as long as it is wide, at 224 pixels (a few MB); a longer strip's copy grows with its length."""

_REGISTERED: Registry[tuple[Callable[[nn.Module], bool], Callable[[nn.Module], "Preprocessing"]]] = Registry()
"""(matches(model), preprocessing(model)) pairs of registered model families, the most recent first (the built-in
ones registered on first read, :mod:`vitroll.registry`)."""


def register_preprocessing(matches: Callable[[nn.Module], bool],
                           preprocessing: Callable[[nn.Module], "Preprocessing"]) -> None:
    """Make :meth:`Preprocessing.from_model` answer ``preprocessing(model)`` for every model that ``matches``."""
    _REGISTERED.insert(0, (matches, preprocessing))


def input_channels(model: nn.Module) -> int | None:
    """The channels the model's input convolution takes (the first ``Conv2d`` of the module its family says the
    images enter, :attr:`~vitroll.capture.ModelFamily.input_embedding`, else of the model: a ViT's patch embedding,
    a hybrid's stem); for a patch embedding without a convolution (NaFlexViT's linear one), its timm ``in_chans``;
    None for a model with neither."""
    family = registered_family(model)
    entry = family.input_embedding(model) if family is not None and family.input_embedding is not None else model
    convolution = next((module for module in entry.modules() if isinstance(module, nn.Conv2d)), None)
    return getattr(entry, "in_chans", None) if convolution is None else convolution.in_channels


@dataclass(frozen=True)
class CropGeometry:
    """Where the model input lies in the original image: resize to ``resized_hw``, then crop at ``crop_top_left``.

    All sizes are (height, width) in pixels. Pixel centres follow PIL's convention: original pixel ``x``
    maps to resized coordinate ``(x + 0.5) · scale − 0.5``.

    Attributes
    ----------
    original_hw : (int, int)
        The image as read, (H, W).
    resized_hw : (int, int)
        The image after the resize, before the crop.
    crop_top_left : (int, int)
        (top, left) of the input in the resized image; negative where the input pads around it (``crop_mode``
        ``"border"``, a ``crop_pct`` above 1).
    input_hw : (int, int)
        The model input, the preprocessed tensor's (H, W).
    padded_hw : (int, int) or None
        The input as the model pads it up to whole patches (below).
    """

    original_hw: tuple[int, int]
    resized_hw: tuple[int, int]
    crop_top_left: tuple[int, int]
    input_hw: tuple[int, int]
    padded_hw: tuple[int, int] | None = None
    """The input as the model pads it up to whole patches, right and bottom (:attr:`Preprocessing.patch_padding`):
    what a map's patch grid covers, the input its first ``input_hw``; None: the grid covers the input itself."""

    @property
    def grid_hw_pixels(self) -> tuple[int, int]:
        """The input pixels (H', W') a map's patch grid cuts into equal cells: :attr:`padded_hw`, else the input."""
        return self.padded_hw or self.input_hw

    @property
    def scale(self) -> tuple[float, float]:
        """(sy, sx): resized pixels per original pixel."""
        return (self.resized_hw[0] / self.original_hw[0], self.resized_hw[1] / self.original_hw[1])

    def original_box(self) -> tuple[float, float, float, float]:
        """The model input's extent in original pixels, (top, left, bottom, right) edge coordinates."""
        (sy, sx), (top, left) = self.scale, self.crop_top_left
        return (top / sy, left / sx, (top + self.input_hw[0]) / sy, (left + self.input_hw[1]) / sx)

    def pixels_per_patch(self, grid_hw: tuple[int, int]) -> float:
        """The fewest original pixels one cell of a (h, w) patch grid covers along a side: below 1 the image was
        enlarged until its patches see parts of one pixel (a 1×1 image on a 224-pixel model: 0.0045)."""
        (sy, sx), (height, width) = self.scale, self.grid_hw_pixels
        return min(height / grid_hw[0] / sy, width / grid_hw[1] / sx)

    def seen_share(self) -> float:
        """The share of the original image's area that lies inside the model input (1.0: all of it; a centre crop
        of a 600×40 strip: 35×35 pixels, 0.05)."""
        top, left, bottom, right = self.original_box()
        height, width = self.original_hw
        seen_h = max(0.0, min(bottom, height) - max(top, 0.0))
        seen_w = max(0.0, min(right, width) - max(left, 0.0))
        return seen_h * seen_w / (height * width)

    def grid_to_original_affine(self, grid_hw: tuple[int, int]) -> np.ndarray:
        """2×3 affine taking original pixel indices (x, y) to map indices (u, v) on a grid of ``grid_hw`` cells.

        Each cell covers ``grid_hw_pixels / grid`` input pixels (the last ones partly padding, where the model pads);
        used with ``cv2.WARP_INVERSE_MAP``.
        """
        rows = []
        for axis, (scale, offset) in enumerate(((self.scale[1], self.crop_top_left[1]),
                                                (self.scale[0], self.crop_top_left[0]))):
            cells_per_pixel = grid_hw[1 - axis] / self.grid_hw_pixels[1 - axis]
            gain = scale * cells_per_pixel
            shift = (0.5 * scale - offset) * cells_per_pixel - 0.5
            row = [0.0, 0.0, shift]
            row[axis] = gain
            rows.append(row)
        return np.array(rows, dtype=np.float64)


@dataclass(frozen=True)
class Preprocessing:
    """timm-style evaluation preprocessing.

    Attributes
    ----------
    input_size : (int, int)
        Model input (H, W).
    mean, std : tuple of float
        Per-channel normalisation.
    crop_pct : float
        The image is resized so that the crop is ``crop_pct`` of the resized image (1.0: no margin).
    interpolation : str
        PIL resampling filter name.
    crop_mode : {"center", "squash", "border"}
        ``center`` keeps the aspect ratio and centre-crops (timm's default); ``squash`` resizes both sides
        independently, so with ``crop_pct=1`` the model sees the whole image (no-crop mode), stretched; ``border``
        (timm's letterbox) fits the longer side and pads the shorter one with the ``mean`` colour, so with
        ``crop_pct=1`` the model sees the whole image at its own aspect ratio (a strip as a thin band).
    crop_rounding : {"round", "floor"}
        How a centre crop's odd margin is split: rounded (timm, torchvision) or floored (transformers' processors).
    channels : {3, 1}
        The model's input channels: 1 converts the picture to grey (PIL's ``L``, ITU-R 601 luma), normalised by the
        luma of ``mean`` and ``std`` when they are given per RGB channel (the value itself when all three are equal).
    patch_padding : (int, int), optional
        The patch (h, w) of a model that pads its input up to whole patches, right and bottom (timm's
        ``dynamic_img_pad``), so that each geometry says which pixels its maps' last patches cover
        (:attr:`CropGeometry.padded_hw`); None: the model's grid covers the input exactly.
    """

    input_size: tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop_pct: float = 0.875
    interpolation: str = "bicubic"
    crop_mode: CropMode = "center"
    crop_rounding: Literal["round", "floor"] = "round"
    channels: Literal[1, 3] = 3
    patch_padding: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        """Refuse settings that would give a division by zero, infinite pixels or a silently different crop."""
        size = tuple(self.input_size)
        if len(size) != 2 or not all(isinstance(side, numbers.Integral) and side >= 1 for side in size):
            raise OptionValueError(f"input_size must be (H, W), two integers ≥ 1; got {self.input_size!r}")
        patch = self.patch_padding
        if patch is not None and (len(tuple(patch)) != 2 or not all(isinstance(side, numbers.Integral) and side >= 1
                                                                    for side in patch)):
            raise OptionValueError(f"patch_padding must be (h, w), two integers ≥ 1, or None; got {patch!r}")
        if not (math.isfinite(self.crop_pct) and self.crop_pct > 0):
            raise OptionValueError(f"crop_pct must be a finite number > 0; got {self.crop_pct!r}")
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, 3) or not all(math.isfinite(v) for v in values):
                raise OptionValueError(f"{name} must be 1 or 3 finite numbers (one per channel); got {values!r}")
        if 0 in self.std:
            raise OptionValueError(f"std must not be 0 (the pixels are divided by it); got {self.std!r}")
        for name, value, allowed in (("crop_mode", self.crop_mode, ("center", "squash", "border")),
                                     ("crop_rounding", self.crop_rounding, ("round", "floor")),
                                     ("channels", self.channels, (1, 3))):
            if value not in allowed:
                raise OptionValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")

    @classmethod
    def from_model(cls, model: nn.Module, **overrides: object) -> "Preprocessing":
        """The model's own preprocessing, the one registered for its family (:func:`register_preprocessing`), in
        grey for a model whose input convolution takes one channel (:func:`input_channels`), with ``overrides`` (None
        values ignored).

        Parameters
        ----------
        model : nn.Module
            A model of a registered family.
        overrides
            Fields of :class:`Preprocessing` to replace (``input_size=(224, 224)``, ``crop_pct=1.0``, …).

        Returns
        -------
        Preprocessing
            What turns a PIL image into the model's input (C, H, W).

        Raises
        ------
        UnsupportedModelError
            For a model of no registered family.
        """
        for matches, preprocessing_of in _REGISTERED:
            if matches(model):
                preprocessing = preprocessing_of(model)
                if input_channels(model) == 1:
                    preprocessing = replace(preprocessing, channels=1)
                return preprocessing.with_overrides(**overrides)
        refuse_if_refused(model)
        raise UnsupportedModelError(f"{type(model).__name__} belongs to no registered model family, so its "
                                    "preprocessing is unknown; see vitroll.register_family")

    def with_overrides(self, **overrides: object) -> "Preprocessing":
        """A copy with the given fields replaced; ``None`` values are ignored."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def geometry(self, original_hw: tuple[int, int]) -> CropGeometry:
        """The resize and crop this preprocessing applies to an image of ``original_hw`` = (H0, W0).

        Parameters
        ----------
        original_hw : (int, int)
            The image's (H0, W0).

        Returns
        -------
        CropGeometry
            Where the model input (``input_size``) lies in the image.

        Raises
        ------
        ValueError
            For an empty image (a side of 0 pixels).
        """
        height, width = original_hw
        if height < 1 or width < 1:
            raise InputValueError(f"an image of {height}×{width} pixels (H×W) is empty: "
                                  "there is nothing to preprocess")
        target_h, target_w = self.input_size
        scale_h, scale_w = (math.floor(s / self.crop_pct) for s in self.input_size)
        if self.crop_mode == "squash":
            resized = (scale_h, scale_w)
        elif self.crop_mode == "border":  # timm ResizeKeepRatio(longest=1): the looser of the two ratios, rounded
            ratio = max(height / scale_h, width / scale_w)
            resized = (max(1, round(height / ratio)), max(1, round(width / ratio)))
        elif scale_h == scale_w:  # torchvision Resize(int): shorter side to scale, longer side truncated
            short, long = sorted((height, width))
            new_long = int(scale_h * long / short)
            resized = (scale_h, new_long) if height <= width else (new_long, scale_h)
        else:  # timm ResizeKeepRatio: the tighter of the two ratios, rounded
            ratio = min(height / scale_h, width / scale_w)
            resized = (round(height / ratio), round(width / ratio))
        split = ((lambda margin: margin // 2) if self.crop_rounding == "floor"
                 else (lambda margin: int(round(margin / 2.0))))

        def offset(margin: int) -> int:
            if margin < 0 and self.crop_mode == "border":  # timm CenterCropOrPad: padded, the odd pixel after
                return -((-margin) // 2)
            return split(margin)

        top, left = offset(resized[0] - target_h), offset(resized[1] - target_w)
        return CropGeometry(original_hw=(height, width), resized_hw=resized, crop_top_left=(top, left),
                            input_hw=(target_h, target_w),
                            padded_hw=padded_to_patches((target_h, target_w), self.patch_padding))

    def normalisation(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, std), float32 arrays of one value per channel of the model's input (or one for all)."""
        values = [np.asarray(self.mean, dtype=np.float32), np.asarray(self.std, dtype=np.float32)]
        if self.channels == 1:
            return tuple(np.asarray([v.item()] if v.size == 1 else [v @ _LUMA], dtype=np.float32) for v in values)
        return tuple(values)

    def __call__(self, image: Image.Image) -> tuple[torch.Tensor, CropGeometry]:
        """Preprocess one PIL image → (tensor (C, H, W) float32, its geometry (of ``image`` as given)); C is
        :attr:`channels`. An image of another mode than RGB (grey, palette, 16-bit, with alpha) is converted as
        :func:`~vitroll.load_image` converts files (alpha on white, 16 bits stretched to their range); EXIF
        orientation is not applied (the geometry is that of the pixels given).

        Parameters
        ----------
        image : PIL.Image.Image
            One picture of any size and mode.

        Returns
        -------
        tensor : torch.Tensor, float32, shape (C, H, W)
            The model input, normalised; (H, W) is ``input_size``.
        geometry : CropGeometry
            Where that input lies in ``image``, to put maps back on it (:func:`~vitroll.to_original`).

        Raises
        ------
        InputTypeError
            For anything but a PIL image, naming the conversions to it.
        """
        if not isinstance(image, Image.Image):
            raise InputTypeError("image must be a PIL image (Image.fromarray(array) wraps a uint8 array, "
                                 f"vitroll.load_image(path) reads a file); got {type(image).__name__}")
        if image.mode != "RGB":  # not to_rgb's copy of every RGB image a method already converted
            image = to_rgb(image)
        geometry = self.geometry((image.height, image.width))
        if self.channels == 1:
            image = image.convert("L")
        cropped = self._resized_crop(image, geometry)
        array = np.asarray(cropped, dtype=np.float32).reshape(*self.input_size, self.channels) / 255.0
        mean, std = self.normalisation()
        array = (array - mean) / std
        return torch.from_numpy(array.transpose(2, 0, 1).copy()), geometry

    def padding(self) -> tuple[int, ...]:
        """The colour (one value per channel, 0…255) of the model input outside the resized image: the ``mean``
        colour for ``border`` (timm's fill: 0 once normalised), black otherwise (torchvision's crop larger than its
        image)."""
        if self.crop_mode != "border":
            return (0,) * self.channels
        mean = self.normalisation()[0]
        return tuple(round(255 * float(value)) for value in np.broadcast_to(mean, (self.channels,)))

    def _resized_crop(self, image: Image.Image, geometry: CropGeometry) -> Image.Image:
        """The model input (``input_size``) of ``image``: resized to ``geometry.resized_hw`` and cropped, areas of the
        crop outside the resized image in the :meth:`padding` colour.

        The whole image is resized, then cropped, as timm and torchvision do, unless the resized copy would exceed
        :data:`FULL_RESIZE_LIMIT` times the crop: then only the crop is resampled, from the original pixels its
        filter reaches, with the same filter positions and weights: the same pixels up to one level of 255 in a few
        (float rounding); with ``box`` and ``nearest``, whose windows end exactly on pixel edges, a few rows or columns
        may take their neighbour's pixels. Resized whole, a 2×40000 strip (a PNG of 1 kB) took 38 s and 5.6 GB.
        """
        resample = _PIL_INTERPOLATION.get(self.interpolation, Image.Resampling.BICUBIC)
        (resized_h, resized_w), (top, left), (input_h, input_w) = (geometry.resized_hw, geometry.crop_top_left,
                                                                   self.input_size)
        if resized_h * resized_w <= FULL_RESIZE_LIMIT * input_h * input_w:
            cropped = Image.new(image.mode, (input_w, input_h), self._pil_padding())
            cropped.paste(image.resize((resized_w, resized_h), resample=resample), (-left, -top))
            return cropped
        support = _FILTER_SUPPORT[resample]
        kept, box = [], []
        for start, stop, original, resized in ((left, left + input_w, image.width, resized_w),
                                               (top, top + input_h, image.height, resized_h)):
            start, stop = max(start, 0), min(stop, resized)  # the crop's part inside the resized image
            per_resized = original / resized
            reach = support * max(per_resized, 1.0) + 1.0  # of an output pixel's filter, in original pixels
            first = max(0, math.floor(start * per_resized - reach))
            last = min(original, math.ceil(stop * per_resized + reach))
            kept.append((first, last, start, stop))
            box += [start * per_resized - first, stop * per_resized - first]
        (x0, x1, left_kept, right_kept), (y0, y1, top_kept, bottom_kept) = kept
        part = image.crop((x0, y0, x1, y1)).resize((right_kept - left_kept, bottom_kept - top_kept), resample=resample,
                                                   box=(box[0], box[2], box[1], box[3]))
        cropped = Image.new(image.mode, (input_w, input_h), self._pil_padding())
        cropped.paste(part, (left_kept - left, top_kept - top))
        return cropped

    def _pil_padding(self) -> "int | tuple[int, ...]":
        padding = self.padding()
        return padding[0] if self.channels == 1 else padding

    def batch(self, images: list[Image.Image]) -> tuple[torch.Tensor, list[CropGeometry]]:
        """Preprocess several images → (tensor (B, C, H, W), geometries).

        Parameters
        ----------
        images : list of PIL.Image.Image
            B pictures, each of any size and mode.

        Returns
        -------
        tensor : torch.Tensor, float32, shape (B, C, H, W)
            The model inputs, stacked in order.
        geometries : list of CropGeometry
            Each image's geometry, in order.
        """
        pairs = [self(image) for image in images]
        return torch.stack([tensor for tensor, _ in pairs]), [geometry for _, geometry in pairs]

