"""The evaluation transform of a Hugging Face transformers vision model, as a :class:`~vitroll.preprocess.Preprocessing`
with its crop geometry: read from the model's image processor when one is known (:func:`use_image_processor`), else
the defaults of its ``config.model_type``."""

from __future__ import annotations

import weakref

from torch import nn

from vitroll.preprocess import Preprocessing

HALF = (0.5, 0.5, 0.5)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# PIL's resampling codes, as transformers' processors store them
_FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
# (shortest edge / crop size ratio or None for a squash resize, interpolation, mean, std) per model type
_DEFAULTS: dict[str, tuple[float | None, str, tuple[float, ...], tuple[float, ...]]] = {
    "vit": (None, "bilinear", HALF, HALF),
    "vit_msn": (256 / 224, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "vit_mae": (None, "bilinear", IMAGENET_MEAN, IMAGENET_STD),
    "deit": (256 / 224, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "dinov2": (256 / 224, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "dinov2_with_registers": (256 / 224, "bicubic", IMAGENET_MEAN, IMAGENET_STD),
    "beit": (None, "bicubic", HALF, HALF),
    "data2vec-vision": (None, "bicubic", HALF, HALF),
    "clip_vision_model": (1.0, "bicubic", CLIP_MEAN, CLIP_STD),
    "siglip_vision_model": (None, "bilinear", HALF, HALF),
}
_PROCESSORS: "weakref.WeakKeyDictionary[nn.Module, Preprocessing]" = weakref.WeakKeyDictionary()


def _hw(size: dict, key_pair: tuple[str, str] = ("height", "width")) -> tuple[int, int] | None:
    return (int(size[key_pair[0]]), int(size[key_pair[1]])) if key_pair[0] in size else None


def processor_preprocessing(processor: object) -> Preprocessing:
    """The :class:`Preprocessing` equal to a transformers image processor (ViT, DeiT, BEiT, BiT/DINOv2, CLIP, SigLIP
    style: resize to an exact size or by the shortest edge, centre crop, rescale to [0, 1], normalise).

    Raises ``ValueError`` for a processor whose resize vitroll cannot invert (``longest_edge`` only, no resize)."""
    size = dict(getattr(processor, "size", None) or {})
    crop = dict(getattr(processor, "crop_size", None) or {}) if getattr(processor, "do_center_crop", False) else {}
    resample = getattr(processor, "resample", 2)
    interpolation = _FILTERS[int(getattr(resample, "value", resample))]
    mean = tuple(float(v) for v in processor.image_mean)
    std = tuple(float(v) for v in processor.image_std)
    exact = _hw(size)
    if exact is not None and not crop:
        return Preprocessing(input_size=exact, mean=mean, std=std, crop_pct=1.0, interpolation=interpolation,
                             crop_mode="squash")
    if "shortest_edge" in size and crop:
        crop_hw = _hw(crop)
        return Preprocessing(input_size=crop_hw, mean=mean, std=std, crop_pct=min(crop_hw) / int(size["shortest_edge"]),
                             interpolation=interpolation, crop_mode="center")
    raise ValueError(f"{type(processor).__name__}: size {size} with crop {crop or None} has no vitroll geometry")


def use_image_processor(model: nn.Module, processor: object) -> None:
    """Tell vitroll that ``model`` takes its images through ``processor`` (a transformers image processor): overlays
    and maps then follow that processor's resize and crop. Held for as long as the model lives."""
    _PROCESSORS[model] = processor_preprocessing(processor)


def transformers_preprocessing(model: nn.Module) -> Preprocessing:
    """The preprocessing of ``model``: its registered image processor's (:func:`use_image_processor`), else the
    defaults of its ``config.model_type`` at ``config.image_size`` (ViTImageProcessor's for unknown types)."""
    if model in _PROCESSORS:
        return _PROCESSORS[model]
    config = model.config
    size = config.image_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    ratio, interpolation, mean, std = _DEFAULTS.get(config.model_type, _DEFAULTS["vit"])
    if ratio is None:
        return Preprocessing(input_size=(height, width), mean=mean, std=std, crop_pct=1.0, interpolation=interpolation,
                             crop_mode="squash")
    return Preprocessing(input_size=(height, width), mean=mean, std=std, crop_pct=1 / ratio,
                         interpolation=interpolation, crop_mode="center")
