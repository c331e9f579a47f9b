"""Captioners: transformers' ``VisionEncoderDecoderModel`` — a ViT or DeiT image encoder and a GPT-2 or BERT text
decoder whose layers cross-attend to the encoder's tokens — registered through the same seam as the other models.

All three kinds of attention go through transformers' attention interface and are recorded in one forward pass
(:func:`~vitroll.adapters.transformers.attach_attention_interface`): the encoder's self-attention (its own family's
modules), and per decoder layer its causal self-attention then its cross-attention, in forward order; the family's
:class:`~vitroll.capture.families.CaptionScore` says which is which. The scores explained are the teacher-forced
logits of the caption's tokens (:func:`vitroll.caption_maps`); classifier verbs (``rollout(model, images)``) refuse a
captioner with a pointer there, since it has no class scores.
"""

from __future__ import annotations

import torch
from torch import nn

from vitroll.adapters.base import register_family
from vitroll.adapters.transformers import (
    attach_attention_interface, attention_modules_of, is_cross_attention, size_options,
)
from vitroll.adapters.transformers_preprocessing import transformers_preprocessing
from vitroll.capture.families import AttentionRole, CaptionScore, TokenLayout, family_of
from vitroll.capture.readouts import AttentionReadout
from vitroll.errors import UnsupportedModelError

_MODELS = "transformers.models"
DECODER_ATTENTION = (f"{_MODELS}.gpt2.modeling_gpt2.GPT2Attention", f"{_MODELS}.bert.modeling_bert.BertSelfAttention",
                     f"{_MODELS}.bert.modeling_bert.BertCrossAttention")
"""The decoders' attention classes (GPT-2 uses one class for both kinds; BERT one for each)."""

CAPTIONER = f"{_MODELS}.vision_encoder_decoder.modeling_vision_encoder_decoder.VisionEncoderDecoderModel"

_decoder_attention = attention_modules_of(*DECODER_ATTENTION)


def _encoder_attention(model: nn.Module) -> list[nn.Module]:
    return family_of(model.encoder).attention_modules(model.encoder)


def _attention_modules(model: nn.Module) -> list[nn.Module]:
    """The encoder's attention modules, then the decoder's (self, cross per layer), in forward order."""
    return _encoder_attention(model) + _decoder_attention(model.decoder)


def _roles(model: nn.Module) -> list[AttentionRole]:
    roles: list[AttentionRole] = ["encoder"] * len(_encoder_attention(model))
    decoder: list[AttentionRole] = ["cross" if is_cross_attention(module) else "self"
                                    for module in _decoder_attention(model.decoder)]
    if not decoder or "cross" not in decoder:
        raise UnsupportedModelError(f"{type(model.decoder).__name__} has no cross-attention to the image encoder "
                                    "(build its config with add_cross_attention=True)")
    return roles + decoder


def _encoder_layout(model: nn.Module, image_hw: tuple[int, int]) -> TokenLayout:
    return family_of(model.encoder).token_layout(model.encoder, image_hw)


def _special_ids(model: nn.Module) -> tuple[int, int, int]:
    """(decoder start, end, pad) token ids, from the model's config, else its decoder's and generation config."""
    config, decoder = model.config, model.config.decoder
    generation = getattr(model, "generation_config", None)

    def first(*values: object) -> int | None:
        for value in values:
            if isinstance(value, (list, tuple)):
                value = value[0] if value else None
            if value is not None:
                return int(value)
        return None

    start = first(config.decoder_start_token_id, getattr(generation, "decoder_start_token_id", None),
                  decoder.bos_token_id)
    end = first(config.eos_token_id, getattr(generation, "eos_token_id", None), decoder.eos_token_id)
    if start is None or end is None:
        raise UnsupportedModelError(f"{type(model).__name__} names no decoder start or end token: set "
                                    "config.decoder_start_token_id and config.eos_token_id")
    return start, end, first(config.pad_token_id, getattr(generation, "pad_token_id", None), end)


def _generate(model: nn.Module, images: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """The greedy caption (B, K), the start token dropped, padded with the pad token after the end token."""
    start, end, pad = _special_ids(model)
    # generate pads a finished caption with a token other than its end: padded with the end token (GPT-2 captioners
    # pad so), a batch made transformers advise an attention mask, which the pixels it reads have no use for
    filler = pad if pad != end else (end + 1) % model.config.decoder.vocab_size
    generated = model.generate(pixel_values=images, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                               decoder_start_token_id=start, eos_token_id=end, pad_token_id=filler,
                               **size_options(model.encoder, images))[:, 1:]
    ends = (generated == end).int()
    return generated.masked_fill(ends.cumsum(dim=1) - ends > 0, pad)  # past its end token, a caption is padding


def _token_logits(model: nn.Module, images: torch.Tensor, caption_ids: torch.Tensor) -> torch.Tensor:
    start, _end, _pad = _special_ids(model)
    first = torch.full_like(caption_ids[:, :1], start)
    decoder_input_ids = torch.cat([first, caption_ids[:, :-1]], dim=1)
    return model(pixel_values=images, decoder_input_ids=decoder_input_ids, use_cache=False,
                 **size_options(model.encoder, images)).logits


def _no_class_scores(model: nn.Module, _images: torch.Tensor) -> None:
    raise UnsupportedModelError(f"{type(model).__name__} is a captioner: it has no class scores; explain its "
                                "caption with vitroll.caption_maps(model, images) or `vitroll caption IMAGE`")


register_family(
    "hf-captioner", (CAPTIONER,), attention_modules=_attention_modules,
    token_layout=_encoder_layout, preprocessing=transformers_preprocessing, logits=_no_class_scores,
    readout=[AttentionReadout(each, probs_module=None, fused_flag=None, attach=attach_attention_interface)
             for each in DECODER_ATTENTION],
    captioner=CaptionScore(roles=_roles, encoder_layout=_encoder_layout, generate=_generate,
                           token_logits=_token_logits, special_ids=_special_ids),
    name_patterns=("VisionEncoderDecoderModel",),
    notes="captioner (ViT/DeiT encoder, GPT-2/BERT decoder): one map per generated token (vitroll.caption_maps)",
)

MODEL_TYPES = frozenset({"vision-encoder-decoder"})
"""The ``config.model_type`` of the captioners registered above, which loading checks."""

DECODER_MODEL_TYPES = frozenset({"gpt2", "bert"})
"""The ``config.decoder.model_type`` of the decoders whose attention classes are read (:data:`DECODER_ATTENTION`)."""
