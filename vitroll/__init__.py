"""vitroll — explain transformers, Vision Transformers first: attention rollout and its relatives for timm,
torchvision, transformers and open_clip models — image classifiers, image–text models against each text
(:func:`image_text_maps`), captioners per generated token (:func:`caption_maps`), text models as token scores
(B, L) — and any model family registered with :func:`register_family`.

>>> from vitroll import rollout, overlay, Preprocessing     # doctest: +SKIP
>>> maps = rollout(model, images)                           # (B, h, w) on the model's device
>>> geometry = Preprocessing.from_model(model).geometry(image_rgb_uint8.shape[:2])   # where the model's crop lies
>>> picture = overlay(image_rgb_uint8, maps[0], geometry=geometry)                    # (H, W, 3) RGB uint8
"""

from __future__ import annotations

import sys
import types
from typing import Any

from vitroll._version import __version__
from vitroll.lazy import LazyNames
from vitroll.registry import defer

_PUBLIC = {
    "vitroll.adapters": ("register_family", "use_tokenizer"),
    "vitroll.adapters.image_text": ("PromptedModel", "register_dual_encoder"),
    "vitroll.adapters.transformers_preprocessing": ("use_image_processor",),
    "vitroll.capture": ("AttentionReadout", "AttentionRecorder", "TokenLayout"),
    "vitroll.errors": ("ImageReadError", "ModelLoadError", "UnsupportedModelError", "VitrollError"),
    "vitroll.io": ("load_image",),
    "vitroll.io.text": ("TokenBatch",),
    "vitroll.maps": ("KeyPatch", "key_patches", "normalize", "to_original", "upsample"),
    "vitroll.methods": (
        "METHODS", "CaptionMaps", "attention", "caption_maps", "center", "chefer", "flow", "grad_rollout",
        "gradient_shap", "image_text_maps", "integrated_gradients", "occlusion", "random_map", "rollout",
        "rollout_matrix",
    ),
    "vitroll.models": ("class_names", "load_model"),
    "vitroll.overlay": ("colorize", "figure", "outline_boxes", "overlay"),
    "vitroll.preprocess": ("CropGeometry", "Preprocessing"),
}
"""The module of each public name. They are imported on first use (PEP 562), so that ``import vitroll.cli`` and
``vitroll --help`` do not wait for torch, timm and transformers."""

_NAMES = LazyNames(__name__, _PUBLIC, submodules=True)
"""A public name, imported from its module on first use, or a sub-package not imported yet (``vitroll.capture``
after ``import vitroll``). The model families are registered when they are first looked up, however they are
reached (:mod:`vitroll.registry`)."""

__all__ = ["__version__", *_NAMES.all]
__getattr__ = _NAMES.getattr
__dir__ = _NAMES.dir


def _register_built_in_families() -> None:
    # imported here, not above: the adapters import torch and timm, which `import vitroll.cli` must not wait for
    import vitroll.adapters  # noqa: F401  (registers timm's, torchvision's, transformers' and open_clip's families)


defer(_register_built_in_families)


class _Package(types.ModuleType):
    """This package, whose public names stay the functions when a sub-module of the same name is imported
    (``import vitroll.overlay`` binds the module here; ``vitroll.overlay`` is the function)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _NAMES.module_of and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
