"""Attention rollout (Abnar & Zuidema 2020) and raw attention maps.

Rollout treats each layer as mixing token information through attention *and* the residual stream:

    Â_l = rownorm(α · A_l + (1 − α) · I),      R = Â_L · Â_{L−1} ··· Â_1

where ``A_l`` is layer ``l``'s head-fused attention (rows are queries). Token ``i``'s output after the last
layer is ``Σ_j R[i, j]`` times input token ``j``: the first layer acts first on the inputs, so it stands
rightmost, and later layers multiply from the left. The map is the class token's row of ``R`` over the
patch tokens. Only that row is needed, so it is computed as a vector–matrix chain,
``v ← v · Â_L``, then ``v · Â_{L−1}``, …, in O(L·N²) instead of the O(L·N³) full product, with the residual
applied algebraically so no N×N temporaries are built per layer.

**Text.** For a text model the same chain runs over token positions and its decision row is the class token's,
the mean of the real tokens' rows, or a language model's explained position (:class:`~vitroll.capture.TokenLayout`).
Padding needs no special case in the chain: the model's mask gives padded keys zero attention, so the real rows
never reach a padded column, and a padded row (zero attention, or none at all under a causal mask) becomes the
identity row after ``rownorm``, which the row vector, zero there, never reads. The scores (B, L) cover every
position, padded ones exactly 0. ``discard_ratio`` ranks only the real tokens of each row (``n`` real tokens, not
the padded length); in a causal model the masked (later) tokens of a row count among its smallest.

For long sequences with the head mean and no discarding, :func:`rollout` does not store the N×N maps at all:
each layer is kept as its factors (:class:`~vitroll.capture.FactoredAttention`) and ``v · A_l`` is one more
fused attention pass per layer, in O(N·D) memory.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional, Sequence

import torch
from torch import nn

from vitroll.capture import FactoredAttention, TokenLayout, without_autocast
from vitroll.capture.fusion import HeadFusion
from vitroll.errors import InputTypeError, InputValueError, OptionOutOfRange, OptionValueError
from vitroll.methods.inputs import Inputs
from vitroll.methods.base import Saliency, layers_from, record_attention
from vitroll.methods.map_checks import near_constant, warn_constant_maps
from vitroll.methods.registry import register_method
from vitroll.wording import argument, method_option, page_control, with_article


def discard_lowest(attention: torch.Tensor, discard_ratio: float, protected_column: Optional[int],
                   token_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Zero the weakest attention in every row.

    Parameters
    ----------
    attention : Tensor, shape (B, N, N)
    discard_ratio : float in [0, 1)
        Fraction of each row's entries to drop: every entry ``<=`` the row's ``k``-th smallest value,
        ``k = ⌊n · discard_ratio⌋`` (:func:`discarded_count`) with ``n`` the number of real tokens (N without
        padding), is set to 0.
    protected_column : int or None
        Column never dropped (the class token's), nor counted among the smallest.
    token_mask : Tensor, shape (B, N), bool, optional
        Real tokens of each sequence: padded columns (zero attention) are neither counted in ``n`` nor ranked, so
        the same text padded to any length keeps the same entries.

    Returns
    -------
    Tensor, shape (B, N, N) — a new tensor; rows no longer sum to 1.
    """
    if not 0.0 <= discard_ratio < 1.0:
        raise OptionValueError(f"{method_option('discard_ratio')} must be in [0, 1); got {discard_ratio}")
    batch, num_tokens = attention.shape[0], attention.shape[-1]
    counts = (torch.full((batch,), num_tokens, device=attention.device) if token_mask is None
              else token_mask.sum(dim=-1).to(attention.device))
    k = torch.tensor([discarded_count(int(count), discard_ratio) for count in counts.tolist()],
                     device=attention.device)
    if protected_column is not None:
        k = torch.minimum(k, counts - 1)
    if not bool((k > 0).any()):
        return attention
    ignored = torch.zeros(batch, num_tokens, dtype=torch.bool, device=attention.device)
    if token_mask is not None:
        ignored |= ~token_mask.to(attention.device)
    if protected_column is not None:
        ignored[:, protected_column] = True
    ranked = attention.masked_fill(ignored[:, None, :], float("inf"))
    if bool((k == k[0]).all()):  # one k for the whole batch (always for images): a selection, not a sort
        threshold = ranked.kthvalue(int(k[0]), dim=-1, keepdim=True).values
    else:
        ordered = ranked.sort(dim=-1).values
        threshold = ordered.gather(-1, (k - 1).clamp(min=0)[:, None, None].expand(-1, attention.shape[1], 1))
        threshold = threshold.masked_fill((k == 0)[:, None, None], float("-inf"))
    return attention.masked_fill(ranked <= threshold, 0.0)


def discarded_count(num_tokens: int, discard_ratio: float) -> int:
    """``k = ⌊n · discard_ratio⌋``, the number of entries per row that :func:`discard_lowest` ranks as weakest.

    ``discard_ratio`` is taken as the decimal it reads as (its shortest repr) and multiplied exactly: the float
    product of a decimal ratio falls just short of the integer it stands for (100 · 0.29 = 28.999999999999996), and
    a margin for that rounds a ratio just below 1/n (0.24999999999999997 for n = 4) up to one token.
    """
    return math.floor(Fraction(repr(float(discard_ratio))) * num_tokens)


def check_attention_weight(attention_weight: float) -> None:
    if not 0.0 < attention_weight <= 1.0:
        raise OptionValueError(f"{method_option('attention_weight')} must be in (0, 1]; got {attention_weight}")


def _check_recorded(attentions: Sequence[torch.Tensor], layout: TokenLayout) -> None:
    """Refuse, in one line, what is not recorded attention with its layout (a model and images, as ``rollout``
    takes them, or no layers at all) before any layer is indexed."""
    if isinstance(attentions, nn.Module):
        raise InputTypeError(f"attentions is {with_article(type(attentions).__name__)}, not the recorded attention of "
                             "its layers: rollout(model, images) explains a model; the rollout functions take what an "
                             "AttentionRecorder records (recorder.attentions, recorder.token_layout(image_hw))")
    if not isinstance(layout, TokenLayout):
        raise InputTypeError(f"layout must be the TokenLayout of the recorded input "
                             f"(recorder.token_layout(image_hw)); got {type(layout).__name__}")
    for index, attention in enumerate(attentions):
        if not isinstance(attention, (torch.Tensor, FactoredAttention)):
            raise InputTypeError(f"attentions[{index}] must be a layer's head-fused attention tensor (B, N, N); got "
                                 f"{type(attention).__name__}")
    if not len(attentions):
        raise InputValueError("attentions is empty: record at least one layer (the rollout of no layers is the "
                              "identity and explains nothing)")


def _prepared_layers(
    attentions: Sequence[torch.Tensor], layout: TokenLayout, discard_ratio: float
) -> list[torch.Tensor]:
    _check_recorded(attentions, layout)
    if discard_ratio and any(isinstance(a, FactoredAttention) for a in attentions):
        raise OptionValueError(f"{method_option('discard_ratio')} needs the attention maps themselves; record them "
                               "without factored=True")
    protected = 0 if layout.readout == "class_token" else None
    return [a if isinstance(a, FactoredAttention) else discard_lowest(a.float(), discard_ratio, protected,
                                                                     layout.token_mask)
            for a in attentions]


def rollout_vector(
    attentions: Sequence[torch.Tensor],
    layout: TokenLayout,
    *,
    discard_ratio: float = 0.0,
    attention_weight: float = 0.5,
) -> torch.Tensor:
    """Decision row of the rollout matrix, ``r · Â_L ··· Â_1``, from recorded head-fused attention.

    Parameters
    ----------
    attentions : sequence of Tensor, each (B, N, N), or FactoredAttention
        Head-fused attention of the layers to roll out, in forward order (first layer first).
    layout : TokenLayout
        Supplies the readout row ``r``: the class token's, or the mean of the patch tokens' rows.
    discard_ratio, attention_weight : float
        See :func:`discard_lowest`; ``α`` in ``Â = rownorm(α·A + (1−α)·I)``.

    Returns
    -------
    Tensor, shape (B, N), float32 — a probability vector over all tokens (prefix tokens included); it sums to less
    than 1 where, with ``attention_weight=1``, relevance reaches a row of attention that is all 0
    (:func:`divided_or_zero`).
    """
    check_attention_weight(attention_weight)
    alpha = attention_weight
    batch = attentions[0].shape[0]
    with without_autocast(attentions[0].device):
        v = layout.readout_vector(device=attentions[0].device).expand(batch, -1).clone()
        for attention in reversed(_prepared_layers(attentions, layout, discard_ratio)):
            if isinstance(attention, FactoredAttention):  # softmax rows sum to 1, so d = 1
                v = alpha * attention.left_multiply(v) + (1.0 - alpha) * v
                continue
            # v · rownorm(αA + (1−α)I) = α·(v/d)·A + (1−α)·(v/d), d = row sums of αA + (1−α)I
            scaled = divided_or_zero(v, alpha * attention.sum(dim=-1) + (1.0 - alpha))
            v = alpha * torch.bmm(scaled.unsqueeze(1), attention).squeeze(1) + (1.0 - alpha) * scaled
    return v


def rollout_matrix(
    attentions: Sequence[torch.Tensor],
    layout: TokenLayout,
    *,
    discard_ratio: float = 0.0,
    attention_weight: float = 0.5,
) -> torch.Tensor:
    """The full rollout matrix ``R = Â_L ··· Â_1``, shape (B, N, N). O(L·N³): use only when all rows are needed.

    Parameters
    ----------
    attentions : sequence of Tensor, each (B, N, N)
        Head-fused attention of the layers to roll out, in forward order (first layer first).
    layout : TokenLayout
        The token layout of the input: which column is the class token's (never discarded), which tokens are padding.
    discard_ratio : float in [0, 1)
        Fraction of the weakest attention dropped per row (:func:`discard_lowest`).
    attention_weight : float in (0, 1]
        ``α`` in ``Â = rownorm(α·A + (1−α)·I)``.

    Returns
    -------
    Tensor, shape (B, N, N), float32
        ``R[b, i, j]``: how much token ``j`` of the input flows into token ``i`` of the last layer; rows sum to 1,
        or less where, with ``attention_weight=1``, a row of attention is all 0 (:func:`divided_or_zero`).
    """
    check_attention_weight(attention_weight)
    layers = _prepared_layers(attentions, layout, discard_ratio)
    eye = torch.eye(layers[0].shape[-1], device=layers[0].device)
    result = eye.expand_as(layers[0]).clone()
    with without_autocast(eye.device):
        for attention in layers:
            result = torch.bmm(with_residual(attention, attention_weight), result)
    return result


def with_residual(attention: torch.Tensor, attention_weight: float) -> torch.Tensor:
    """``Â = rownorm(α·A + (1−α)·I)`` of head-fused attention (..., N, N) → (..., N, N), in its dtype: one layer of
    rollout."""
    eye = torch.eye(attention.shape[-1], device=attention.device, dtype=attention.dtype)
    return row_normalised(attention_weight * attention + (1.0 - attention_weight) * eye)


def divided_or_zero(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """``numerator / denominator`` (broadcast), 0 where the denominator is 0 (NaN stays NaN).

    rownorm's meaning of a row that sums to 0 — with α = 1, a row of gradient-weighted attention that the clamp, the
    discard or padding left all 0: a token that passes on no relevance passes on nothing, so its row stays 0 (and the
    rollout's rows sum to at most 1) rather than 0/0 = NaN, which the matrix product would spread to every token.
    """
    nonzero = denominator != 0
    return torch.where(nonzero, numerator / torch.where(nonzero, denominator, 1.0), 0.0)


def row_normalised(matrix: torch.Tensor) -> torch.Tensor:
    """Rows of ``matrix`` (..., N, M) divided by their sums, shape kept; a row that sums to 0 stays 0
    (:func:`divided_or_zero`)."""
    return divided_or_zero(matrix, matrix.sum(dim=-1, keepdim=True))


def _explained_values(maps: torch.Tensor, layout: TokenLayout) -> list[tuple[torch.Tensor, int]]:
    """Per input, the values its map shows and the number of tokens its rows have: an image's patches (of the prefix
    and patch tokens), a text's real tokens but its class token (which the class-token row always reaches); none for
    other text readouts, whose scores may rightly be 0 past the explained position."""
    if layout.token_mask is None:
        flat = maps.detach().flatten(1)
        return [(row, layout.num_prefix_tokens + flat.shape[1]) for row in flat]
    if layout.readout != "class_token":
        return []
    real = layout.token_mask.to(maps.device)
    return [(row[mask][1:], int(mask.sum())) for row, mask in zip(maps.detach(), real)]


def _ratios_keeping(num_tokens: int) -> str:
    """The discard ratios that leave rows of ``num_tokens`` tokens a column besides the class token's, those below
    (n − 1)/n, in words: ``discard_ratio`` below 0.9 (10 tokens), or at most 0.9411 (17 tokens: (n − 1)/n = 0.941176…
    rounded down, as 0.9412 · 17 = 16.0004 drops 16). On a page whose slider sets it
    (:func:`~vitroll.wording.page_control`), the highest value of the slider below (n − 1)/n: 0.98 for 65 tokens on a
    slider of step 0.01, where 0.9846 could not be set."""
    limit = Fraction(num_tokens - 1, num_tokens)
    slider = page_control("discard_ratio")
    if slider is None or slider.step is None:
        if (limit * 10_000).denominator == 1:
            return f"{argument('discard_ratio')} below {float(limit):g}"
        return f"{argument('discard_ratio', (math.ceil(limit * 10_000) - 1) / 10_000)} or lower"
    low = slider.minimum or Fraction(0)
    highest = low + (math.ceil((limit - low) / slider.step) - 1) * slider.step
    if slider.maximum is not None:
        highest = min(highest, slider.maximum)
    return f"{argument('discard_ratio', float(highest))} or lower"


def warn_constant_rollout(maps: torch.Tensor, layout: TokenLayout, discard_ratio: float, method: str) -> None:
    """:func:`~vitroll.methods.map_checks.warn_constant_maps` for a rollout's maps (B, h, w), or a text's scores
    (B, L) but its class token's, added up over a run for ``method``, ``discard_ratio`` and the number of tokens (of
    images; once for all texts), naming the cause: a ``discard_ratio`` that drops every column but the class token's
    in rows of this few tokens (the map all 0), else attention that tells no token from another."""
    explained = _explained_values(maps, layout)
    constant = [tokens for values, tokens in explained if len(values) > 1 and near_constant(values)]
    if not constant:
        return
    num_tokens = constant[0]
    what = "patch" if layout.token_mask is None else "other token"
    rows = f"this model's {num_tokens} tokens" if layout.token_mask is None else f"a text of {num_tokens} tokens"
    if layout.readout == "class_token" and discarded_count(num_tokens, discard_ratio) >= num_tokens - 1:
        cause = (f"{argument('discard_ratio', discard_ratio)} drops {num_tokens - 1} of the {num_tokens} attention "
                 f"weights in each row, all but the class token's, which leaves no {what} any: too high for {rows}, "
                 f"{_ratios_keeping(num_tokens)} keeps some")
    else:
        lower = f"; a lower {argument('discard_ratio')} than {discard_ratio} keeps more of it" if discard_ratio else ""
        cause = f"the attention it rolls out does not tell one {what.split()[-1]} from another{lower}"
    warn_constant_maps(method, [values for values, _ in explained], cause,
                       key=(method, float(discard_ratio), num_tokens if layout.token_mask is None else None))


@register_method("rollout", checks_constant_maps=False)  # warn_constant_rollout: with the cause
def rollout(
    model: nn.Module,
    inputs: Inputs,
    *,
    head_fusion: HeadFusion = "mean",
    discard_ratio: float = 0.0,
    attention_weight: float = 0.5,
    start_layer: int = 0,
    dtype: torch.dtype = torch.float32,
    max_attention_memory: Optional[int] = None,
) -> Saliency:
    """Attention-rollout maps for a batch.

    Parameters
    ----------
    head_fusion : {"mean", "max", "min"}
        How each layer's heads are fused.
    discard_ratio : float in [0, 1)
        Fraction of the weakest attention dropped per row; the class-token column is never dropped.
    attention_weight : float in (0, 1]
        ``α`` in ``Â = rownorm(α·A + (1−α)·I)``; 0.5 is the paper's equal split with the residual.
    start_layer : int in [0, L)
        First layer included (earlier layers are treated as identity); out of range raises ValueError.
    dtype : torch.dtype
        Storage precision of the recorded attention, a floating-point type; the chain is computed in float32.
    max_attention_memory : int, optional
        Attention memory budget in bytes; see :func:`record_attention`. With the head mean and no discarding,
        when the head-fused maps of all layers (L·B·N²·4 bytes) would exceed it, the rollout is computed from
        factored attention instead, which never materialises an N×N map.

    Returns
    -------
    Tensor, shape (B, h, w), float32, on the model's device
        Rollout mass of each patch. Models with a class token read out its row; models without one
        (average or attention pooling) read out the mean of the patch tokens' rows. For a text model, token
        scores (B, L) over every position, padded ones exactly 0 (see the module docstring).
    """
    attentions, layout, logits = record_attention(model, inputs, head_fusion=head_fusion, dtype=dtype,
                                                  max_attention_memory=max_attention_memory,
                                                  factored=head_fusion == "mean" and discard_ratio == 0.0)
    vector = rollout_vector(
        layers_from(attentions, start_layer), layout, discard_ratio=discard_ratio, attention_weight=attention_weight
    )
    maps = layout.patch_values(vector)
    warn_constant_rollout(maps, layout, discard_ratio, "rollout")
    return Saliency(maps, logits)


@register_method("attention")
def attention(
    model: nn.Module,
    inputs: Inputs,
    *,
    head_fusion: Optional[HeadFusion] = "mean",
    layer: int = -1,
    max_attention_memory: Optional[int] = None,
) -> Saliency:
    """Raw attention of one layer (default the last) from the decision row to the patches.

    Parameters
    ----------
    head_fusion : {"mean", "max", "min"} or None
        How the layer's heads are fused; ``None`` gives one map per head.
    layer : int
        Which layer, counted from 0 or from the end (−1: the last); out of range raises ValueError.

    Returns
    -------
    Tensor, shape (B, h, w), or (B, H, h, w) per head, float32, on the model's device; for a text model (B, L) or
    (B, H, L), padded positions 0.
    """
    attentions, layout, logits = record_attention(model, inputs, head_fusion=head_fusion,
                                                  max_attention_memory=max_attention_memory)
    if not -len(attentions) <= layer < len(attentions):
        raise OptionOutOfRange("layer", layer, f" is out of range for a model with {len(attentions)} layers "
                                               f"({-len(attentions)}…{len(attentions) - 1})")
    with without_autocast(attentions[layer].device):
        row = layout.readout_row(attentions[layer].float())
    return Saliency(layout.patch_values(row), logits)
