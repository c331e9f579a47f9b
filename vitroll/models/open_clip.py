"""open_clip models by architecture (``open_clip:ViT-B-32``), random weights unless a checkpoint gives them."""

from __future__ import annotations

import difflib

from torch import nn

from vitroll.adapters.open_clip import DEFAULT_VOCAB_SIZE, NO_TOKEN_ATTENTION, RESNET_REFUSAL
from vitroll.adapters.tokenizers import use_tokenizer
from vitroll.capture.families import refusal_of_module
from vitroll.errors import ModelLoadError, UnsupportedModelError
from vitroll.models import hub
from vitroll.models.timm import unexplained_module
from vitroll.wording import argument

OPEN_CLIP_PREFIX = "open_clip:"


def check_open_clip_name(name: str, *, pretrained: bool) -> None:
    """Refuse ``open_clip:ARCH`` before anything is built or read: open_clip missing, pretrained tags (a download),
    an unknown architecture, or a vision tower vitroll cannot explain (a ResNet; a timm trunk of no family: ConvNeXt,
    Swin), decided from the architecture's config.

    Raises
    ------
    ModelLoadError
        For the first three.
    UnsupportedModelError
        For the tower, in one line saying why.
    """
    architecture = name.removeprefix(OPEN_CLIP_PREFIX)
    try:
        import open_clip
    except ImportError:
        raise ModelLoadError(f'{name}: open_clip is not installed; pip install "vitroll[clip]"') from None
    if pretrained:
        raise ModelLoadError(f"{name}: open_clip's pretrained weights are downloaded by tag; pass the weights as "
                             f"{argument('checkpoint', placeholder='FILE')} (open_clip_model.safetensors)")
    if architecture not in open_clip.list_models():
        close = difflib.get_close_matches(architecture, open_clip.list_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ModelLoadError(f"unknown open_clip model {architecture!r}{hint}")
    vision = open_clip.get_model_config(architecture)["vision_cfg"]
    if isinstance(vision.get("layers"), (list, tuple)):
        raise UnsupportedModelError(f"{name}: {RESNET_REFUSAL}")
    trunk = vision.get("timm_model_name")
    module_name = unexplained_module(trunk) if trunk else None
    if module_name is not None:
        reason = refusal_of_module(module_name) or f"it {NO_TOKEN_ATTENTION}"
        raise UnsupportedModelError(f"{name}: its vision tower is timm's {trunk} ({module_name}): {reason}")


def build_open_clip(name: str) -> nn.Module:
    """``open_clip.create_model(ARCH)`` for ``open_clip:ARCH`` (random weights; ``--checkpoint`` gives them), after
    :func:`check_open_clip_name`."""
    import open_clip

    architecture = name.removeprefix(OPEN_CLIP_PREFIX)
    model = open_clip.create_model(architecture, pretrained=None)
    _use_cached_tokenizer(model, architecture)
    return model


def _use_cached_tokenizer(model: nn.Module, architecture: str) -> None:
    """Attach ``open_clip.get_tokenizer(architecture)`` to a model whose vocabulary is not open_clip's default BPE
    (SigLIP's, from the Hugging Face hub), when it is in the local cache: ``--text`` then tokenises with it. Without
    it, strings are refused in one line that says how to get it (the default BPE needs nothing attached)."""
    import open_clip

    if getattr(model, "text", model).vocab_size == DEFAULT_VOCAB_SIZE:
        return
    try:
        with hub.cache_only(True):
            tokenizer = open_clip.get_tokenizer(architecture)
    except (OSError, ValueError, ImportError):
        return
    use_tokenizer(model, tokenizer)

