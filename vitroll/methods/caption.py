"""Caption maps: for each token a captioner generates, a map over the image of what drove it.

A captioner (:class:`~vitroll.capture.families.CaptionScore`) has three kinds of attention: the image encoder's
self-attention (N image tokens), and per decoder layer its causal self-attention over the caption's K positions,
then its cross-attention from those positions to the encoder's output tokens. Position ``k`` of the teacher-forced
decoder reads the start token and caption tokens 0 … k−1 and predicts token ``k``; its row is token k's map.

Both methods keep a relevance matrix ``R_ti`` (K, N) from caption positions to image tokens, ``R_ii`` (N, N) among
image tokens and ``R_tt`` (K, K) among caption positions, update them layer by layer in forward order (encoder
first, then each decoder layer's self-attention, then its cross-attention), and read ``R_ti[k]`` over the patch
tokens (the encoder's prefix tokens dropped).

``chefer`` — Chefer, Gur & Wolf 2021b, the encoder–decoder rules, gradient-weighted. For the score
``s_k`` = the logit of caption token k at position k, every layer's ``Ā = mean_h (∂s_k/∂A ⊙ A)⁺``; then, starting
from ``R_ii = I``, ``R_tt = I``, ``R_ti = 0``:

* encoder layer:            ``R_ii ← R_ii + Ā · R_ii``
* decoder self-attention:   ``R_tt ← R_tt + Ā · R_tt``;   ``R_ti ← R_ti + Ā · R_ti``
* decoder cross-attention:  ``R_ti ← R_ti + R̄_ttᵀ · Ā · R̄_ii``  (Ā is (K, N))

with ``R̄ = rownorm(R − I) + I`` (rows of ``R − I`` that sum to 0 stay 0): the paper's rule (10) with its
normalisation of the self-relevance matrices; the image tokens never attend to the caption, so ``R_it`` stays 0
and rule (11) adds nothing. ``R_ii`` and ``R_tt`` are kept as their gains ``R − I``, so a gain far below 1 is never
lost to float32 rounding before its row is normalised. One backward pass per caption token.

``rollout`` — pure attention, the residual stream counted as in :mod:`~vitroll.methods.rollout`, with head-fused
attention ``A`` and ``α = attention_weight``:

* encoder:                  ``R_ii = Â_L ··· Â_1``,  ``Â = rownorm(α·A + (1−α)·I)``  (later layers on the left)
* decoder self-attention:   ``R_ti ← Â · R_ti``
* decoder cross-attention:  ``R_ti ← ((1−α)·R_ti + α · A · R_ii) / m``,  ``m = (1−α) + α·rowsum(A)`` (1 for the
  head mean; max and min fusion leave rows that do not sum to 1)

that is, over the joint (K + N) tokens, ``R = X_D · S_D ··· X_1 · S_1 · diag(I_K, R_ii)`` with ``S_d = diag(Â_d,
I_N)`` and ``X_d = rownorm([[(1−α)·I_K, α·A_d], [0, I_N]])``: a position's output keeps (1−α) of itself and takes α
from the encoder tokens it attends to, each of which stands for the patches the encoder rolled into it. Rows of the
joint ``R`` sum to 1; the map is the image block's row k. It needs no gradient and serves every token at once.

``occlusion`` — no attention: each ``window`` × ``window`` block of patches set to the zero baseline (the
dataset-mean colour after normalisation), the caption read teacher-forced again, and each token's map is the mean
drop of its logit over the blocks covering a patch, kept where positive (:func:`~vitroll.methods.attributions.occlusion`
for captions). One forward pass per block, all tokens at once.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import nn

from vitroll.capture import AttentionRecorder, family_of, without_autocast
from vitroll.capture.families import AttentionRole, CaptionScore, TokenLayout
from vitroll.capture.fusion import HeadFusion, check_head_fusion
from vitroll.errors import InputValueError, MethodOptionError, OptionValueError, UnsupportedModelError
from vitroll.io.text import refuse_unknown_ids
from vitroll.methods.attributions import hide_patches, sliding_windows, window_means
from vitroll.methods.base import eval_mode, prepare_inputs
from vitroll.methods.gradients import differentiable, positive_weighted_heads
from vitroll.methods.registry import check_value
from vitroll.methods.image_batch import Images
from vitroll.methods.rollout import (check_attention_weight, divided_or_zero, rollout_matrix, row_normalised,
                                     with_residual)
from vitroll.methods.text_batch import max_positions
from vitroll.wording import argument

CAPTION_METHODS = ("chefer", "rollout", "occlusion")
"""The methods :func:`caption_maps` runs."""


@dataclass(frozen=True)
class CaptionMaps:
    """One caption per image and a map per caption token.

    Attributes
    ----------
    token_ids : Tensor, shape (B, K), int64
        The caption tokens (without the decoder's start token), the pad token after each caption's end.
    lengths : Tensor, shape (B,), int64
        Tokens per caption, its end token included (K when it has none within K).
    maps : Tensor, shape (B, K, h, w), float32
        Token k's map over the patch grid; zero for k ≥ length.
    token_logits : Tensor, shape (B, K), float32
        The logit of each caption token where it was predicted (the score ``chefer`` explains).
    """

    token_ids: torch.Tensor
    lengths: torch.Tensor
    maps: torch.Tensor
    token_logits: torch.Tensor


def captioner_of(model: nn.Module) -> CaptionScore:
    """The :class:`CaptionScore` of ``model``'s family; raises :class:`UnsupportedModelError` for a model that is
    not a captioner."""
    captioner = family_of(model).captioner
    if captioner is None:
        raise UnsupportedModelError(f"{type(model).__name__} is not a captioner (an image encoder with a text decoder "
                                    "that cross-attends to it, such as transformers' VisionEncoderDecoderModel)")
    return captioner


def caption_lengths(token_ids: torch.Tensor, end_id: int) -> torch.Tensor:
    """Tokens per caption (B,), through the first ``end_id`` (K where there is none)."""
    is_end = token_ids == end_id
    first_end = torch.where(is_end.any(dim=1), is_end.float().argmax(dim=1), token_ids.shape[1] - 1)
    return first_end + 1


def caption_maps(model: nn.Module, images: Images, method: str = "chefer", *,
                 caption_ids: Optional[torch.Tensor] = None, max_new_tokens: int = 20,
                 head_fusion: Optional[HeadFusion] = None, attention_weight: float = 0.5,
                 window: Optional[int] = None, **unknown: object) -> CaptionMaps:
    """Generate a caption for each image (greedy) or take ``caption_ids``, and map each of its tokens on the image.

    Parameters
    ----------
    model : nn.Module
        A captioner: transformers ``VisionEncoderDecoderModel`` (ViT/DeiT encoder; GPT-2 or BERT decoder with
        cross-attention), or a model of a family registered with a ``captioner``.
    images : Images
        A preprocessed batch (B, 3, H, W), or PIL images, paths or uint8 arrays.
    method : {"chefer", "rollout", "occlusion"}
        See the module docstring for each rule and the order its products are taken in.
    caption_ids : Tensor (B, K), or (K,) for one image, optional
        The captions to explain, without the decoder's start token (padded after their end token); by default the
        model's greedy caption of at most ``max_new_tokens`` tokens, and of no more than its decoder has positions
        for (a decoder of 16 positions captions in at most 16 tokens).
    max_new_tokens : int
        The longest caption generated, in tokens (without ``caption_ids``).
    head_fusion : {"mean", "max", "min"}, optional
        How ``rollout`` fuses heads (default mean); ``chefer`` weights each head by its gradient and takes none.
    attention_weight : float in (0, 1]
        ``α`` of ``rollout``.
    window : int, optional
        The side, in patches, of the blocks ``occlusion`` hides (default 1).
    **unknown
        Takes no other keyword: the first is refused in one line, a ``MethodOptionError`` naming the options above
        (``target_class`` too, as every caption token is its own target), rather than Python's bare TypeError.

    Returns
    -------
    CaptionMaps
        On the model's device.
    """
    _refuse_unknown_options(unknown)
    captioner = captioner_of(model)
    for name, value, hint in (("max_new_tokens", max_new_tokens, int), ("attention_weight", attention_weight, float),
                              ("window", window, Optional[int])):
        check_value(value, hint, f"option {name!r} of caption_maps")
    if method not in CAPTION_METHODS:
        raise MethodOptionError(f"unknown caption method {method!r}; choose from {', '.join(CAPTION_METHODS)}")
    if method != "rollout" and head_fusion is not None:
        raise MethodOptionError(f"{method} does not fuse attention heads: head_fusion is for rollout")
    if method != "occlusion" and window is not None:
        raise MethodOptionError(f"{method} hides nothing: {argument('window')} is for occlusion")
    if max_new_tokens < 1:
        raise OptionValueError(f"max_new_tokens must be at least 1; got {max_new_tokens}")
    check_attention_weight(attention_weight)
    head_fusion = head_fusion or "mean"
    check_head_fusion(head_fusion)
    batch = prepare_inputs(model, images)
    _start, end, _pad = captioner.special_ids(model)
    layout = captioner.encoder_layout(model, tuple(batch.shape[-2:]))
    windows = (sliding_windows(layout.grid, 1 if window is None else window, argument("window")).to(batch.device)
               if method == "occlusion" else None)
    with eval_mode(model):
        positions = _decoder_positions(model)
        if caption_ids is None:
            with torch.no_grad():  # a caption of K tokens is read teacher-forced at K decoder positions
                caption_ids = captioner.generate(model, batch, min(max_new_tokens, positions or max_new_tokens))
        caption_ids = _checked_captions(caption_ids, len(batch), batch.device, _vocabulary_size(model))
        if positions is not None and caption_ids.shape[1] > positions:
            raise InputValueError(f"caption_ids have {caption_ids.shape[1]} tokens; the decoder reads at most "
                                  f"{positions} (its position embeddings)")
        lengths = caption_lengths(caption_ids, end)
        roles = captioner.roles(model)
        if method == "rollout":
            with torch.no_grad(), AttentionRecorder(model, head_fusion=head_fusion) as recorder:
                logits = captioner.token_logits(model, batch, caption_ids)
                relevance = rollout_relevance([a.float() for a in recorder.attentions], roles, layout,
                                              attention_weight)
            token_logits = caption_token_logits(logits, caption_ids)
            maps = layout.patch_values(relevance.float())
        elif method == "occlusion":
            maps, token_logits = _occlusion(model, captioner, batch, caption_ids, windows, layout)
        else:
            relevance, token_logits = _chefer(model, captioner, batch, caption_ids, lengths, roles)
            maps = layout.patch_values(relevance.float())
    explained = torch.arange(caption_ids.shape[1], device=lengths.device) < lengths[:, None]  # (B, K)
    maps = maps.masked_fill(~explained[..., None, None], 0.0)  # not a product: NaN · 0 is NaN, failing the image
    return CaptionMaps(caption_ids, lengths, maps, token_logits.detach().float())


def _refuse_unknown_options(unknown: dict[str, object]) -> None:
    """One line for the first keyword :func:`caption_maps` does not take, as the registered methods word it, rather
    than Python's bare TypeError; ``target_class`` pointed to ``caption_ids``, which choose what is explained."""
    if "target_class" in unknown:
        raise MethodOptionError("caption maps explain each token of the caption, the target of its own map: there is "
                                "no class to choose; caption_ids= gives the caption (B, K) to explain instead of "
                                "target_class")
    if unknown:
        taken = list(inspect.signature(caption_maps).parameters)[2:-1]
        raise MethodOptionError(f"caption_maps takes no option {next(iter(unknown))!r} (it takes: "
                                f"{', '.join(taken)})")


def caption_token_logits(logits: torch.Tensor, caption_ids: torch.Tensor) -> torch.Tensor:
    """The logit of each caption token where it was predicted: (B, K, vocabulary) and (B, K) ids → (B, K)."""
    return logits.gather(2, caption_ids[..., None])[..., 0]


def _vocabulary_size(model: nn.Module) -> Optional[int]:
    """How many tokens the captioner's output layer scores, where it has one that says."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return getattr(head, "out_features", None) or getattr(head, "num_embeddings", None)


def _decoder_positions(model: nn.Module) -> Optional[int]:
    """How many positions the captioner's decoder has embeddings for, where its config says."""
    decoder = getattr(model, "decoder", None)
    return max_positions(decoder) if isinstance(decoder, nn.Module) else None


def _checked_captions(caption_ids: object, batch: int, device: torch.device,
                      vocabulary: Optional[int]) -> torch.Tensor:
    """``caption_ids`` as int64 token ids (B, K) on ``device`` (one caption (K,) for a batch of one image, as text
    methods take (L,) for one text), refusing what no caption can be: ragged lists, non-integer values, another
    shape, or ids outside the vocabulary of ``vocabulary`` tokens (when known)."""
    try:
        caption_ids = torch.as_tensor(caption_ids, device=device)
    except (ValueError, TypeError, RuntimeError):
        raise InputValueError("caption_ids must be token ids (B, K): a tensor, or lists of ints of one "
                              "length") from None
    if caption_ids.is_floating_point() or caption_ids.is_complex() or caption_ids.dtype == torch.bool:
        raise InputValueError(f"caption_ids must be integer token ids; got {caption_ids.dtype}")
    if caption_ids.ndim == 1 and batch == 1:
        caption_ids = caption_ids[None]
    if caption_ids.ndim != 2 or caption_ids.shape[0] != batch or caption_ids.shape[1] == 0:
        raise InputValueError(f"caption_ids must have shape (B, K) with B = {batch} images and K ≥ 1; got "
                              f"{tuple(caption_ids.shape)}")
    caption_ids = caption_ids.long()
    refuse_unknown_ids(caption_ids, vocabulary, "caption_ids")
    return caption_ids


def _chefer(model: nn.Module, captioner: CaptionScore, batch: torch.Tensor, caption_ids: torch.Tensor,
            lengths: torch.Tensor, roles: Sequence[AttentionRole]) -> tuple[torch.Tensor, torch.Tensor]:
    """The chefer relevance rows (B, K, N), one backward pass per caption token, and the token logits (B, K)."""
    num_tokens = caption_ids.shape[1]
    with torch.enable_grad(), differentiable(model, batch) as images, \
            AttentionRecorder(model, keep_graph=True) as recorder:
        logits = captioner.token_logits(model, images, caption_ids)
        token_logits = caption_token_logits(logits, caption_ids)
        attentions = [attention.detach().float() for attention in recorder.attentions]
        explained = int(lengths.max())
        relevance = torch.zeros(len(caption_ids), num_tokens, attentions[0].shape[-1], device=caption_ids.device)
        for k in range(explained):
            score = (token_logits[:, k] * (k < lengths)).sum()
            gradients = recorder.gradients(score, retain_graph=k < explained - 1)
            weighted = [positive_weighted_heads(attention, gradient.float(), clamp="before_mean")
                        for attention, gradient in zip(attentions, gradients)]
            relevance[:, k] = chefer_relevance(weighted, roles)[:, k]
    return relevance, token_logits


def _occlusion(model: nn.Module, captioner: CaptionScore, batch: torch.Tensor, caption_ids: torch.Tensor,
               windows: torch.Tensor, layout: TokenLayout, blocks_at_once: int = 64
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each caption token's occlusion map (B, K, h, w) over the blocks ``windows`` (P, h, w) bool of the encoder's
    ``layout``, its positive part, and the token logits (B, K)."""
    zero = torch.zeros((), dtype=batch.dtype, device=batch.device)
    with torch.no_grad():
        token_logits = caption_token_logits(captioner.token_logits(model, batch, caption_ids), caption_ids)
        maps = []
        for image, caption, full in zip(batch, caption_ids, token_logits):
            hidden = []
            for chunk in windows.split(blocks_at_once):
                captions = caption.expand(len(chunk), -1)
                logits = captioner.token_logits(model, hide_patches(image[None], chunk, zero, layout), captions)
                hidden.append(caption_token_logits(logits, captions))
            hidden = torch.cat(hidden)  # (P, K)
            maps.append(window_means(full - hidden, windows))
    return torch.stack(maps).clamp(min=0), token_logits


def _split(layers: Sequence[torch.Tensor], roles: Sequence[AttentionRole]
           ) -> tuple[list[torch.Tensor], list[tuple[AttentionRole, torch.Tensor]]]:
    if len(layers) != len(roles):
        raise ValueError(f"{len(layers)} attention records for {len(roles)} roles")
    encoder = [layer for layer, role in zip(layers, roles) if role == "encoder"]
    decoder = [(role, layer) for layer, role in zip(layers, roles) if role != "encoder"]
    return encoder, decoder


def residual_normalised(gain: torch.Tensor) -> torch.Tensor:
    """``R̄ = rownorm(R − I) + I`` of self-relevance given as its gain ``R − I`` (B, N, N); rows of the gain that sum
    to 0 stay 0."""
    return row_normalised(gain) + torch.eye(gain.shape[-1], device=gain.device, dtype=gain.dtype)


def chefer_relevance(weighted: Sequence[torch.Tensor], roles: Sequence[AttentionRole]) -> torch.Tensor:
    """``R_ti`` (B, K, N) from gradient-weighted, head-fused attention per module (encoder (B, N, N), decoder
    self (B, K, K), cross (B, K, N)) in forward order, by Chefer et al. 2021b's rules (module docstring).

    The self-relevance matrices are kept as their gains ``R − I`` (``R ← R + Ā·R`` is ``G ← G + Ā + Ā·G``): a token
    whose relevance barely grew has a gain far below float32's resolution next to the 1 on the diagonal, and
    subtracting I from R before normalising its row would leave rounding noise to be scaled up to a whole row."""
    encoder, decoder = _split(weighted, roles)
    with without_autocast(weighted[0].device):
        image_gain = torch.zeros_like(encoder[0])
        for attention in encoder:
            image_gain = image_gain + attention + torch.bmm(attention, image_gain)
        image_bar = residual_normalised(image_gain)
        cross = next(attention for role, attention in decoder if role == "cross")
        text_gain = cross.new_zeros(len(cross), cross.shape[1], cross.shape[1])
        text_image = torch.zeros_like(cross)
        for role, attention in decoder:
            if role == "self":
                text_gain, text_image = (text_gain + attention + torch.bmm(attention, text_gain),
                                         text_image + torch.bmm(attention, text_image))
            else:
                text_image = text_image + residual_normalised(text_gain).transpose(1, 2) @ attention @ image_bar
    return text_image


def rollout_relevance(attentions: Sequence[torch.Tensor], roles: Sequence[AttentionRole], layout: TokenLayout,
                      attention_weight: float = 0.5) -> torch.Tensor:
    """``R_ti`` (B, K, N) from head-fused attention per module in forward order, by the pure-attention rule
    (module docstring)."""
    encoder, decoder = _split(attentions, roles)
    alpha = attention_weight
    with without_autocast(attentions[0].device):
        image = rollout_matrix(encoder, layout, attention_weight=alpha)
        cross = next(attention for role, attention in decoder if role == "cross")
        text_image = torch.zeros_like(cross)
        for role, attention in decoder:
            if role == "self":
                text_image = torch.bmm(with_residual(attention, alpha), text_image)
            else:
                mass = (1.0 - alpha) + alpha * attention.sum(dim=-1, keepdim=True)  # 1 for the head mean
                text_image = divided_or_zero((1.0 - alpha) * text_image + alpha * torch.bmm(attention, image), mass)
    return text_image
