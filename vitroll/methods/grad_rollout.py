"""Gradient-weighted attention rollout, as in jacobgil/vit-explain: class-specific rollout.

Each layer's heads are fused as ``(mean_h ∇A ⊙ A)⁺`` — attention weighted by how much it raises the target
class's logit — then rolled out like plain attention (:func:`vitroll.methods.rollout.rollout_vector`).
Unlike vit-explain, the discard step works per row and never drops the class token's column, and rows are
normalised as rows (vit-explain's ``a / a.sum(dim=-1)`` divides column ``j`` by row ``j``'s sum, by accident of
broadcasting).
"""

from __future__ import annotations

from torch import nn

from vitroll.methods.inputs import Inputs
from vitroll.methods.base import Saliency
from vitroll.methods.registry import register_method
from vitroll.methods.gradients import TargetClass, attention_gradients, positive_weighted_heads
from vitroll.methods.rollout import rollout_vector, warn_constant_rollout


@register_method("grad_rollout", needs_gradients=True, checks_constant_maps=False)  # warns with the cause
def grad_rollout(
    model: nn.Module,
    inputs: Inputs,
    *,
    target_class: TargetClass = None,
    discard_ratio: float = 0.9,
    attention_weight: float = 0.5,
) -> Saliency:
    """Gradient-weighted rollout maps (B, h, w), float32 on the model's device, for ``target_class`` (default:
    each image's prediction).

    Parameters
    ----------
    discard_ratio : float in [0, 1)
        vit-explain's default 0.9: keep only the strongest 10 % of each row.
    attention_weight : float in (0, 1]
        ``α`` in ``Â = rownorm(α·A + (1−α)·I)``.
    """
    recorded = attention_gradients(model, inputs, target_class)
    fused = [positive_weighted_heads(a, g, clamp="after_mean")
             for a, g in zip(recorded.attentions, recorded.gradients)]
    vector = rollout_vector(fused, recorded.layout, discard_ratio=discard_ratio, attention_weight=attention_weight)
    maps = recorded.layout.patch_values(vector)
    warn_constant_rollout(maps, recorded.layout, discard_ratio, "grad_rollout")
    return Saliency(maps, recorded.logits)
