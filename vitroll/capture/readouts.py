"""Attention readouts: how to get softmax probabilities out of one type of attention module.

Each registered module type says which ways it supports:

* **kernel swap** – for a module on timm's fused ``scaled_dot_product_attention`` (its ``fused_attn`` flag on), the
  recorder replaces that one call, while the module runs, by its own kernel, which returns the same output and
  records the probabilities on the way (:mod:`vitroll.capture.recorder`). Rotary embeddings and relative position
  bias need nothing special: the kernel receives the final queries, keys and mask.
* **unfused** – for a module already on its unfused path, or when gradients must flow through the probabilities
  (gradient methods), hook the dropout module that receives the probabilities (``softmax → attn_drop → @ v``),
  switching ``fused_attn`` off while recording. CaiT's talking heads, which mix logits across heads, only have
  this path.
* **query/key** – for a module without a probabilities module (the attention-pooling head), hook the modules
  whose outputs are the final queries and keys (B, H, N, D) and compute ``softmax(q kᵀ · scale)`` beside the
  model, in query blocks.

Adding a module type is one :class:`AttentionReadout` entry in :data:`READOUTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from vitroll.errors import UnsupportedModelError


@dataclass(frozen=True)
class AttentionReadout:
    """Capture recipe for one attention module type.

    Attributes
    ----------
    module_type : type
        The attention class (subclasses match too, unless registered themselves).
    probs_module : str or None
        Submodule whose output is the softmax probabilities (B, H, Q, N) on the unfused path; None when the
        module has no such submodule (then only the query/key path exists).
    fused_flag : str or None
        Attribute that selects the fused kernel; set to False while recording on the unfused path. None for
        modules that are always unfused.
    query_key_modules : (str, str) or None
        Submodules whose outputs are the final queries and keys (B, H, N, D), enabling the query/key path.
    scale_attr : str
        Attribute holding the logit scale (usually ``head_dim ** -0.5``).
    probs_from_input : callable, optional
        When set, the probabilities are this function of the *input* of ``probs_module`` (for modules that
        take them in another layout), not its output. It must only rearrange elements (a permutation or
        reshape), so that it also turns the gradient with respect to that input into the probabilities' gradient.
    """

    module_type: type
    probs_module: Optional[str] = "attn_drop"
    fused_flag: Optional[str] = "fused_attn"
    query_key_modules: Optional[tuple[str, str]] = None
    scale_attr: str = "scale"
    probs_from_input: Optional[Callable[[torch.Tensor], torch.Tensor]] = None


def _heads_last_to_first(probs: torch.Tensor) -> torch.Tensor:
    """(B, Q, N, H) → (B, H, Q, N)."""
    return probs.permute(0, 3, 1, 2)


def _default_readouts() -> list[AttentionReadout]:
    from timm.layers import Attention, AttentionPoolLatent, AttentionRope
    from timm.models.beit import Attention as BeitAttention
    from timm.models.cait import ClassAttn, TalkingHeadAttn
    from timm.models.eva import EvaAttention

    return [
        AttentionReadout(Attention),
        # the pooling query's attention: q_norm/k_norm feed the softmax directly; no dropout module to hook
        AttentionReadout(AttentionPoolLatent, probs_module=None, query_key_modules=("q_norm", "k_norm")),
        AttentionReadout(AttentionRope),
        AttentionReadout(EvaAttention),
        AttentionReadout(BeitAttention),
        AttentionReadout(ClassAttn),  # CaiT class attention: one query row (the class token)
        # talking heads: logits mixed across heads before the softmax, probabilities mixed after it; the
        # softmax output is the input of proj_w, heads last; there is no fused kernel
        AttentionReadout(TalkingHeadAttn, probs_module="proj_w", fused_flag=None,
                         probs_from_input=_heads_last_to_first),
    ]


READOUTS: list[AttentionReadout] = _default_readouts()


def readout_for(module: nn.Module) -> AttentionReadout:
    """The most specific registered readout for ``module`` (exact type first, then by inheritance)."""
    for readout in READOUTS:
        if type(module) is readout.module_type:
            return readout
    for readout in READOUTS:
        if isinstance(module, readout.module_type):
            return readout
    known = ", ".join(r.module_type.__name__ for r in READOUTS)
    raise UnsupportedModelError(
        f"attention module {type(module).__name__} has no registered readout (known: {known})"
    )
