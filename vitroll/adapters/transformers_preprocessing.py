"""The evaluation transform of a Hugging Face transformers vision model, as a :class:`~vitroll.preprocess.Preprocessing`
with its crop geometry: read from the model's image processor when one is known (:func:`use_image_processor`), else
the defaults of its ``config.model_type``."""

from __future__ import annotations

import weakref

from torch import nn

from vitroll.preprocess import CropMode, Preprocessing

HALF = (0.5, 0.5, 0.5)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# PIL's resampling codes, as transformers' processors store them
_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
# (crop mode, crop_pct, interpolation, mean, std) per model type, as their published checkpoints' processors have them
_DEFAULTS: dict[str, tuple[CropMode, float, str, tuple[float, ...], tuple[float, ...]]] = {
    "vit": ("squash", 1.0, "bilinear", HALF, HALF),
    "vit_msn": ("center", 224 / 256, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "vit_mae": ("squash", 1.0, "bilinear", IMAGENET_MEAN, IMAGENET_STD),
    "deit": ("squash", 224 / 256, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "dinov2": ("center", 224 / 256, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "dinov2_with_registers": ("center", 224 / 256, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "dinov3_vit": ("squash", 1.0, "bilinear", IMAGENET_MEAN, IMAGENET_STD),
    "ijepa": ("center", 224 / 256, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "beit": ("squash", 1.0, "bicubic", HALF, HALF),
    "data2vec-vision": ("squash", 1.0, "bicubic", HALF, HALF),
    "clip_vision_model": ("center", 1.0, "bicubic", CLIP_MEAN, CLIP_STD),
    "metaclip_2_vision_model": ("center", 1.0, "bicubic", CLIP_MEAN, CLIP_STD),
    "aimv2_vision_model": ("center", 1.0, "bicubic", CLIP_MEAN, CLIP_STD),
    "mlcd_vision_model": ("center", 1.0, "bicubic", CLIP_MEAN, CLIP_STD),
    "pixio": ("center", 1.0, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "siglip_vision_model": ("squash", 1.0, "bilinear", HALF, HALF),
}
_PROCESSORS: "weakref.WeakKeyDictionary[nn.Module, Preprocessing]" = weakref.WeakKeyDictionary()


def _size_field(size: object, key: str) -> int | None:
    """``size[key]`` of a processor's size (a dict, or transformers' ``SizeDict``), None when absent."""
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return None if value is None else int(value)


def processor_preprocessing(processor: object) -> Preprocessing:
    """The :class:`Preprocessing` equal to a transformers image processor (ViT, DeiT, BEiT, BiT/DINOv2, CLIP, SigLIP
    style, PIL or torchvision backend): resize to an exact (H, W) or the shortest edge to S, centre crop (margins
    floored, as both backends do), rescale to [0, 1], normalise.

    Raises ``ValueError`` for a resize vitroll cannot invert (``longest_edge``, a crop of another aspect ratio).
    """
    size = getattr(processor, "size", None) or {}
    crop = getattr(processor, "crop_size", None) if getattr(processor, "do_center_crop", False) else None
    resample = getattr(processor, "resample", 2)
    common = dict(mean=tuple(float(v) for v in processor.image_mean), std=tuple(float(v) for v in processor.image_std),
                  interpolation=_FILTERS[int(getattr(resample, "value", resample))], crop_rounding="floor")
    exact = (_size_field(size, "height"), _size_field(size, "width"))
    shortest = _size_field(size, "shortest_edge")
    crop_hw = (_size_field(crop, "height"), _size_field(crop, "width")) if crop is not None else None
    if None not in exact and crop_hw is None:
        return Preprocessing(input_size=exact, crop_pct=1.0, crop_mode="squash", **common)
    if None not in exact and crop_hw[0] * exact[1] == crop_hw[1] * exact[0]:
        return Preprocessing(input_size=crop_hw, crop_pct=crop_hw[0] / exact[0], crop_mode="squash", **common)
    if shortest is not None and crop_hw is not None and crop_hw[0] == crop_hw[1]:
        return Preprocessing(input_size=crop_hw, crop_pct=crop_hw[0] / shortest, crop_mode="center", **common)
    raise ValueError(f"{type(processor).__name__}: size {size} with crop {crop_hw} has no vitroll geometry")


def use_image_processor(model: nn.Module, processor: object) -> None:
    """Tell vitroll that ``model`` takes its images through ``processor`` (a transformers image processor): overlays
    and maps then follow that processor's resize and crop. Held for as long as the model lives.

    Parameters
    ----------
    model : nn.Module
        A transformers image model; held weakly (the processor's geometry goes with it).
    processor : object
        A transformers image processor (``ViTImageProcessor``, ``CLIPImageProcessor``, …) whose resize and crop
        vitroll reproduces as a :class:`~vitroll.preprocess.Preprocessing`.

    Raises
    ------
    ValueError
        For a resize vitroll cannot invert (``longest_edge``, a crop of another aspect ratio).
    """
    _PROCESSORS[model] = processor_preprocessing(processor)


def image_config(model: nn.Module) -> object:
    """The configuration of the model's image tower: ``config.vision_config`` of a classifier built on an image–text
    model's vision tower (``CLIPForImageClassification``, ``SiglipForImageClassification``), ``config.encoder`` of a
    captioner (``VisionEncoderDecoderModel``), else ``config``."""
    if model.config.model_type == "vision-encoder-decoder":
        return model.config.encoder
    return getattr(model.config, "vision_config", None) or model.config


def transformers_preprocessing(model: nn.Module) -> Preprocessing:
    """The preprocessing of ``model``: its registered image processor's (:func:`use_image_processor`), else the
    defaults of its ``config.model_type`` at ``config.image_size`` (ViTImageProcessor's for unknown types)."""
    if model in _PROCESSORS:
        return _PROCESSORS[model]
    config = image_config(model)
    size = config.image_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    crop_mode, crop_pct, interpolation, mean, std = _DEFAULTS.get(config.model_type, _DEFAULTS["vit"])
    return Preprocessing(input_size=(height, width), mean=mean, std=std, crop_pct=crop_pct, interpolation=interpolation,
                         crop_mode=crop_mode, crop_rounding="floor")
