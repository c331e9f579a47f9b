"""open_clip models by architecture (``open_clip:ViT-B-32``), random weights unless a checkpoint gives them."""

from __future__ import annotations

import difflib

from torch import nn

from vitroll.errors import ModelLoadError

OPEN_CLIP_PREFIX = "open_clip:"


def build_open_clip(name: str, *, pretrained: bool) -> nn.Module:
    """``open_clip.create_model(ARCH)`` for ``open_clip:ARCH`` (random weights; ``--checkpoint`` gives them)."""
    architecture = name.removeprefix(OPEN_CLIP_PREFIX)
    try:
        import open_clip
    except ImportError:
        raise ModelLoadError(f'{name}: open_clip is not installed; pip install "vitroll[clip]"') from None
    if pretrained:
        raise ModelLoadError(f"{name}: open_clip's pretrained weights are downloaded by tag; pass the weights as "
                             "--checkpoint FILE (open_clip_model.safetensors)")
    if architecture not in open_clip.list_models():
        close = difflib.get_close_matches(architecture, open_clip.list_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ModelLoadError(f"unknown open_clip model {architecture!r}{hint}")
    return open_clip.create_model(architecture, pretrained=None)

