"""vitroll — explain transformers, Vision Transformers first: attention rollout and its relatives for timm,
torchvision, transformers and open_clip models — image classifiers, image–text models against each text
(:func:`image_text_maps`), captioners per generated token (:func:`caption_maps`), text models as token scores
(B, L) — and any model family registered with :func:`register_family`.

>>> from vitroll import rollout, overlay                    # doctest: +SKIP
>>> maps = rollout(model, images)                           # (B, h, w) on the model's device
>>> picture = overlay(image_rgb_uint8, maps[0])             # (H, W, 3) RGB uint8
"""

from vitroll._version import __version__
from vitroll.adapters import register_family, use_tokenizer
from vitroll.adapters.image_text import PromptedModel, register_dual_encoder
from vitroll.adapters.transformers_preprocessing import use_image_processor
from vitroll.capture import AttentionReadout, AttentionRecorder, TokenLayout
from vitroll.errors import ImageReadError, ModelLoadError, UnsupportedModelError, VitrollError
from vitroll.io import load_image
from vitroll.io.text import TokenBatch
from vitroll.maps import KeyPatch, key_patches, normalize, to_original, upsample
from vitroll.methods import (
    METHODS, CaptionMaps, attention, caption_maps, center, chefer, flow, grad_rollout, gradient_shap, image_text_maps,
    integrated_gradients, occlusion, random_map, rollout, rollout_matrix,
)
from vitroll.models import class_names, load_model
from vitroll.overlay import colorize, figure, outline_boxes, overlay
from vitroll.preprocess import CropGeometry, Preprocessing

__all__ = [
    "use_image_processor", "image_text_maps", "caption_maps", "CaptionMaps", "PromptedModel",
    "register_dual_encoder", "METHODS", "AttentionReadout", "AttentionRecorder", "CropGeometry", "ImageReadError",
    "KeyPatch", "ModelLoadError", "Preprocessing", "TokenBatch", "TokenLayout", "UnsupportedModelError",
    "VitrollError", "__version__", "attention", "center", "chefer", "class_names", "colorize", "figure", "flow",
    "grad_rollout", "gradient_shap", "integrated_gradients", "key_patches", "load_image", "load_model", "normalize",
    "occlusion", "outline_boxes", "overlay", "random_map", "register_family", "rollout", "rollout_matrix",
    "to_original", "upsample", "use_tokenizer",
]
