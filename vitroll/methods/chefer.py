"""Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability for Interpreting Bi-Modal and
Encoder-Decoder Transformers" — the relevance rule for self-attention encoders:

    R ← I;   for each layer l (first to last):   R ← R + Ā_l · R,   Ā_l = mean_h (∇A_l ⊙ A_l)⁺

so ``R = (I + Ā_L) ··· (I + Ā_1)``. The map is the decision row of ``R`` over the patches; like rollout it is
computed as a class-row vector chain, ``v ← v + v·Ā_l`` from the last layer down, in O(L·N²).
"""

from __future__ import annotations

import torch
from torch import nn

from vitroll.capture import without_autocast
from vitroll.methods.inputs import Inputs
from vitroll.methods.base import Saliency, layers_from
from vitroll.methods.registry import register_method
from vitroll.methods.gradients import TargetClass, attention_gradients, class_row, positive_weighted_heads


@register_method("chefer", needs_gradients=True)
def chefer(model: nn.Module, inputs: Inputs, *, target_class: TargetClass = None, start_layer: int = 0) -> Saliency:
    """Chefer et al. relevance maps (B, h, w), float32 on the model's device, for ``target_class`` (default: each
    image's prediction).

    Parameters
    ----------
    start_layer : int in [0, L)
        First layer whose relevance is propagated (earlier layers count as identity); out of range raises ValueError.
    """
    recorded = attention_gradients(model, inputs, target_class)
    pairs = layers_from(list(zip(recorded.attentions, recorded.gradients)), start_layer)
    v = class_row(recorded.layout, recorded.logits.shape[0], recorded.logits.device)
    with without_autocast(v.device):
        for attention, gradient in reversed(pairs):
            fused = positive_weighted_heads(attention, gradient, clamp="before_mean")
            v = v + torch.bmm(v.unsqueeze(1), fused).squeeze(1)
    return Saliency(recorded.layout.patch_values(v), recorded.logits)
