"""open_clip's ViT image–text models (``open_clip.create_model("ViT-B-32")``, ``open_clip.model.CLIP(...)``),
registered through the same public call a user has.

A vision tower that wraps a timm model (``TimmModel``: SigLIP, EVA02 CLIP, any config with ``timm_model_name``) is
explained through its trunk's own timm family (its attention, its pooling: class token, patch mean, or a 'map' head's
pooling attention); its head only projects the pooled feature. ResNet and ConvNeXt towers are refused: no token
attention.

The vision tower (``open_clip.transformer.VisionTransformer``) runs its blocks' ``nn.MultiheadAttention`` with
``need_weights=False``; that module's readout (:mod:`vitroll.adapters.torchvision`) recomputes the probabilities
beside the call, so the model's output is untouched, or, for gradient methods, in the graph. The score is the model's
own ``get_logits`` (``logit_scale.exp()`` times the cosine similarity, plus ``logit_bias`` where the model has one).

Nothing here imports open_clip until a model is recorded or texts are tokenised: families name classes by dotted path.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from vitroll.adapters.base import register_family
from vitroll.adapters.image_text import inner_model_capture, register_dual_encoder, warn_cut_texts
from vitroll.adapters.tokenizers import registered_tokenizer
from vitroll.capture.families import (ImageTextScore, Refusal, TextInputs, TokenLayout, add_refusal, refusal_of,
                                      registered_family)
from vitroll.errors import OptionValueError, UnsupportedModelError
from vitroll.preprocess import Preprocessing

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
DEFAULT_VOCAB_SIZE = 49408
"""The size of open_clip's default BPE vocabulary (``open_clip.tokenize``), which its OpenAI-style ViTs use."""

_CROP_MODES = {"shortest": "center", "squash": "squash"}
"""open_clip's ``resize_mode`` → vitroll's crop mode (its ``longest`` pads, which vitroll cannot invert)."""


def _attention_modules(tower: nn.Module) -> list[nn.Module]:
    blocks = list(tower.transformer.resblocks)
    if not all(isinstance(block.attn, nn.MultiheadAttention) for block in blocks):
        raise UnsupportedModelError(f"this open_clip vision tower's blocks are {type(blocks[0]).__name__} with "
                                    f"{type(blocks[0].attn).__name__}; vitroll reads open_clip's default blocks "
                                    "(nn.MultiheadAttention)")
    return [block.attn for block in blocks]


def _token_layout(tower: nn.Module, image_hw: tuple[int, int]) -> TokenLayout:
    """The class token, then the patches row by row; only the size the tower was built for (its learned position
    embeddings are not interpolated)."""
    if tower.attn_pool is not None:
        raise UnsupportedModelError("an open_clip vision tower with an attentional pooler (CoCa) reads out through "
                                    "cross-attention, which vitroll does not follow")
    if tuple(image_hw) != tuple(tower.image_size):
        raise ValueError(f"this open_clip vision tower takes {tower.image_size[0]}×{tower.image_size[1]} inputs only")
    readout = "class_token" if tower.pool_type == "tok" else "patch_mean"
    return TokenLayout(num_prefix_tokens=1, readout=readout, grid=tuple(tower.grid_size))


def _preprocessing(tower: nn.Module) -> Preprocessing:
    """open_clip's evaluation transform from the tower's ``preprocess_cfg`` (its defaults where it has none: the
    shortest side resized to the input size, bicubic, centre crop, OpenAI's mean and std), for a ViT tower or a
    ``TimmModel`` alike (open_clip sets both the same way, whatever timm's own transform of the trunk)."""
    config = getattr(tower, "preprocess_cfg", None) or {}
    resize_mode = config.get("resize_mode", "shortest")
    if resize_mode not in _CROP_MODES:
        raise UnsupportedModelError(f"open_clip resize_mode {resize_mode!r} pads the image; vitroll inverts "
                                    "'shortest' and 'squash' only")
    return Preprocessing(input_size=tuple(tower.image_size), mean=tuple(config.get("mean", OPENAI_MEAN)),
                         std=tuple(config.get("std", OPENAI_STD)), crop_pct=1.0,
                         interpolation=config.get("interpolation", "bicubic"), crop_mode=_CROP_MODES[resize_mode])


NO_TOKEN_ATTENTION = ("has no token attention for rollout to follow (a CNN: its features are maps, not a token "
                      "sequence); vitroll explains open_clip's ViT towers and timm ViT trunks (SigLIP, EVA02); use "
                      "Grad-CAM (pip install grad-cam)")
RESNET_REFUSAL = f"open_clip's ResNet tower (RN50, …) {NO_TOKEN_ATTENTION}"


def _timm_trunk(tower: nn.Module) -> nn.Module:
    """The timm model an open_clip ``TimmModel`` wraps, when it is of a registered family.

    Raises
    ------
    UnsupportedModelError
        For a trunk vitroll refuses (a windowed one: the reason) or one without token attention (ConvNeXt, ResNet).
    """
    trunk = tower.trunk
    if registered_family(trunk) is not None:
        return trunk
    architecture = getattr(trunk, "pretrained_cfg", {}).get("architecture") or type(trunk).__name__
    raise Refusal(lambda path: f"this open_clip vision tower is timm's {architecture}: "
                               + (refusal_of(trunk, f"{path}.trunk") or f"{type(trunk).__name__} {NO_TOKEN_ATTENTION}"))


def _tower_forward(tower: nn.Module, images: torch.Tensor) -> None:
    """The pooled image embedding is no class score: a backbone."""
    tower(images)


def _image_text_logits(model: nn.Module, images: torch.Tensor, texts: TextInputs) -> torch.Tensor:
    image_logits, _text_logits = model.get_logits(images, texts.input_ids)
    return image_logits


def _tokenize(model: nn.Module, texts: Sequence[str], tokenizer: Optional[object]) -> TextInputs:
    """``tokenizer(texts)``, or open_clip's default BPE at the model's context length for a model of its
    vocabulary."""
    tokenizer = tokenizer or registered_tokenizer(model)
    if tokenizer is None:
        text_tower = getattr(model, "text", model)
        if text_tower.vocab_size != DEFAULT_VOCAB_SIZE:
            raise OptionValueError(f"this open_clip model's vocabulary has {text_tower.vocab_size} tokens, not those "
                                   f"of open_clip's default tokenizer ({DEFAULT_VOCAB_SIZE}): pass "
                                   "tokenizer=open_clip.get_tokenizer(MODEL_NAME), or input_ids (on the command line, "
                                   "open_clip:MODEL_NAME uses that tokenizer once it is in the Hugging Face cache: "
                                   "call open_clip.get_tokenizer(MODEL_NAME) once online)")
        from open_clip.tokenizer import SimpleTokenizer

        tokenizer = SimpleTokenizer(context_length=text_tower.context_length)
    input_ids = torch.as_tensor(tokenizer(list(texts))).long()
    context = input_ids.shape[1]
    cut = tuple(length > context for length in _untruncated_lengths(tokenizer, texts, input_ids))
    warn_cut_texts(texts, cut, context)
    return TextInputs(input_ids, None, tuple(texts), cut)


def _untruncated_lengths(tokenizer: object, texts: Sequence[str], input_ids: torch.Tensor) -> list[int]:
    """How many tokens each text has before open_clip's tokenizer cuts it to the context (``input_ids`` (T, L)).

    Its BPE (``SimpleTokenizer``) encodes between a start and an end token; its ``HFTokenizer`` (SigLIP's) cleans the
    text for the transformers tokenizer it wraps, which pads with a token that may be its end token (not 0). For any
    other tokenizer, a row without a 0 counts as cut.
    """
    inner = getattr(tokenizer, "tokenizer", None)
    if callable(inner):
        clean = getattr(tokenizer, "clean_fn", lambda text: text)
        return [len(ids) for ids in inner([clean(text) for text in texts])["input_ids"]]
    if callable(getattr(tokenizer, "encode", None)):
        return [len(tokenizer.encode(text)) + 2 for text in texts]
    return [input_ids.shape[1] + int(row.all()) for row in input_ids != 0]


def _context(model: nn.Module) -> tuple[int, int]:
    """open_clip's text tower adds its positional embedding and causal mask at their full length: exactly
    ``context_length`` tokens per text."""
    length = getattr(model, "text", model).context_length
    return length, length


register_family(
    "open-clip-vision", "open_clip.transformer.VisionTransformer", attention_modules=_attention_modules,
    token_layout=_token_layout, preprocessing=_preprocessing, logits=_tower_forward,
    name_patterns=("open_clip VisionTransformer",),
    notes="open_clip's vision tower: nn.MultiheadAttention read beside the call; backbone: attention methods only",
)
register_family(
    "open-clip-timm", "open_clip.timm_model.TimmModel",
    **{**inner_model_capture(_timm_trunk), "preprocessing": _preprocessing}, logits=_tower_forward,
    name_patterns=("open_clip TimmModel",),
    notes="open_clip's timm vision tower (SigLIP, EVA02): its trunk's timm family; backbone: attention methods only",
)
add_refusal("open_clip.modified_resnet.ModifiedResNet", RESNET_REFUSAL)
register_dual_encoder(
    "open-clip", ("open_clip.model.CLIP", "open_clip.model.CustomTextCLIP"), vision_tower=lambda model: model.visual,
    image_text=ImageTextScore(_image_text_logits, _tokenize, takes_attention_mask=False, context=_context),
    name_patterns=("open_clip CLIP",),
    notes="image–text: get_logits explained on the vision tower (ViT: class token; timm trunk: its readout)",
)
